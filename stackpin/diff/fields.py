"""What each field of a stack is, and what changing it takes: the tables behind the diff engine.

`group_of` puts a field in its group; `rollout` says which components' pods change when it does
(what render puts in each pod template); `recreate_reasons` reads the two topologies for the changes
the Dynamo admission webhook refuses in place (docs/facts.md#admission-and-rollouts: the component
set, and single-node <-> multinode); `invalidations` says what else goes stale. tests/test_diff.py
holds `rollout` to render itself: for single-field edits of a shipped lock, the components whose
rendered pod templates differ are exactly the ones named here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from stackpin.backends import engine_of
from stackpin.backends.base import kv_events_enabled
from stackpin.catalog import Catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.diff.model import GroupId, Impact, Invalidated, Invalidation
from stackpin.lock.lockfile import StackLock
from stackpin.profile.model import AutotuneMode, Placement, StackProfile
from stackpin.profile.topology import ALL_ROLES, PoolTopology, Topology

Path = tuple[str, ...]
FRONTEND = "frontend"
_ORDER = {name: i for i, name in enumerate((FRONTEND, *ALL_ROLES))}


@dataclass(frozen=True)
class Side:
    """One stack as the rules read it: the profile, its lock when there is one, its shape."""

    profile: StackProfile
    lock: StackLock | None
    topology: Topology

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(p.role for p in self.topology.pools)

    def pool(self, role: str) -> PoolTopology | None:
        return next((p for p in self.topology.pools if p.role == role), None)

    @property
    def replayed_cache(self) -> str | None:
        """The autotune cache reference this stack replays, if any."""
        autotune = self.profile.spec.autotune
        return autotune.cache if autotune.mode == AutotuneMode.replay else None


def roll_order(names: Iterable[str]) -> tuple[str, ...]:
    """Frontend first, then the pools in role order."""
    return tuple(sorted(set(names), key=lambda n: (_ORDER.get(n, len(_ORDER)), n)))


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def path_text(path: Path) -> str:
    """`spec.kernels.env.VLLM_X`; a key that is not a plain word is bracketed: `labels[stackpin.dev/story]`."""
    out = ""
    for key in path:
        out += (f".{key}" if out else key) if _PLAIN_KEY.fullmatch(key) else f"[{key}]"
    return out


# --- groups --------------------------------------------------------------------------------------

# First match wins; "*" matches any one key. Every field of the profile model has a row
# (tests/test_diff.py walks the model to check).
_GROUPS: tuple[tuple[Path, GroupId], ...] = (
    (("metadata",), GroupId.metadata),
    (("spec", "engine"), GroupId.engine),
    (("spec", "versions"), GroupId.kernels),
    (("spec", "kernels"), GroupId.kernels),
    (("spec", "kvCache", "dtype"), GroupId.model),  # the KV cache's precision
    (("spec", "kvCache"), GroupId.kernels),  # block size, prefix caching, events: engine settings
    (("spec", "autotune"), GroupId.autotune),
    (("spec", "cudaGraphs"), GroupId.cuda_graphs),
    (("spec", "speculative"), GroupId.speculative),
    (("spec", "placement", "pools", "*", "speculative"), GroupId.speculative),
    (("spec", "placement", "pools", "*", "engineArgs"), GroupId.kernels),  # engine settings, as kvCache
    (("spec", "placement", "pools", "*", "dynamoArgs"), GroupId.kernels),
    (("spec", "placement"), GroupId.placement),
    (("spec", "fallbacks", "precisionEmulation"), GroupId.model),
    (("spec", "fallbacks", "cpuOffloadGib"), GroupId.placement),  # where weights live
    (("spec", "target"), GroupId.target),
    (("spec", "model"), GroupId.model),
    (("spec", "modelStore"), GroupId.model),
    (("spec", "service"), GroupId.service),
    (("spec", "mirrors"), GroupId.pins),
    (("spec", "attestation"), GroupId.pins),  # whether each worker checks its pins before it starts
    (("spec", "catalogPath"), GroupId.pins),  # where this stack's engine catalogs and pins are read
    (("spec", "acknowledge"), GroupId.metadata),  # which warnings validate accepts: about the stack, not in it
    (("resolved",), GroupId.pins),
)


def _matches(path: Path, pattern: Path) -> bool:
    return len(path) >= len(pattern) and all(p in ("*", k) for p, k in zip(pattern, path, strict=False))


def has_group(path: Path) -> bool:
    return any(_matches(path, pattern) for pattern, _ in _GROUPS)


def group_of(path: Path) -> GroupId:
    # A field without a row is treated like an engine setting (restart, see `rollout`), never hidden.
    return next((gid for pattern, gid in _GROUPS if _matches(path, pattern)), GroupId.kernels)


# --- rollout -------------------------------------------------------------------------------------

Rollout = tuple[Impact, set[str], str | None]

NOT_RENDERED = "not rendered; validate checks it"
IMAGE_CARRIES = "the runtime image carries the release; pods change with spec.versions.runtimeImage"
SAME_DIGEST = "the same digest: pods do not change"
RECREATE_SET = "the component set changes"


def _none(note: str) -> Rollout:
    return Impact.none, set(), note


def _restart(names: Iterable[str], note: str | None = None, *, empty: str = "no pool runs it") -> Rollout:
    """A rolling update of `names`; when no component is affected after all, none (with `empty` as why)."""
    names = set(names)
    return (Impact.restart, names, note) if names else (Impact.none, set(), empty)


def _same_pin(a: Side, b: Side, which: str) -> bool:
    """Both sides are locks and pin the same bytes for `which` (image, model, cache)."""
    if a.lock is None or b.lock is None:
        return False
    ra, rb = a.lock.resolved, b.lock.resolved
    if which == "image":
        return ra.images["runtime"].digest == rb.images["runtime"].digest
    if which == "model":
        return (ra.model.id, ra.model.revision) == (rb.model.id, rb.model.revision)
    ca, cb = ra.autotune_cache, rb.autotune_cache
    return (ca.digest if ca else None) == (cb.digest if cb else None)


def rollout(path: Path, a: Side, b: Side, catalog: Catalog) -> Rollout:
    """Impact, components whose pods change, and a note, for a change of the field at `path`."""
    pools = set(b.roles)
    everything = pools | {FRONTEND}
    head, rest = path[:2], path[2:]
    if path[0] == "metadata":
        if path[1:2] in (("deployment",), ("namespace",)):
            return Impact.recreate, set(), "names another DynamoGraphDeployment; the running one is not updated"
        return _none("object metadata only; pods do not change")
    if path[0] == "resolved":
        return _pin_rollout(path, pools, everything, _attested(a, b))
    if head == ("spec", "engine"):
        # Dynamo's webhook refuses a changed backendFramework in place (deploy/recreate.py): apply deletes the
        # DynamoGraphDeployment and creates the new one, as for a placement change.
        return (Impact.recreate, set(),
                f"backendFramework {engine_of(a.profile).backend_framework} -> "
                f"{engine_of(b.profile).backend_framework}, which Dynamo's webhook refuses in place")
    if head == ("spec", "versions"):
        return _version_rollout(rest[0] if rest else "", a, b, pools, everything, catalog)
    if head in (("spec", "kernels"), ("spec", "cudaGraphs")):
        return _restart(pools)
    if head == ("spec", "kvCache"):
        return _restart(pools | _frontend_if_kv_events_differ(a, b))
    if head == ("spec", "autotune"):
        if rest[:1] == ("cache",):
            if a.replayed_cache is None and b.replayed_cache is None:
                return _none("used only in replay mode")
            if _same_pin(a, b, "cache"):
                return _none(SAME_DIGEST)
        return _restart(pools)
    if head == ("spec", "speculative"):
        return _restart(_speculative_differs(a, b), empty="every pool overrides it")
    if head == ("spec", "placement"):
        return _placement_rollout(rest, a, b, pools, everything)
    if head == ("spec", "fallbacks"):
        return _restart(pools) if rest[:1] == ("cpuOffloadGib",) else _none(NOT_RENDERED)
    if head == ("spec", "target"):
        if rest[:1] == ("count",):
            return _none("not rendered: the GPU budget validate checks")
        arch_a = catalog.platforms[a.profile.spec.target.platform].cpu_arch
        arch_b = catalog.platforms[b.profile.spec.target.platform].cpu_arch
        impact, names, note = _restart(pools | ({FRONTEND} if arch_a != arch_b else set()))
        if _spans_differ(a, b):
            return Impact.recreate, names, "a pool changes between single-node and multinode"
        if _node_counts_differ(a, b):
            return Impact.recreate, names, "a multinode pool's nodeCount changes"
        return impact, names, note
    if head == ("spec", "model"):
        if rest[:1] == ("weights",):
            return _none(NOT_RENDERED)
        if rest[:1] == ("revision",) and _same_pin(a, b, "model"):
            return _none("resolves to the same commit")
        return _restart(pools)
    if head == ("spec", "modelStore"):
        return _restart(everything)
    if head == ("spec", "service"):
        return _none("not rendered: the target validate sizes the stack for")
    if head == ("spec", "mirrors"):
        return _none("where lock resolves images; the digests decide what runs")
    if head == ("spec", "acknowledge"):
        return _none("validation only: not locked, hashed or rendered")
    if head == ("spec", "catalogPath"):
        return _none("where stackpin reads engine catalogs and pins; the pinned releases decide what runs")
    if head == ("spec", "attestation"):
        return _restart(pools, "each worker's attestation init container")
    return _restart(everything, "no rollout rule for this field: assumed to change every pod")


def _pin_rollout(path: Path, pools: set[str], everything: set[str], attested: bool) -> Rollout:
    section, leaf = path[1:2], path[-1]
    whole = len(path) <= 3  # an image, the model or the cache added or removed as a whole
    if section == ("images",):
        return _restart(everything) if whole or leaf == "digest" else _none("the digest decides what runs")
    if section == ("model",):
        return _restart(pools) if leaf in ("revision", "id") else _none("the commit decides what runs")
    if section == ("autotuneCache",):
        if len(path) == 2 or leaf == "digest" or (leaf == "files" and attested):
            return _restart(pools)  # a worker's attestation checks each file's digest
        return _none("the digest decides what runs")
    return _restart(everything, "no rollout rule for this pin: assumed to change every pod")


def _version_rollout(field: str, a: Side, b: Side, pools: set[str], everything: set[str],
                     catalog: Catalog) -> Rollout:
    va, vb = a.profile.spec.versions, b.profile.spec.versions
    if field == "runtimeImage":
        return _none(SAME_DIGEST) if _same_pin(a, b, "image") else _restart(everything)
    if field == "dynamo":
        crd_a, crd_b = (catalog.versions.dynamo.get(v.dynamo) for v in (va, vb))
        if crd_a and crd_b and crd_a.crd != crd_b.crd:
            return _restart(everything, f"DynamoGraphDeployment {crd_a.crd} -> {crd_b.crd}")
    if field == a.profile.spec.engine.value == b.profile.spec.engine.value:
        # Render spells "autotune off" as the pinned engine accepts it: a new release may change the argv.
        flags_a, flags_b = (_autotune_flags(side) for side in (a, b))
        if flags_a != flags_b:
            return _restart(pools, f"the pinned {engine_of(b.profile).label} turns autotuning off with another flag")
    if _attested(a, b):
        return _restart(pools, "each worker's attestation expects the new version")
    return _none(IMAGE_CARRIES)


def _autotune_flags(side: Side) -> list[tuple[str, str | None]]:
    """How render turns autotuning off for this side, from its own catalogs (spec.catalogPath first)."""
    profile = side.profile
    with profile_catalogs(profile.spec.catalog_path):
        engine = engine_of(profile)
        return engine.autotune_flags(profile, engine.flag_catalog(profile.spec.engine_version))


def _attested(a: Side, b: Side) -> bool:
    """Whether workers attest their pins (render/attestation.py) on either side: then what they expect
    (engine versions, cache file digests) is in their pod templates, through the ConfigMap's name."""
    return a.profile.spec.attestation or b.profile.spec.attestation


