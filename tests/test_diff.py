"""The diff engine: groups, rollout impact (held to render itself), invalidations, equality."""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin

import msgspec
import pytest

from stackpin.catalog import load_catalog
from stackpin.deploy.recreate import recreate_reasons
from stackpin.diff.engine import diff_stacks
from stackpin.diff.fields import Side, group_of, has_group, rollout
from stackpin.diff.inputs import Stack
from stackpin.diff.model import GROUP_TITLES, GroupId, Impact, Invalidated, SourceKind, StackDiff, StackRef
from stackpin.lock.lockfile import StackLock, effective_profile, read_lock, sha256, stack_digest
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import topology_of
from stackpin.render.build import build_objects
from tests.helpers import NULL, ROOT, apply, base_doc

LOCKS = ROOT / "lockfiles"
W = "spec.placement.pools.worker"
D = "spec.placement.pools.decode"


def shipped(name: str) -> StackLock:
    return read_lock(LOCKS / f"{name}.lock.yaml")


def edited(lock: StackLock, profile: dict[str, Any] | None = None, resolved: dict[str, Any] | None = None,
           **top: Any) -> StackLock:
    """A lock with fields of its profile / pins changed and its digests recomputed (a valid lock)."""
    data = lock.to_data(exclude_none=True)
    data["profile"] = effective_profile(StackProfile.from_data(apply(data["profile"], profile or {})))
    data["resolved"] = apply(data["resolved"], resolved or {})
    data.update(top)
    fresh = msgspec.convert(data, StackLock)
    data["metadata"]["profileDigest"] = sha256(fresh.profile)
    data["stackDigest"] = stack_digest(fresh.profile, fresh.resolved)
    return msgspec.convert(data, StackLock)


def lock_stack(lock: StackLock, source: str = "x.lock.yaml") -> Stack:
    ref = StackRef(source=source, kind=SourceKind.lock, name=lock.metadata.name, stack_digest=lock.stack_digest)
    return Stack(ref=ref, profile=lock.stack_profile, lock=lock)


def profile_stack(doc: dict[str, Any], source: str = "p.yaml") -> Stack:
    profile = StackProfile.from_data(doc)
    return Stack(ref=StackRef(source=source, kind=SourceKind.profile, name=profile.name), profile=profile)


def diff_docs(a: dict[str, Any], b: dict[str, Any]) -> StackDiff:
    return diff_stacks(profile_stack(a, "a.yaml"), profile_stack(b, "b.yaml"))


def group(diff: StackDiff, gid: GroupId) -> Any:
    found = [g for g in diff.groups if g.id == gid]
    assert found, f"no {gid} group in {diff.one_line()}"
    return found[0]


# --- the GB300 story ------------------------------------------------------------------------------

def test_launch_to_tuned_shows_the_five_serving_changes_as_five_groups() -> None:
    diff = diff_stacks(lock_stack(shipped("gb300-launch")), lock_stack(shipped("gb300-tuned")))
    ids = [g.id for g in diff.groups]
    five = [GroupId.kernels, GroupId.autotune, GroupId.cuda_graphs, GroupId.speculative, GroupId.placement]
    assert ids[:5] == five
    # ... plus what else the two honestly differ in: the KV-cache dtype each attention kernel stores (the
    # launch's FlashInfer kernel keeps plain bf16 rows, the tuned FlashMLA one the packed fp8_ds_mla record),
    # the service target, pins and metadata.
    assert ids[5:] == [GroupId.model, GroupId.service, GroupId.pins, GroupId.metadata]
    assert (group(diff, GroupId.model).changes[0].old, group(diff, GroupId.model).changes[0].new) == (
        "auto", "fp8_ds_mla")
    assert diff.impact == Impact.recreate and not diff.equal and diff.pins_compared
    assert diff.one_line() == ("kernels, autotune, cuda-graphs, speculative, placement, model, service, pins, "
                               "metadata (recreate)")
    kernels = group(diff, GroupId.kernels)
    moe = next(c for c in kernels.changes if c.path == "spec.kernels.moe")
    assert (moe.old, moe.new) == ("flashinfer_cutlass", "deep_gemm_mega_moe")
    placement = group(diff, GroupId.placement)
    assert placement.impact == Impact.recreate
    assert any("frontend, prefill, decode -> frontend, worker" in r for r in placement.recreate_reasons)
    # A KV-cache dtype change invalidates accuracy too: fp8_ds_mla quantizes what bf16 rows kept.
    assert {i.what for i in diff.invalidates} == {Invalidated.accuracy, Invalidated.benchmark}


