"""The shape of a stack: which pools run, their parallel sizes, and how a replica lays out over nodes.

Computed once from profile and catalog (`topology_of`); validation, the summary, render, capture
and autotune verification all read it, so none of them re-derives a node count or a role list.
It is built for any profile that loads, invalid ones included: where a replica cannot be laid out
the numbers say so (`splits_evenly`, `pod_fits_node`) and the validation rules report it.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from stackpin.catalog import Catalog, load_catalog
from stackpin.profile.model import Placement, Pool, StackProfile


class Role(StrEnum):
    """A pool's role: the placement's closed set (a StrEnum: written and compared as its value)."""

    worker = "worker"
    prefill = "prefill"
    decode = "decode"


# The roles each placement runs, in the order they are listed, validated and rendered.
ROLES: dict[Placement, tuple[Role, ...]] = {
    Placement.colocated: (Role.worker,),
    Placement.disaggregated: (Role.prefill, Role.decode),
}
ALL_ROLES: tuple[Role, ...] = tuple(Role)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def nodes_per_replica_for(gpus_per_replica: int, gpus_per_node: int) -> int:
    """The nodesPerReplica a written pool states for a replica of that many GPUs: the nodes it fills, at
    least one (search writes candidate pools before any topology of them exists)."""
    return max(1, _ceil_div(gpus_per_replica, gpus_per_node))


def exceeds_node(gpus_per_replica: int, gpus_per_node: int) -> bool:
    """A replica of that many GPUs cannot sit on one node (its expert all-to-all crosses nodes)."""
    return gpus_per_replica > gpus_per_node


def model_parallel_of(pool: Pool) -> int:
    """GPUs one data-parallel rank's model spans: TP x PP (vLLM's world before DP folds in)."""
    return pool.tensor_parallel * pool.pipeline_parallel


def shape_label(tensor_parallel: int, pipeline_parallel: int = 1, data_parallel: int = 1,
                expert_parallel_size: int = 1) -> str:
    """`TP2 x DP8 EP16`: a pool's parallel shape, the one wording every message and table uses. TP, PP
    and DP multiply into the replica's GPUs (`x`); EP is not a further factor (it spans TP x DP), so it
    follows after a space. PP, DP and EP are named only above 1."""
    factors = [f"TP{tensor_parallel}"] + [f"{name}{size}" for name, size in (("PP", pipeline_parallel),
                                                                               ("DP", data_parallel)) if size > 1]
    label = " x ".join(factors)
    return f"{label} EP{expert_parallel_size}" if expert_parallel_size > 1 else label


class PoolTopology(msgspec.Struct, frozen=True):
    """One active pool: its parallel sizes and the layout of one replica over nodes and pods."""

    role: Role
    spec: Pool  # the pool as the profile states it (engine settings live there)
    replicas: int
    tensor_parallel: int
    data_parallel: int
    pipeline_parallel: int
    expert_parallel: bool
    expert_parallel_size: int  # TP x DP with expert parallelism on, else 1
    gpus_per_replica: int  # TP x DP x PP
    gpus_per_node: int  # of the target platform
    nodes_needed: int  # nodes the replica's GPUs fill
    nodes_per_replica: int  # as deployed: the profile's nodesPerReplica, else nodes_needed
    gpus_per_pod: int  # one node's share of a replica (a pod per node)

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas

    @property
    def spans_nodes(self) -> bool:
        return self.nodes_per_replica > 1

    @property
    def tp_nodes(self) -> int:
        """Nodes one tensor-parallel group needs: above 1, every all-reduce leaves the node."""
        return _ceil_div(self.tensor_parallel, self.gpus_per_node)

    @property
    def fills_nodes(self) -> bool:
        """A replica that needs several nodes uses all their GPUs (whole pods per node)."""
        return self.nodes_needed == 1 or self.gpus_per_replica % self.gpus_per_node == 0

    @property
    def model_parallel(self) -> int:
        """GPUs the dense weights are split over: TP x PP."""
        return model_parallel_of(self.spec)

    @property
    def expert_shards(self) -> int:
        """GPUs the routed experts are split over: the expert-parallel group per PP stage, else TP x PP."""
        return self.expert_parallel_size * self.pipeline_parallel if self.expert_parallel else self.model_parallel

    @property
    def dp_per_pod(self) -> int:
        """Data-parallel ranks one pod hosts, TP groups kept whole within a pod."""
        return self.gpus_per_pod // self.tensor_parallel

    def layout_problem(self) -> str | None:
        """Why one replica cannot become identical pods, one per node; None when it can."""
        if not self.splits_evenly:
            return f"{self.gpus_per_replica} GPUs per replica do not split evenly over {self.nodes_per_replica} nodes"
        if not self.pod_fits_node:
            return f"{self.gpus_per_pod} GPUs per pod exceed the {self.gpus_per_node} GPUs of one node"
        return None

    @property
    def splits_evenly(self) -> bool:
        return self.gpus_per_replica % self.nodes_per_replica == 0

    @property
    def pod_fits_node(self) -> bool:
        return self.gpus_per_pod <= self.gpus_per_node


class Topology(msgspec.Struct, frozen=True):
    """The whole stack: the roles its placement runs and the shape of each pool the profile gives."""

    mode: Placement
    roles: tuple[Role, ...]  # what the placement runs, whether or not the profile gives each pool
    pools: tuple[PoolTopology, ...]  # the pools of `roles` the profile gives, in role order
    ignored: tuple[Role, ...]  # pools the profile gives that the placement does not run
    gpus_per_node: int
    gpus_available: int  # every GPU of the target: the platform's times target.count

    @property
    def by_role(self) -> dict[Role, PoolTopology]:
        return {p.role: p for p in self.pools}

    @property
    def missing(self) -> tuple[Role, ...]:
        """Roles the placement runs but the profile gives no pool for."""
        have = self.by_role
        return tuple(r for r in self.roles if r not in have)

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def spans_nodes(self) -> bool:
        return any(p.spans_nodes for p in self.pools)

    @property
    def decode_role(self) -> Role:
        """The role that decodes (and so holds the running sequences)."""
        return Role.worker if self.mode == Placement.colocated else Role.decode


def pool_topology(role: Role, pool: Pool, gpus_per_node: int) -> PoolTopology:
    tp, dp, pp = pool.tensor_parallel, pool.data_parallel, pool.pipeline_parallel
    gpus = tp * dp * pp
    needed = _ceil_div(gpus, gpus_per_node)
    nodes = pool.nodes_per_replica or needed
    return PoolTopology(
        role=role, spec=pool, replicas=pool.replicas, tensor_parallel=tp, data_parallel=dp, pipeline_parallel=pp,
        expert_parallel=pool.expert_parallel, expert_parallel_size=tp * dp if pool.expert_parallel else 1,
        gpus_per_replica=gpus, gpus_per_node=gpus_per_node, nodes_needed=needed, nodes_per_replica=nodes,
        gpus_per_pod=gpus // nodes,
    )


def topology_of(profile: StackProfile, catalog: Catalog | None = None) -> Topology:
    """The one place a stack's shape is computed."""
    catalog = catalog or load_catalog()
    target = profile.spec.target
    platform = catalog.platforms[target.platform]
    placement = profile.spec.placement
    mode = Placement(placement.mode)
    roles = ROLES[mode]
    given = {r: p for r in ALL_ROLES if (p := getattr(placement.pools, r)) is not None}
    return Topology(
        mode=mode, roles=roles,
        pools=tuple(pool_topology(r, given[r], platform.gpus_per_node) for r in roles if r in given),
        ignored=tuple(r for r in ALL_ROLES if r in given and r not in roles),
        gpus_per_node=platform.gpus_per_node, gpus_available=platform.total_gpus * target.count,
    )
