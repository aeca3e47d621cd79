"""Parallelism versus the GPUs of a node, the NVLink domain and the target (docs/facts.md#racks-and-node-labels)."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.rules import Context, Hit, Severity, pools, rule


@rule("SP121", Severity.error, "tensor-parallel group spans nodes",
      warning_when="the platform has multi-node NVLink (NVL72)", acknowledge=True)
def tp_spans_nodes(ctx: Context) -> Iterator[Hit]:
    per_node = ctx.topology.gpus_per_node
    for role, path, pool in pools(ctx):
        if pool.tp_nodes > 1:
            if ctx.platform.multinode_nvlink:
                yield Hit(path + ("tensorParallel",), f"{role} tensorParallel={pool.tensor_parallel} spans "
                          f"{pool.tp_nodes} nodes of {per_node} GPUs; every all-reduce crosses trays over NVLink",
                          "prefer TP within a node and expert/data parallelism across nodes", Severity.warning)
            else:
                yield Hit(path + ("tensorParallel",), f"{role} tensorParallel={pool.tensor_parallel} exceeds the "
                          f"{per_node} GPUs of a {ctx.profile.spec.target.platform} node, which has no multi-node "
                          "NVLink", f"use tensorParallel <= {per_node}")


@rule("SP122", Severity.error, "replica larger than one NVLink domain")
def replica_exceeds_domain(ctx: Context) -> Iterator[Hit]:
    domain = ctx.platform.nvlink_domain_gpus
    for role, path, pool in pools(ctx):
        if pool.gpus_per_replica > domain:
            yield Hit(path, f"a {role} replica needs {pool.gpus_per_replica} GPUs (TP x DP x PP) but one NVLink "
                      f"domain of {ctx.profile.spec.target.platform} has {domain}",
                      "shrink the replica; traffic between NVLink domains crosses the scale-out network")


@rule("SP123", Severity.error, "pools need more GPUs than the target has")
def exceeds_target(ctx: Context) -> Iterator[Hit]:
    used, have = ctx.topology.gpus, ctx.topology.gpus_available
    if used > have:
        yield Hit(("spec", "placement", "pools"), f"the pools need {used} GPUs but target "
                  f"{ctx.profile.spec.target.platform} x{ctx.profile.spec.target.count} has {have}",
                  "lower replicas or raise target.count")


@rule("SP124", Severity.error, "nodesPerReplica disagrees with the GPUs a replica needs")
def nodes_disagree(ctx: Context) -> Iterator[Hit]:
    per_node = ctx.topology.gpus_per_node
    for role, path, pool in pools(ctx):
        need, asked = pool.nodes_needed, pool.spec.nodes_per_replica
        if asked is not None and asked != need:
            yield Hit(path + ("nodesPerReplica",), f"a {role} replica of {pool.gpus_per_replica} GPUs needs {need} "
                      f"node(s) of {per_node} GPUs, not {asked}", f"set nodesPerReplica: {need}")


@rule("SP125", Severity.error, "multi-node replica does not fill whole nodes")
def partial_nodes(ctx: Context) -> Iterator[Hit]:
    per_node = ctx.topology.gpus_per_node
    for role, path, pool in pools(ctx):
        if not pool.fills_nodes:
            yield Hit(path, f"a {role} replica of {pool.gpus_per_replica} GPUs spans nodes but does not fill "
                      f"them ({per_node} GPUs per node); the operator places whole pods per node",
                      f"make TP x DP x PP a multiple of {per_node}")


@rule("SP126", Severity.info, "GPUs of the target left idle")
def idle_gpus(ctx: Context) -> Iterator[Hit]:
    used, have = ctx.topology.gpus, ctx.topology.gpus_available
    if 0 < used < have and ctx.platform.kind == "rack":
        yield Hit(("spec", "placement", "pools"), f"the pools use {used} of {have} GPUs; {have - used} stay idle")
