"""What a DGD component sets that the profile does not model, as the profile's pass-through: a strategic merge
patch of its pod template (spec.placement.podOverrides.<role>) and its shared memory
(spec.placement.sharedMemory.<role>), so the render of the imported profile carries it instead of dropping it.

Carried, where it differs from what render writes: CPU / memory / ephemeral-storage requests and limits and
every other non-GPU resource (RDMA NICs, hugepages), envFrom (Secrets, ConfigMaps), env read from a Secret or
another reference (its valueFrom as written), env a ConfigMap in the input gave a value (that value), env a
worker sets apart from the stack's one set, node selector labels, tolerations, the main container's other
volumes and mounts, shared memory. Not carried (the caller reports it): GPUs and DRA claims (the topology's),
a shared memory size that is not a plain quantity.

Lists Kubernetes replaces rather than merges (envFrom, tolerations) are written whole: render's own items first,
then the DGD's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stackpin.imports.dgd import GPU, Component
from stackpin.jsonio import canonical_json
from stackpin.profile.podpatch import DIRECTIVE, GPU_SUFFIX, MAIN_CONTAINER

QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")


@dataclass(frozen=True)
class Rendered:
    """What render writes for one component, where the DGD's may differ."""

    requests: Mapping[str, str]  # non-GPU requests (limits: none)
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    shared_memory: str | None
    env: Mapping[str, str]  # the profile's env render writes here (spec.kernels.env on workers)
    env_from: tuple[str, ...]  # "secret NAME" render writes (the model store's token Secret)
    model_mount: str | None  # the mount path render gives the model store
    keep_env: frozenset[str] = field(default_factory=frozenset)  # names render derives: never patched


@dataclass(frozen=True)
class PassThrough:
    patch: dict[str, Any]  # {} when nothing differs
    shared_memory: str | None  # None: render's own is the DGD's
    not_carried: tuple[tuple[str, str], ...]  # (item, why)


def _literal(value: str) -> str:
    """An env value as the kubelet passes it on unexpanded (render writes the profile's values the same way)."""
    return value.replace("$", "$$")


def _resources(comp: Component, rendered: Rendered) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for kind, items in (("requests", comp.requests), ("limits", comp.limits)):
        ours = rendered.requests if kind == "requests" else {}
        for name, value in items:
            if name == GPU or name.endswith(GPU_SUFFIX):
                continue  # the topology's: GPUs per pod come from the parallel sizes
            if ours.get(name) != value:
                out.setdefault(kind, {})[name] = value
    return out


def _env(comp: Component, rendered: Rendered) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    theirs = {var.name for var in comp.env}
    for var in comp.env:
        if var.name in rendered.keep_env:
            continue
        if var.value is not None:
            if rendered.env.get(var.name) != var.value:
                out.append({"name": var.name, "value": _literal(var.value)})
        elif var.value_from is not None:
            out.append({"name": var.name, "valueFrom": json.loads(var.value_from)})
    for name in sorted(set(rendered.env) - theirs - rendered.keep_env):
        out.append({"name": name, DIRECTIVE: "delete"})  # the stack's env, which this component does not set
    return out


def _env_from(comp: Component, rendered: Rendered) -> list[dict[str, Any]]:
    if set(comp.env_from) <= set(rendered.env_from):
        return []
    keys = {"secret": "secretRef", "configMap": "configMapRef"}
    refs = [*rendered.env_from, *(r for r in comp.env_from if r not in rendered.env_from)]
    return [{keys[kind]: {"name": name}} for kind, _, name in (r.partition(" ") for r in refs)]


def _volumes(comp: Component, rendered: Rendered) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                            list[tuple[str, str]]]:
    mounts, volumes, skipped = [], [], []
    for path, raw in comp.volumes:
        if path in ("/dev/shm", rendered.model_mount):
            continue  # shared memory and the model store are modelled
        written = json.loads(raw)
        if written["volume"] is None:
            skipped.append((f"volume {path}", "mounts a volume the pod does not declare; not carried over"))
            continue
        mounts.append(written["mount"])
        if written["volume"] not in volumes:
            volumes.append(written["volume"])
    return mounts, volumes, skipped


def pass_through(comp: Component, rendered: Rendered) -> PassThrough:
    """The patch and shared memory that make the render of `comp`'s role carry what the DGD sets there."""
    not_carried: list[tuple[str, str]] = []
    main: dict[str, Any] = {}
    if resources := _resources(comp, rendered):
        main["resources"] = resources
    if env := _env(comp, rendered):
        main["env"] = env
    if env_from := _env_from(comp, rendered):
        main["envFrom"] = env_from
    mounts, volumes, skipped = _volumes(comp, rendered)
    not_carried += skipped
    if mounts:
        main["volumeMounts"] = mounts
    spec: dict[str, Any] = {}
    if main:
        spec["containers"] = [{"name": MAIN_CONTAINER, **main}]
    if volumes:
        spec["volumes"] = volumes
    labels = {k: v for k, v in comp.node_selector if rendered.node_selector.get(k) != v}
    if labels:
        spec["nodeSelector"] = labels
    ours = [canonical_json(t).decode("utf-8") for t in rendered.tolerations]  # as dgd.py reads theirs
    if set(comp.tolerations) - set(ours):
        spec["tolerations"] = [json.loads(t) for t in [*ours, *(t for t in comp.tolerations if t not in ours)]]
    shared_memory = None
    if comp.shared_memory and comp.shared_memory != rendered.shared_memory:
        if QUANTITY.fullmatch(comp.shared_memory):
            shared_memory = comp.shared_memory
        else:
            not_carried.append(("sharedMemory", f"{comp.shared_memory!r} is not a quantity the profile takes; "
                                "not carried over"))
    return PassThrough({"spec": spec} if spec else {}, shared_memory, tuple(not_carried))