# --- impact classes -------------------------------------------------------------------------------

def test_impact_none_for_metadata() -> None:
    a = base_doc()
    diff = diff_docs(a, apply(base_doc(), {"metadata.labels.team": "serving"}))
    [g] = diff.groups
    assert (g.id, g.impact, g.restarts) == (GroupId.metadata, Impact.none, ())
    assert g.changes[0].path == "metadata.labels.team" and g.changes[0].old is None
    assert diff.impact == Impact.none and not diff.equal and diff.one_line() == "metadata (none)"


def test_impact_restart_names_the_pools_that_roll() -> None:
    a = base_doc("gb300-disagg-wide-ep")
    diff = diff_docs(a, apply(base_doc("gb300-disagg-wide-ep"), {f"{D}.maxNumSeqs": 128}))
    [g] = diff.groups
    assert (g.id, g.impact, g.restarts) == (GroupId.placement, Impact.restart, ("decode",))
    assert diff.restarts == ("decode",)


@pytest.mark.parametrize(("name", "changes", "reason"), [
    ("gb300-tuned", {"spec.placement.mode": "disaggregated", "spec.placement.pools.prefill": {"tensorParallel": 4},
                     "spec.placement.pools.decode": {"tensorParallel": 4}}, "the component set changes"),
    ("gb300-disagg-wide-ep", {f"{D}.dataParallel": 1, f"{D}.nodesPerReplica": NULL},
     "decode changes from multinode to single-node (4 -> 1 nodes per replica)"),
    ("gb300-tuned", {f"{W}.tensorParallel": 8}, "worker changes from single-node to multinode (1 -> 2 nodes"),
    # Multinode on both sides: the 1.6 webhook holds multinode.nodeCount immutable.
    ("gb300-disagg-wide-ep", {f"{D}.dataParallel": 4, f"{D}.nodesPerReplica": 2},
     "decode's multinode.nodeCount changes (4 -> 2)"),
])
def test_impact_recreate_where_the_admission_webhook_refuses(name: str, changes: dict[str, Any], reason: str) -> None:
    diff = diff_docs(base_doc(name), apply(base_doc(name), changes))
    placement = group(diff, GroupId.placement)
    assert placement.impact == Impact.recreate and diff.impact == Impact.recreate
    assert any(reason in r for r in placement.recreate_reasons), placement.recreate_reasons
    assert diff.restarts == ()


def test_renaming_the_deployment_is_a_recreate() -> None:
    diff = diff_docs(base_doc(), apply(base_doc(), {"metadata.deployment": "dsv41-next"}))
    [g] = diff.groups
    assert (g.id, g.impact) == (GroupId.metadata, Impact.recreate)
    assert "a new DynamoGraphDeployment" in g.recreate_reasons[0]


def test_replicas_alone_scale_without_a_restart() -> None:
    diff = diff_docs(base_doc(), apply(base_doc(), {f"{W}.replicas": 12}))
    [change] = group(diff, GroupId.placement).changes
    assert change.impact == Impact.none and "scales" in (change.note or "")