def _connector(side: Side) -> str:
    return side.profile.spec.placement.kv_connector or engine_of(side.profile).default_kv_connector


def _frontend_if_kv_events_differ(a: Side, b: Side) -> set[str]:
    # Workers publish KV events only with prefix caching and the KV router; the frontend is told when
    # they do not (args.frontend_flags), and the workers' argv carries the publisher.
    return {FRONTEND} if kv_events_enabled(a.profile) != kv_events_enabled(b.profile) else set()


def _speculative_differs(a: Side, b: Side) -> set[str]:
    """Pools whose effective speculative settings (their own override, else the stack's) differ."""
    out = set()
    for role in b.roles:
        pa, pb = a.pool(role), b.pool(role)
        if pb is None:
            continue
        if pa is None or a.profile.speculative_for(pa.spec) != b.profile.speculative_for(pb.spec):
            out.add(role)
    return out


def _spans_differ(a: Side, b: Side, roles: Iterable[str] | None = None) -> bool:
    for role in roles if roles is not None else set(a.roles) & set(b.roles):
        pa, pb = a.pool(role), b.pool(role)
        if pa is not None and pb is not None and pa.spans_nodes != pb.spans_nodes:
            return True
    return False


def _node_counts_differ(a: Side, b: Side, roles: Iterable[str] | None = None) -> bool:
    """A pool multinode on both sides changes its nodeCount: the webhook refuses it in place."""
    for role in roles if roles is not None else set(a.roles) & set(b.roles):
        pa, pb = a.pool(role), b.pool(role)
        if pa is not None and pb is not None and pa.spans_nodes and pb.spans_nodes \
                and pa.nodes_per_replica != pb.nodes_per_replica:
            return True
    return False


