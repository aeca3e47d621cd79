"""Colocated and disaggregated placement: pools, KV transfer, NIXL compatibility (FACTS.md s7)."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.profile.model import Placement
from stackpin.validate import Context, Hit, Severity, pools, rule

_P = ("spec", "placement")


@rule("SP151", Severity.error, "disaggregated pools without a KV connector")
def no_connector(ctx: Context) -> Iterator[Hit]:
    placement = ctx.profile.spec.placement
    if placement.mode == Placement.disaggregated and not placement.kv_connector:
        yield Hit(_P, "disaggregated placement moves KV from prefill to decode and needs kvConnector",
                  "set kvConnector: NixlConnector")


@rule("SP152", Severity.error, "placement lacks the pools it runs")
def missing_pools(ctx: Context) -> Iterator[Hit]:
    placement = ctx.profile.spec.placement
    needed = ("worker",) if placement.mode == Placement.colocated else ("prefill", "decode")
    for role in needed:
        if getattr(placement.pools, role) is None:
            yield Hit(_P + ("pools",), f"{placement.mode} placement needs a {role} pool")


@rule("SP153", Severity.warning, "pools the placement does not run")
def unused_pools(ctx: Context) -> Iterator[Hit]:
    placement = ctx.profile.spec.placement
    unused = ("prefill", "decode") if placement.mode == Placement.colocated else ("worker",)
    for role in unused:
        if getattr(placement.pools, role) is not None:
            yield Hit(_P + ("pools", role), f"{placement.mode} placement ignores the {role} pool",
                      "remove it, or switch placement.mode")


@rule("SP154", Severity.error, "prefill and decode disagree on speculative settings")
def spec_mismatch(ctx: Context) -> Iterator[Hit]:
    active = ctx.profile.spec.placement.active_pools()
    if ctx.profile.spec.placement.mode != Placement.disaggregated or not {"prefill", "decode"} <= active.keys():
        return
    prefill = ctx.profile.speculative_for(active["prefill"])
    decode = ctx.profile.speculative_for(active["decode"])
    if prefill != decode:
        yield Hit(_P + ("pools", "decode", "speculative"), "prefill and decode pools run different speculative "
                  "settings; NIXL's compatibility hash covers speculative_config and refuses the KV transfer",
                  "give both pools the same speculative settings")


@rule("SP155", Severity.error, "unknown KV connector")
def unknown_connector(ctx: Context) -> Iterator[Hit]:
    connector = ctx.profile.spec.placement.kv_connector
    if connector and connector not in ctx.catalog.engine.kv_connectors:
        yield Hit(_P + ("kvConnector",), f"unknown KV connector {connector!r}",
                  f"one of: {', '.join(ctx.catalog.engine.kv_connectors)}")


@rule("SP156", Severity.warning, "KV connector on a colocated stack")
def colocated_connector(ctx: Context) -> Iterator[Hit]:
    placement = ctx.profile.spec.placement
    if placement.mode == Placement.colocated and placement.kv_connector:
        yield Hit(_P + ("kvConnector",), "colocated workers do prefill and decode on the same GPUs; the KV "
                  "connector is unused", "remove kvConnector")


@rule("SP157", Severity.warning, "more agents than decode sequences")
def agents_exceed_seqs(ctx: Context) -> Iterator[Hit]:
    decode_role = "worker" if ctx.profile.spec.placement.mode == Placement.colocated else "decode"
    for role, _path, pool in pools(ctx):
        if role == decode_role and pool.max_num_seqs is not None:
            slots = pool.max_num_seqs * pool.data_parallel * pool.replicas
            agents = ctx.profile.spec.service.agents
            if agents > slots:
                yield Hit(("spec", "service", "agents"), f"{agents} agents but the {role} pool runs at most {slots} "
                          "sequences at once (maxNumSeqs x dataParallel x replicas); the rest queue and miss the "
                          "TTFT target", "raise replicas or maxNumSeqs, or lower service.agents")


@rule("SP158", Severity.warning, "deployment and component names too long for Grove")
def grove_name_length(ctx: Context) -> Iterator[Hit]:
    # Dynamo's admission webhook, with Grove: DGD name + component name <= 45 characters (FACTS.md s7).
    limit = ctx.catalog.engine.grove_name_limit
    deployment = ctx.profile.metadata.deployment
    longest = max(["frontend", *ctx.profile.spec.placement.active_pools()], key=len)
    if len(deployment) + len(longest) > limit:
        yield Hit(("metadata", "deployment"), f"{deployment!r} + component {longest!r} is "
                  f"{len(deployment) + len(longest)} characters; with Grove, Dynamo admits at most {limit}",
                  f"shorten metadata.deployment to {limit - len(longest)} characters or fewer")