# --- every group ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("gid", "changes"), [
    (GroupId.kernels, {"spec.kernels.attention": "FLASHINFER_MLA_SPARSE_DSV41"}),
    (GroupId.kernels, {"spec.versions.vllm": "0.33.0"}),
    (GroupId.autotune, {"spec.autotune.mode": "tune"}),
    (GroupId.cuda_graphs, {"spec.cudaGraphs.mode": "PIECEWISE"}),
    (GroupId.speculative, {"spec.speculative.numSpeculativeTokens": 3}),
    (GroupId.placement, {f"{W}.gpuMemoryUtilization": 0.85}),
    (GroupId.target, {"spec.target.platform": "vera-rubin-nvl72"}),
    (GroupId.model, {"spec.model.weights": "fp8"}),
    (GroupId.model, {"spec.kvCache.dtype": "auto"}),
    (GroupId.service, {"spec.service.agents": 2048}),
    (GroupId.pins, {"spec.mirrors": {"nvcr.io": "mirror.example:5000"}}),
    (GroupId.metadata, {"metadata.name": "gb300-next"}),
])
def test_each_group(gid: GroupId, changes: dict[str, Any]) -> None:
    diff = diff_docs(base_doc(), apply(base_doc(), changes))
    assert [g.id for g in diff.groups] == [gid]
    assert diff.groups[0].title == GROUP_TITLES[gid]


def test_pins_group_compares_digests_of_two_locks() -> None:
    a = shipped("gb300-tuned")
    digest = "sha256:" + "ab" * 32
    b = edited(a, resolved={"images.runtime.digest": digest,
                            "images.runtime.pinned": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime@{digest}"})
    diff = diff_stacks(lock_stack(a), lock_stack(b))
    [g] = diff.groups
    assert g.id == GroupId.pins and g.impact == Impact.restart and g.restarts == ("frontend", "worker")
    assert [c.path for c in g.changes] == ["resolved.images.runtime.digest"]  # `pinned` is derived: not repeated


def test_a_profile_has_no_pins_to_compare() -> None:
    lock = shipped("gb300-tuned")
    diff = diff_stacks(lock_stack(lock), profile_stack(base_doc()))
    assert diff.equal and not diff.pins_compared and diff.groups == ()
    assert diff.one_line() == "no changes"


# --- equality -------------------------------------------------------------------------------------

def test_equal_stack_digests_are_equal_whatever_their_provenance() -> None:
    a = shipped("gb300-tuned")
    b = edited(a, resolved={"images.runtime.resolvedVia": "registry nvcr.io", "model.resolvedVia": "hub",
                            "images.runtime.standIn": False},
               metadata={**a.metadata.to_data(), "profile": "elsewhere/gb300-tuned.yaml"})
    assert b.stack_digest == a.stack_digest and b.resolved != a.resolved
    diff = diff_stacks(lock_stack(a), lock_stack(b))
    assert diff.equal and diff.groups == () and diff.impact == Impact.none


# --- invalidations --------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [
    {"spec.versions.vllm": "0.33.0"},
    {"spec.versions.flashinfer": "0.7.2.post1"},
    {"spec.cudaGraphs.captureSizes": [8, 16, 32], "spec.cudaGraphs.maxCaptureSize": 32},
    {f"{W}.tensorParallel": 2},
])
def test_a_pinned_autotune_cache_is_invalidated(changes: dict[str, Any]) -> None:
    diff = diff_docs(base_doc(), apply(base_doc(), changes))
    [inv] = [i for i in diff.invalidates if i.what == Invalidated.autotune_cache]
    assert set(inv.because) <= set(changes) and inv.because
    assert "still replays A's autotune cache" in inv.detail


def test_no_autotune_invalidation_without_a_pinned_cache() -> None:
    a = apply(base_doc(), {"spec.autotune": {"mode": "off"}})
    diff = diff_docs(a, apply(base_doc(), {"spec.autotune": {"mode": "off"}, "spec.versions.vllm": "0.33.0"}))
    assert Invalidated.autotune_cache not in {i.what for i in diff.invalidates}


@pytest.mark.parametrize(("changes", "what"), [
    ({"spec.model.weights": "fp8"}, Invalidated.accuracy),
    ({"spec.kvCache.dtype": "auto"}, Invalidated.accuracy),
    ({"spec.model.revision": "0123456789abcdef0123456789abcdef01234567"}, Invalidated.accuracy),
    ({"spec.kernels.moe": "flashinfer_cutlass"}, Invalidated.benchmark),
    ({f"{W}.maxNumSeqs": 32}, Invalidated.benchmark),
])
def test_precision_and_model_need_accuracy_kernels_and_placement_a_benchmark(
        changes: dict[str, Any], what: Invalidated) -> None:
    diff = diff_docs(base_doc(), apply(base_doc(), changes))
    assert [i.what for i in diff.invalidates] == [what]