_SNAKE = {"podOverrides": "pod_overrides", "sharedMemory": "shared_memory"}
_LAYOUT = {"tensorParallel", "dataParallel", "pipelineParallel", "nodesPerReplica"}


def _placement_rollout(rest: Path, a: Side, b: Side, pools: set[str], everything: set[str]) -> Rollout:
    field = rest[0] if rest else ""
    if field == "mode":
        return Impact.recreate, set(), RECREATE_SET
    if field == "router":
        # The frontend's --router-mode; the workers' KV event publisher follows the KV router.
        return _restart({FRONTEND} | (pools if _frontend_if_kv_events_differ(a, b) else set()))
    if field == "migrationLimit":
        return _restart({FRONTEND}, "the frontend's --migration-limit")
    if field == "frontendArgs":
        return _restart({FRONTEND}, "the frontend's own flags")
    if field in ("podOverrides", "sharedMemory"):
        # Per component: only the pods of the components whose entry changed roll.
        named = {rest[1]} if len(rest) > 1 else {
            c for side in (a, b) for c in getattr(side.profile.spec.placement, _SNAKE[field])}
        return _restart(named & everything or everything, "that component's pod template")
    if field == "kvConnector":
        if b.topology.mode != Placement.disaggregated:
            return _none("used only when disaggregated")
        if _connector(a) == _connector(b):
            return _none(f"{_connector(b)} either way: render's default when unset")
        return _restart(pools)
    if field != "pools" or len(rest) < 2:
        return _restart(everything, "no rollout rule for this field: assumed to change every pod")
    role = rest[1]
    in_a, in_b = role in a.roles, role in b.roles
    if not in_a and not in_b:
        return _none("the placement does not run this pool")
    if in_a != in_b:
        return Impact.recreate, set(), RECREATE_SET
    leaf = rest[2] if len(rest) > 2 else ""
    if leaf == "replicas":
        return _none("scales the pool; running pods are kept")
    if leaf == "speculative":
        return _restart(_speculative_differs(a, b) & {role}, empty="the same effective settings")
    if leaf in _LAYOUT and _spans_differ(a, b, [role]):
        return Impact.recreate, set(), f"{role} changes between single-node and multinode"
    if leaf in _LAYOUT and _node_counts_differ(a, b, [role]):
        return Impact.recreate, set(), f"{role}'s multinode.nodeCount changes"
    return _restart({role})


