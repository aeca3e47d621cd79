"""The import round trip: an upstream DGD against the render of the profile `stackpin import` made from it,
item by item, each with a status and a reason.

Items per serving role: the entry module, every argv flag (a JSON object's keys one by one, as
compare.flag_items), env, envFrom, every resource request and limit (GPU, CPU, memory, RDMA NICs,
hugepages, ...), shared memory, the main container's volumes by mount path, node selector labels,
tolerations, replicas and nodes per replica, and what the launch script did besides (log files). Status:
`same`; `carried` (equal because spec.placement.podOverrides carries it); `dropped` (upstream sets it,
the render does not); `differs`. Every item that is not `same` or `carried` has a reason: what render
states in the DGD's place (STATED, REWRITTEN) or the import's note for that component and item; an item
without one has reason None, which the round-trip test treats as a silent difference.

Rendering needs a lock, and import needs no registry: `round_trip` locks the imported profile against a
throwaway mirror of stand-ins (stackpin.demo.mirror, the same one `make demo` uses) and renders that. The
stand-in pins replace only what a lock pins (the runtime image digest, the model revision), so those are
listed in `RoundTrip.not_compared` instead of being compared; every other item is the render's own.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackpin.backends import engine, names
from stackpin.imports.compare import flag_items, roles
from stackpin.imports.dgd import Component, Dgd, dgds_in
from stackpin.imports.profile import Imported, Note
from stackpin.jsonio import canonical_json

SAME, CARRIED, DROPPED, DIFFERS = "same", "carried", "dropped", "differs"
# What render writes where the DGD leaves the engine's default (applies when upstream does not set the item).
STATED = {
    "flag --http-port": "dynamo.frontend's default port, stated for the probes",
    "flag --router-mode": "the DGD's router (its flag, DYN_ROUTER_MODE, or Dynamo's round-robin default), stated",
    "flag --migration-limit": "the DGD's migration limit (its flag, DYN_MIGRATION_LIMIT, or Dynamo's 0), stated",
    "flag --no-router-kv-events": "workers publish no KV events: the KV router predicts",
    "flag --disaggregation-mode": "the worker's role, stated",
    "flag --kv-transfer-config.kv_connector": "the stack's connector, stated on every pool of a disaggregated stack",
    "flag --kv-transfer-config.kv_role": "kv_both, stated on every pool of a disaggregated stack",
    "flag --compilation-config.max_cudagraph_capture_size": "the same setting as --max-cudagraph-capture-size",
    # Each engine's defaults render states (its backend's stated_defaults).
    **{f"flag {option}": why for name in names() for option, why in engine(name).stated_defaults.items()},
}
# What render writes in another form than the DGD did (any difference of these items).
REWRITTEN = {
    "env DYN_ROUTER_MODE": "carried as --router-mode",
    "env DYN_MIGRATION_LIMIT": "carried as --migration-limit",
    "flag --is-decode-worker": "written as --disaggregation-mode decode",
    "flag --is-prefill-worker": "written as --disaggregation-mode prefill",
    "flag --revision": "the lock pins the model revision (a stand-in commit in this report: no registry)",
    "flag --speculative-config.revision": "the lock pins the draft's revision",
    "flag --max-cudagraph-capture-size": "the same setting, written inside --compilation-config",
    "flag --kv-transfer-config.kv_role": "stackpin writes kv_both on every pool (the NIXL connector pulls either way)",
    **{f"env {timeout}": "derived from the stack's start-up budget (catalog/engine.yaml and the model's load time); "
                         "the DGD's value is not kept"
       for name in names() if (timeout := engine(name).ready_timeout_env) is not None},
    "entry": "a frontend without a command runs the operator's dynamo.frontend; stackpin states it",
}
# What render adds that the DGD does not state, by item prefix (applies when upstream does not set the item).
ADDED = (
    ("nodeSelector ", "the target platform's node labels (catalog/platforms), stated so pods land on its nodes"),
    ("toleration ", "the target platform's tolerations (catalog/platforms), stated"),
    ("resources.requests.cpu", "engine.yaml's host CPUs per GPU, requested (the DGD requests none)"),
    ("resources.requests.memory", "engine.yaml's host memory per GPU, requested (the DGD requests none)"),
    ("resources.requests.nvidia.com/gpu", "the GPU limit stated as a request too (equal for extended resources)"),
    ("sharedMemory", "engine.yaml's worker shared memory, stated (the DGD leaves the operator's default)"),
    ("envFrom secret ", "spec.modelStore.tokenSecret: render gives the token Secret to every component"),
    ("env HF_HUB_OFFLINE", "spec.modelStore.offline: render sets it on every component that reads the model store"),
    ("env HF_HOME", "spec.modelStore: render points HF_HOME at the model store on every component"),
)
NOT_COMPARED = ("image: the runtime image is pinned by the lock; this report locks against stand-ins (no registry), "
                "so the digest is not the site's",
                "flag --revision: the model revision is pinned by the lock; a stand-in commit here")


@dataclass(frozen=True)
class Item:
    component: str  # serving role: frontend, worker, prefill, decode
    item: str  # "flag --x", "flag --x.key", "env NAME", "envFrom secret NAME", "resources.limits.rdma/ib", ...
    upstream: str | None  # None: not set there
    rendered: str | None
    status: str  # same | carried | dropped | differs
    reason: str | None  # None only for `same`, or a difference nobody explained

    def to_data(self) -> dict[str, Any]:
        return {"component": self.component, "item": self.item, "upstream": self.upstream,
                "rendered": self.rendered, "status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class RoundTrip:
    source: str
    compared_through: str  # how the rendered side was made
    not_compared: tuple[str, ...]
    items: tuple[Item, ...]

    @property
    def differences(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.status not in (SAME, CARRIED))

    def to_data(self) -> dict[str, Any]:
        counts = {s: sum(1 for i in self.items if i.status == s) for s in (SAME, CARRIED, DROPPED, DIFFERS)}
        return {"source": self.source, "comparedThrough": self.compared_through,
                "notCompared": list(self.not_compared), "counts": counts,
                "unexplained": sum(1 for i in self.differences if i.reason is None),
                "items": [i.to_data() for i in self.items]}


def component_items(comp: Component) -> dict[str, str]:
    """Every serving item of one component, as item -> value text."""
    out: dict[str, str] = {"replicas": str(comp.replicas), "nodes": str(comp.node_count)}
    if comp.entry is not None:
        out["entry"] = comp.entry.module
        out.update({f"flag {k}": v for k, v in flag_items(comp.entry.argv).items()})
        if comp.entry.output:
            out["launch script output"] = " ".join(comp.entry.output)
        for i, line in enumerate(comp.entry.shell):
            out[f"launch script[{i}]"] = line
    for var in comp.env:
        out[f"env {var.name}"] = var.value if var.value is not None else f"({var.source})"
    for ref in comp.env_from:
        out[f"envFrom {ref}"] = "set"
    for kind, values in (("requests", comp.requests), ("limits", comp.limits)):
        out.update({f"resources.{kind}.{name}": value for name, value in values})
    if comp.shared_memory:
        out["sharedMemory"] = comp.shared_memory
    for path, source in comp.mounts:
        if path != "/dev/shm":  # the shared memory item above
            out[f"volume {path}"] = source
    out.update({f"nodeSelector {k}": v for k, v in comp.node_selector})
    out.update({f"toleration {t}": "set" for t in comp.tolerations})
    return out


def _reason(item: str, upstream: str | None, notes: Mapping[str, str], others: Mapping[str, str],
            model_mount: str | None) -> str | None:
    if model_mount and item == f"volume {model_mount}":
        return "spec.modelStore: render mounts the model PVC (the same claim, read-only) on every component"
    if item in REWRITTEN:
        return REWRITTEN[item]
    if upstream is None and item in STATED:
        return STATED[item]
    key = item.removeprefix("flag ")
    parts = key.split(".")
    for n in range(len(parts), 0, -1):  # --x.key's note, else --x's
        if ".".join(parts[:n]) in notes:
            return notes[".".join(parts[:n])]
    if item.startswith("launch script["):
        return notes.get("launch script")
    if upstream is None and (added := next((why for prefix, why in ADDED if item.startswith(prefix)), None)):
        return added
    # A setting stackpin makes once per stack is noted on the component it was read from.
    key = item.removeprefix("flag ")
    return f"once per stack: {others[key]}" if key in others else None


def _notes_by_role(upstream: Dgd, notes: tuple[Note, ...]) -> dict[str, dict[str, str]]:
    role_of = {comp.name: role for role, comp in roles(upstream).items()}
    out: dict[str, dict[str, str]] = {}
    for note in notes:
        role = role_of.get(note.component, note.component)
        merged = out.setdefault(role, {})
        merged[note.item] = f"{merged[note.item]}; {note.message}" if note.item in merged else note.message
    return out


def _carried(placement: Mapping[str, Any], role: str, item: str) -> bool:
    """Whether spec.placement.podOverrides.<role> or sharedMemory.<role> states this item (the render then has
    it from there)."""
    if item == "sharedMemory" and role in (placement.get("sharedMemory") or {}):
        return True
    overrides = placement.get("podOverrides") or {}
    return bool(overrides.get(role)) and item in overridden_items(overrides[role])


def overridden_items(patch: Mapping[str, Any]) -> set[str]:
    """The items (component_items' names) a pod override sets for the main container and the pod."""
    spec = patch.get("spec") or {}
    out: set[str] = set()
    main: Mapping[str, Any] = next((c for c in spec.get("containers") or [] if c.get("name") == "main"), {})
    for kind in ("requests", "limits"):
        out |= {f"resources.{kind}.{k}" for k in ((main.get("resources") or {}).get(kind) or {})}
    out |= {f"env {e.get('name')}" for e in main.get("env") or []}
    kinds = (("secretRef", "secret"), ("configMapRef", "configMap"))
    for ref in main.get("envFrom") or []:
        out |= {f"envFrom {label} {ref[key].get('name')}" for key, label in kinds if key in ref}
    out |= {f"volume {m.get('mountPath')}" for m in main.get("volumeMounts") or []}
    out |= {"sharedMemory" for m in main.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"}
    out |= {f"nodeSelector {k}" for k in spec.get("nodeSelector") or {}}
    out |= {f"toleration {canonical_json(t).decode('utf-8')}" for t in spec.get("tolerations") or []}
    return out


def compare_items(upstream: Dgd, rendered: Dgd, profile: Mapping[str, Any],
                  imported_notes: tuple[Note, ...] = ()) -> tuple[Item, ...]:
    """Every item of every serving role of `upstream` and `rendered` (the render of `profile`, the profile
    data as locked), with its status and reason: `imported_notes` are what `stackpin import` said; a profile
    written by hand (recipe parity) has none, and its differences get their reasons elsewhere."""
    notes = _notes_by_role(upstream, imported_notes)
    placement = profile.get("spec", {}).get("placement", {})
    theirs, ours = roles(upstream), roles(rendered)
    model_mount = (profile.get("spec", {}).get("modelStore") or {}).get("mountPath")
    stack_wide = {item: f"{role}: {message}" for role, by_item in sorted(notes.items()) for item, message in
                  by_item.items() if item.startswith("--")}
    out: list[Item] = []
    if upstream.api_version != rendered.api_version:
        dynamo = profile.get("spec", {}).get("versions", {}).get("dynamo")
        out.append(Item("dgd", "apiVersion", upstream.api_version, rendered.api_version, DIFFERS,
                        f"stackpin renders the DynamoGraphDeployment version the pinned Dynamo {dynamo}'s operator "
                        "stores (catalog/versions.yaml: crd, from dgd_storage); the serving content is the same"))
    for role in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(role), ours.get(role)
        if a is None or b is None:
            why = notes.get(role, {}).get("component") or next(
                (n.message for n in imported_notes if a is not None and n.component == a.name
                 and n.item == "component"), None)
            out.append(Item(role, "component", a.name if a else None, b.name if b else None,
                            DROPPED if b is None else DIFFERS, why))
            continue
        mine, yours = component_items(a), component_items(b)
        role_notes = notes.get(role, {})
        for item in sorted(set(mine) | set(yours)):
            x, y = mine.get(item), yours.get(item)
            if x == y:
                out.append(Item(role, item, x, y, CARRIED if _carried(placement, role, item) else SAME, None))
                continue
            status = DROPPED if y is None else DIFFERS
            out.append(Item(role, item, x, y, status, _reason(item, x, role_notes, stack_wide, model_mount)))
    for comp in upstream.components:  # planners and others: not served by the profile
        if comp not in theirs.values():
            why = next((n.message for n in imported_notes if n.component == comp.name and n.item == "component"),
                       None)
            out.append(Item(comp.name, "component", comp.name, None, DROPPED, why))
    return tuple(out)


def round_trip(upstream: Dgd, imported: Imported) -> RoundTrip:
    """Lock the imported profile against a throwaway mirror of stand-ins, render it, compare with `upstream`."""
    from stackpin.demo.mirror import build_demo_mirror
    from stackpin.lock.lockfile import Sources, lock_profiles
    from stackpin.lock.oci.reference import ImageRef
    from stackpin.lock.resolvers import HfCacheSource, LayoutSource
    from stackpin.profile.loader import load_profile
    from stackpin.render.build import build_objects
    from stackpin.yamlio import dump_yaml

    profile = json.loads(json.dumps(imported.profile))
    versions = profile["spec"]["versions"]
    image = ImageRef.parse(versions["runtimeImage"])
    if image.pinned:  # a stand-in mirror holds tags; the digest is not compared anyway
        versions["runtimeImage"] = f"{image.registry}/{image.repository}:stackpin-round-trip"
    with tempfile.TemporaryDirectory(prefix="stackpin-import-") as tmp:
        path = Path(tmp) / "imported.yaml"
        path.write_text(dump_yaml(profile, sort_keys=False), encoding="utf-8")
        loaded = load_profile(path)
        build_demo_mirror(Path(tmp) / "mirror", [loaded.profile])
        sources = Sources(images=LayoutSource(Path(tmp) / "mirror" / "oci"),
                          models=HfCacheSource(Path(tmp) / "mirror" / "hf"))
        [lock] = lock_profiles([loaded], sources, Path(tmp) / "lockfiles")
        objects = build_objects(lock)
    [rendered] = dgds_in([(obj, "render") for obj in objects])
    return RoundTrip(upstream.source, "locked against stand-in pins (no registry) and rendered", NOT_COMPARED,
                     compare_items(upstream, rendered, imported.profile, imported.notes))