def test_cuda_graph_or_speculative_changes_alone_invalidate_no_benchmark() -> None:
    diff = diff_docs(base_doc(), apply(base_doc(), {"spec.speculative.numSpeculativeTokens": 3}))
    assert diff.invalidates == ()


# --- the rollout table agrees with render ---------------------------------------------------------

def _components(lock: StackLock) -> dict[str, dict[str, Any]]:
    [dgd] = [o for o in build_objects(lock) if o["kind"] == "DynamoGraphDeployment"]
    return {c["name"]: {k: v for k, v in c.items() if k != "replicas"} for c in dgd["spec"]["components"]}


def _rendered_rollout(a: StackLock, b: StackLock) -> tuple[Impact, set[str]]:
    """What render says: where `apply` would delete and recreate the rendered DGD (deploy.recreate), a
    recreate; otherwise the components whose pod template (or shape) differs roll."""
    [da], [db] = ([o for o in build_objects(x) if o["kind"] == "DynamoGraphDeployment"] for x in (a, b))
    if recreate_reasons(da, db):
        return Impact.recreate, set()
    ca, cb = _components(a), _components(b)
    rolled = {n for n in ca if ca[n] != cb[n]}
    return (Impact.restart if rolled else Impact.none), rolled


DIGEST = "sha256:" + "cd" * 32
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("gb300-tuned", {"spec.kernels.moe": "flashinfer_cutlass"}, {}),
    ("gb300-tuned", {"spec.kernels.env.NCCL_DEBUG": "INFO"}, {}),
    ("gb300-tuned", {"spec.kvCache.blockSize": 32}, {}),
    ("gb300-tuned", {"spec.kvCache.prefixCaching": False}, {}),
    ("gb300-tuned", {"spec.kvCache.events": False}, {}),
    ("gb300-tuned", {"spec.autotune.mode": "off"}, {}),
    ("gb300-tuned", {"spec.cudaGraphs.captureSizes": [8, 16]}, {}),
    ("gb300-tuned", {"spec.speculative.numSpeculativeTokens": 3}, {}),
    ("gb300-tuned", {"spec.placement.router": "round-robin"}, {}),
    ("gb300-tuned", {"spec.placement.migrationLimit": 0}, {}),
    ("gb300-tuned", {f"{W}.maxNumSeqs": 32}, {}),
    ("gb300-tuned", {f"{W}.replicas": 9}, {}),
    ("gb300-tuned", {f"{W}.speculative": {"method": None}}, {}),
    ("gb300-tuned", {f"{W}.tensorParallel": 8}, {}),
    ("gb300-disagg-wide-ep", {f"{D}.dataParallel": 4, f"{D}.nodesPerReplica": 2}, {}),
    ("gb300-tuned", {"spec.fallbacks.cpuOffloadGib": 4}, {}),
    ("gb300-tuned", {"spec.fallbacks.precisionEmulation": ["fp8"]}, {}),
    ("gb300-tuned", {"spec.target.count": 2}, {}),
    ("gb300-tuned", {"spec.target.platform": "vera-rubin-nvl72"}, {}),
    ("gb300-tuned", {"spec.model.maxModelLen": 131072}, {}),
    ("gb300-tuned", {"spec.model.weights": "fp8"}, {}),
    ("gb300-tuned", {"spec.model.revision": "v1"}, {}),
    ("gb300-tuned", {"spec.modelStore.mountPath": "/models"}, {}),
    ("gb300-tuned", {"spec.service.agents": 99}, {}),
    ("gb300-tuned", {"spec.mirrors": {"nvcr.io": "mirror.example"}}, {}),
    ("gb300-tuned", {"spec.attestation": False}, {}),
    ("gb300-tuned", {f"{W}.engineArgs": {"--max-logprobs": 8}}, {}),
    ("gb300-disagg-wide-ep", {f"{D}.dynamoArgs": {"--engine-request-limit": 2}}, {}),
    ("gb300-tuned", {"metadata.labels.team": "serving"}, {}),
    ("gb300-tuned", {"metadata.name": "renamed"}, {}),
    ("gb300-tuned", {"spec.versions.nixl": "1.4.2", "spec.versions.flashinfer": "0.7.2"}, {}),
    ("gb300-tuned", {"spec.versions.runtimeImage": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1-b"}, {}),
    ("gb300-tuned", {}, {"images.runtime.digest": DIGEST,
                         "images.runtime.pinned": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime@{DIGEST}"}),
    ("gb300-tuned", {}, {"model.revision": "0123456789abcdef0123456789abcdef01234567"}),
    ("gb300-tuned", {}, {"autotuneCache.digest": DIGEST,
                         "autotuneCache.pinned": f"nvcr.io/nvidia/ai-dynamo/autotune-cache@{DIGEST}"}),
    ("gb300-disagg-wide-ep", {"spec.placement.kvConnector": "LMCacheConnectorV1"}, {}),
    ("gb300-disagg-wide-ep", {f"{D}.maxNumSeqs": 32}, {}),
    ("gb300-disagg-wide-ep", {f"{D}.nodesPerReplica": 8}, {}),
    ("gb300-disagg-wide-ep", {f"{D}.dataParallel": 1, f"{D}.nodesPerReplica": NULL}, {}),
    ("gb300-disagg-wide-ep", {"spec.speculative.numSpeculativeTokens": 2}, {}),
    ("gb300-disagg-wide-ep", {"spec.placement.mode": "colocated", W: {"tensorParallel": 4}}, {}),
    ("gb300-launch", {"spec.placement.kvConnector": NULL}, {}),
    ("gb300-launch", {"spec.kernels.attention": "FLASHMLA_MEGA_ATTN_DSV41"}, {}),
]


@pytest.mark.parametrize(("name", "profile", "resolved"), CASES,
                         ids=[f"{n}:{','.join([*p, *r])}" for n, p, r in CASES])
def test_rollout_names_exactly_the_components_render_changes(name: str, profile: dict[str, Any],
                                                             resolved: dict[str, Any]) -> None:
    a = shipped(name)
    b = edited(a, profile, resolved)
    want_impact, want_rolled = _rendered_rollout(a, b)
    diff = diff_stacks(lock_stack(a), lock_stack(b))
    assert not diff.equal
    assert (diff.impact, set(diff.restarts)) == (want_impact, want_rolled), diff.one_line()


# --- every field has a rule -----------------------------------------------------------------------

def _leaf_paths(model: type[msgspec.Struct], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for field in msgspec.structs.fields(model):
        key = field.encode_name
        declared = get_args(field.type)[0] if get_origin(field.type) is Annotated else field.type
        inner = [a for a in get_args(declared) if isinstance(a, type) and issubclass(a, msgspec.Struct)]
        if isinstance(declared, type) and issubclass(declared, msgspec.Struct):
            inner = [declared]
        if inner:
            out += _leaf_paths(inner[0], prefix + (key,))
        else:
            out.append(prefix + (key,))
    return out


def test_every_profile_field_has_a_group_and_a_rollout_rule() -> None:
    catalog = load_catalog()
    profile = shipped("gb300-tuned").stack_profile
    side = Side(profile, None, topology_of(profile, catalog))
    paths = [p for p in _leaf_paths(StackProfile) if p[0] in ("metadata", "spec")]
    paths = [("spec", "placement", "pools", "worker", *p[4:]) if p[:3] == ("spec", "placement", "pools") else p
             for p in paths]
    assert len(paths) > 60
    missing = [p for p in paths if not has_group(p)]
    assert missing == []
    unruled = [p for p in paths if (rollout(p, side, side, catalog)[2] or "").startswith("no rollout rule")]
    assert unruled == []
    assert group_of(("spec", "placement", "pools", "decode", "speculative", "method")) == GroupId.speculative