# --- recreate ------------------------------------------------------------------------------------

def _components(side: Side) -> str:
    return ", ".join((FRONTEND, *side.roles))


def _nodes(pool: PoolTopology) -> str:
    return "multinode" if pool.spans_nodes else "single-node"


def recreate_reasons(a: Side, b: Side, changed: Mapping[GroupId, Sequence[str]]) -> dict[GroupId, list[str]]:
    """Why the admission webhook refuses B over A in place, by the group whose changes cause it."""
    out: dict[GroupId, list[str]] = {}
    if set(a.roles) != set(b.roles):
        out.setdefault(GroupId.placement, []).append(
            f"the component set changes ({_components(a)} -> {_components(b)}): the Dynamo admission webhook "
            "refuses adding or removing a component")
    for role in (r for r in b.roles if r in a.roles):
        pa, pb = a.pool(role), b.pool(role)
        if pa is None or pb is None or pa.nodes_per_replica == pb.nodes_per_replica:
            continue
        if pa.spans_nodes != pb.spans_nodes:
            reason = (f"{role} changes from {_nodes(pa)} to {_nodes(pb)} ({pa.nodes_per_replica} -> "
                      f"{pb.nodes_per_replica} nodes per replica): the Dynamo admission webhook refuses it in place")
        elif pa.spans_nodes:
            reason = (f"{role}'s multinode.nodeCount changes ({pa.nodes_per_replica} -> {pb.nodes_per_replica}): "
                      "the Dynamo admission webhook (1.6) holds it immutable")
        else:
            continue
        if any(p.startswith(f"spec.placement.pools.{role}.") for p in changed.get(GroupId.placement, ())):
            out.setdefault(GroupId.placement, []).append(reason)
        if "spec.target.platform" in changed.get(GroupId.target, ()):
            out.setdefault(GroupId.target, []).append(reason)
    for field in ("deployment", "namespace"):
        path = f"metadata.{field}"
        if path in changed.get(GroupId.metadata, ()):
            out.setdefault(GroupId.metadata, []).append(
                f"{path} changes: a new DynamoGraphDeployment is created and the running one is left as it is")
    return out


