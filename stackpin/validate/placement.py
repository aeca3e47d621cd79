"""Colocated or disaggregated placement: pools, KV transfer, NIXL compatibility (docs/facts.md#dynamo-command-lines)."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.profile.model import Placement, StackProfile
from stackpin.profile.topology import Role, Topology
from stackpin.rules import Context, Hit, Severity, pool_path, pools, rule
from stackpin.validate.admission import GroveComponent, pcs_name

_P = ("spec", "placement")


@rule("SP151", Severity.error, "disaggregated pools without a KV connector")
def no_connector(ctx: Context) -> Iterator[Hit]:
    placement = ctx.profile.spec.placement
    if placement.mode == Placement.disaggregated and not placement.kv_connector:
        yield Hit(_P, "disaggregated placement moves KV from prefill to decode and needs kvConnector",
                  "set kvConnector: NixlConnector")


@rule("SP152", Severity.error, "placement lacks the pools it runs")
def missing_pools(ctx: Context) -> Iterator[Hit]:
    for role in ctx.topology.missing:
        yield Hit(_P + ("pools",), f"{ctx.topology.mode} placement needs a {role} pool")


@rule("SP153", Severity.warning, "pools the placement does not run")
def unused_pools(ctx: Context) -> Iterator[Hit]:
    for role in ctx.topology.ignored:
        yield Hit(pool_path(role), f"{ctx.topology.mode} placement ignores the {role} pool",
                  "remove it, or switch placement.mode")


def speculative_mismatch(profile: StackProfile, topology: Topology) -> bool:
    """Whether prefill and decode run different speculative settings: NIXL then refuses every KV
    transfer (its compatibility hash covers speculative_config). SP154 reports it; render refuses it."""
    active = topology.by_role
    if Role.prefill not in active or Role.decode not in active:
        return False
    return profile.speculative_for(active[Role.prefill].spec) != profile.speculative_for(active[Role.decode].spec)


def speculative_mismatch_hit(profile: StackProfile, topology: Topology) -> Hit | None:
    """SP154's finding (render refuses with the same words)."""
    if not speculative_mismatch(profile, topology):
        return None
    return Hit(_P + ("pools", "decode", "speculative"), "prefill and decode pools run different speculative "
               "settings; NIXL's compatibility hash covers speculative_config and refuses the KV transfer",
               "give both pools the same speculative settings")


@rule("SP154", Severity.error, "prefill and decode disagree on speculative settings")
def spec_mismatch(ctx: Context) -> Iterator[Hit]:
    if (hit := speculative_mismatch_hit(ctx.profile, ctx.topology)) is not None:
        yield hit


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
    for role, _path, pool in pools(ctx):
        if role == ctx.topology.decode_role and pool.spec.max_num_seqs is not None:
            slots = pool.spec.max_num_seqs * pool.data_parallel * pool.replicas
            agents = ctx.profile.spec.service.agents
            if agents > slots:
                yield Hit(("spec", "service", "agents"), f"{agents} agents but the {role} pool runs at most {slots} "
                          "sequences at once (maxNumSeqs x dataParallel x replicas); the rest queue and miss the "
                          "TTFT target", "raise replicas or maxNumSeqs, or lower service.agents")


@rule("SP158", Severity.warning, "Grove names shortened by Dynamo's operator")
def grove_name_length(ctx: Context) -> Iterator[Hit]:
    # Dynamo's webhook counts PodCliqueSet + component (+ longest PodClique) names against a budget, after the
    # operator shortens the PodCliqueSet name to fit (catalog dynamo_admission.yaml): stackpin's component names
    # (at most 7 + 11 characters) always fit then, whatever the deployment's name, so the webhook refuses none
    # (validate --manifests checks the budget on any DGD); what remains is that pods carry a hashed name.
    facts = ctx.catalog.dynamo_admission.grove_names
    components = [GroveComponent("frontend", False),
                  *(GroveComponent(p.role, p.spans_nodes) for p in ctx.topology.pools)]
    deployment = ctx.profile.metadata.deployment
    short = pcs_name(deployment, components, facts)
    if short != deployment:
        yield Hit(("metadata", "deployment"), f"{deployment!r} ({len(deployment)} characters) is longer than the "
                  f"{len(short)} the Grove name budget ({facts.limit}) leaves it: Dynamo's operator names the "
                  f"PodCliqueSet {short!r}, and the pods carry that name",
                  f"shorten metadata.deployment to {len(short)} characters or fewer to keep the names whole")