# --- invalidations -------------------------------------------------------------------------------

_AUTOTUNE_FIELDS = {"spec.engine", "spec.versions.vllm", "spec.versions.sglang", "spec.versions.flashinfer",
                    "spec.cudaGraphs.captureSizes", "spec.cudaGraphs.maxCaptureSize", "spec.target.platform"}
_ACCURACY_FIELDS = {"spec.engine", "spec.model.id", "spec.model.weights", "spec.kvCache.dtype", "resolved.model.id",
                    "resolved.model.revision"}
_BENCHMARK_GROUPS = {GroupId.engine, GroupId.kernels, GroupId.placement}


def _tp_causes(a: Side, b: Side, paths: Sequence[str]) -> list[str]:
    """The paths among `paths` that change a TP size: a pool's tensorParallel where both sides run
    the pool; else, when the set of TP sizes across pools differs, what changed the pools."""
    out = []
    for role in (r for r in b.roles if r in a.roles):
        pa, pb = a.pool(role), b.pool(role)
        if pa is not None and pb is not None and pa.tensor_parallel != pb.tensor_parallel:
            out += [p for p in paths if p == f"spec.placement.pools.{role}.tensorParallel"]
    if {p.tensor_parallel for p in a.topology.pools} != {p.tensor_parallel for p in b.topology.pools}:
        out += [p for p in paths if p == "spec.placement.mode" or p.endswith(".tensorParallel")
                or (p.startswith("spec.placement.pools.") and p.count(".") == 3)]  # a pool added or removed
    return sorted(set(out))


def _autotune_detail(a: Side, b: Side) -> str:
    old, new = a.replayed_cache, b.replayed_cache
    same = old == new and (a.lock is None or b.lock is None or _same_pin(a, b, "cache"))
    if same:
        return (f"B still replays A's autotune cache {old}, captured for A's engine versions, capture sizes, "
                "TP sizes and GPU: capture a new one (stackpin autotune capture-job) and pin it")
    return (f"A's autotune cache {old} does not carry over; B pins {new}: check that it was captured "
            "for B (stackpin autotune verify)")


def invalidations(a: Side, b: Side, changed: Mapping[GroupId, Sequence[str]]) -> dict[GroupId, list[Invalidation]]:
    """What each group's changes make stale: a pinned autotune cache (when both sides replay one),
    the accuracy evaluation, the benchmark."""
    out: dict[GroupId, list[Invalidation]] = {}
    model_same = _same_pin(a, b, "model")
    for gid, paths in changed.items():
        found = []
        if a.replayed_cache and b.replayed_cache:
            tp = _tp_causes(a, b, paths)
            because = tuple(p for p in paths if p in _AUTOTUNE_FIELDS or p in tp)
            if because:
                found.append(Invalidation(what=Invalidated.autotune_cache, because=because,
                                          detail=_autotune_detail(a, b)))
        because = tuple(p for p in paths if p in _ACCURACY_FIELDS or p.startswith("spec.fallbacks.precisionEmulation")
                        or (p == "spec.model.revision" and not model_same))
        if because:
            found.append(Invalidation(what=Invalidated.accuracy, because=because,
                                      detail="the model, its revision or a precision changes: re-run the "
                                             "accuracy evaluation on B"))
        because = tuple(paths) if gid in _BENCHMARK_GROUPS else tuple(p for p in paths if p == "spec.target.platform")
        if because:
            found.append(Invalidation(what=Invalidated.benchmark, because=because,
                                      detail="kernels, engine releases, placement or hardware change: numbers "
                                             "measured on A do not carry over; benchmark B"))
        if found:
            out[gid] = found
    return out
