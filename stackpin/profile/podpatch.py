"""`spec.placement.podOverrides`: a Kubernetes strategic merge patch of one component's pod template,
applied last by render, and the checks a patch must pass where the profile is read.

The semantics are the API server's (k8s.io/apimachinery strategicpatch, `StrategicMergeMapPatch`): maps merge
key by key; a list whose field carries `patchStrategy: merge` merges item by item on its merge key (a list of
scalars merges as a set), with the patch's items first in the patch's order and the other items after, in
their own order, as the server orders them; every other list is replaced; `null` deletes a key; `$patch:
replace` replaces a map (or, as a list item `{$patch: replace}`, the whole list) and `$patch: delete` deletes a
map (or, beside a merge key, that item). Which lists merge, by which key, is data read from a real API
server (`pod_merge_keys.yaml`, scripts/gen_pod_merge_keys.py). Not supported, each refused by name:
`$retainKeys`, `$setElementOrder/...`, `$deleteFromPrimitiveList/...`, `$patch: merge`.

What the topology or a modelled field decides is refused in a patch (`forbidden_problems`): GPU resources,
DRA claims, the node, the main container's image, command and args, replicas.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

MAIN_CONTAINER = "main"  # the container render runs the engine in (the operator finds it by this name)
ROOT_TYPE = "io.k8s.api.core.v1.PodTemplateSpec"
DIRECTIVE = "$patch"
DIRECTIVES = ("replace", "delete")
# Resource names that are GPUs: their count is the topology's (GPUs per pod).
GPU_SUFFIX = "/gpu"
MODELLED_CONTAINER: dict[str, str] = {
    "image": "spec.versions.runtimeImage (locked to a digest)",
    "command": "the component stackpin runs",
    "args": "engineArgs / dynamoArgs (workers) or spec.placement.frontendArgs (frontend)",
}
Path = tuple[str, ...]


@cache
def merge_metadata() -> dict[str, Any]:
    """The generated file: {kubernetesVersion, source, root, types: {type: {field: {strategy, key, type}}}}."""
    from stackpin.yamlio import load_data

    data: dict[str, Any] = load_data(
        resources.files("stackpin.profile").joinpath("pod_merge_keys.yaml").read_text(encoding="utf-8"))
    return data


def _fields(type_name: str | None) -> dict[str, Any]:
    if type_name is None:
        return {}
    fields: dict[str, Any] = merge_metadata()["types"].get(type_name, {})
    return fields


def _merges(meta: dict[str, Any]) -> bool:
    return "merge" in str(meta.get("strategy", "")).split(",")


# --- applying ----------------------------------------------------------------------------------------

def apply_patch(template: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`template` (a PodTemplateSpec as plain data) with `patch` applied; neither argument is changed."""
    return _merge_map(copy.deepcopy(template), copy.deepcopy(patch), ROOT_TYPE)


def _fresh(value: Any, meta: dict[str, Any]) -> Any:
    """A patch value for a key the original lacks: what the server stores once it decodes it (nulls and
    directives inside it mean nothing there)."""
    if isinstance(value, dict):
        return _merge_map({}, value, meta.get("type"))
    if isinstance(value, list):
        if _merges(meta):
            return _merge_list([], value, meta)
        return [_fresh(v, {"type": meta.get("type")}) for v in value]
    return value


def _merge_map(original: dict[str, Any], patch: dict[str, Any], type_name: str | None) -> dict[str, Any]:
    directive = patch.get(DIRECTIVE)
    if directive == "replace":
        return _merge_map({}, {k: v for k, v in patch.items() if k != DIRECTIVE}, type_name)
    if directive == "delete":
        return {}
    fields = _fields(type_name)
    for key, value in patch.items():
        meta = fields.get(key, {})
        if value is None:
            original.pop(key, None)
        elif key not in original:
            original[key] = _fresh(value, meta)
        elif isinstance(original[key], dict) and isinstance(value, dict):
            original[key] = (_fresh(value, meta) if meta.get("strategy") == "replace"
                             else _merge_map(original[key], value, meta.get("type")))
        elif isinstance(original[key], list) and isinstance(value, list) and _merges(meta):
            original[key] = _merge_list(original[key], value, meta)
        else:  # a scalar, a list that does not merge, or another type: the patch's value
            original[key] = _fresh(value, {**meta, "strategy": None})
    return original


def _key_of(item: Any, key: str | None) -> Any:
    return item.get(key) if key is not None and isinstance(item, dict) else item


def _index(order: list[Any], item: Any, key: str | None) -> int:
    wanted = _key_of(item, key)
    return next((i for i, v in enumerate(order) if _key_of(v, key) == wanted), -1)


def _merge_list(original: list[Any], patch: list[Any], meta: dict[str, Any]) -> list[Any]:
    key: str | None = meta.get("key")
    if not original and not patch:
        return original
    if not any(isinstance(v, dict) for v in [*original, *patch]):  # scalars: a set union
        merged = list(dict.fromkeys([*original, *patch]))
    else:
        assert key is not None  # patch_problems refuses a list of maps that merges without a key
        plain = [item for item in patch if DIRECTIVE not in item]
        if any(item.get(DIRECTIVE) == "replace" for item in patch):  # the list is the patch's other items
            original, plain = [_fresh(item, {"type": meta.get("type")}) for item in plain], []
        else:
            for item in patch:
                if item.get(DIRECTIVE) == "delete":
                    original = [o for o in original if o.get(key) != item.get(key)]
        patch = plain
        merged = list(original)
        for item in patch:
            at = _index(merged, item, key)
            if at >= 0:
                merged[at] = _merge_map(merged[at], item, meta.get("type"))
            else:
                merged.append(_fresh(item, {"type": meta.get("type")}))
    # The server's order (normalizeElementOrder): the patch's items in the patch's order, the others in the
    # original's, interleaved where both sides were in the original.
    from_patch = sorted((m for m in merged if _index(patch, m, key) >= 0), key=lambda m: _index(patch, m, key))
    server_only = [m for m in merged if _index(patch, m, key) < 0]
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(from_patch):
        if j >= len(from_patch):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(from_patch[j])
            j += 1
        else:
            left, right = _index(original, server_only[i], key), _index(original, from_patch[j], key)
            if left >= 0 and right >= 0 and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(from_patch[j])
                j += 1
    return out


# --- checking ------------------------------------------------------------------------------------------

def shown(path: Path) -> str:
    return ".".join(path)


# Fields whose values Kubernetes reads as strings: a YAML 1.1 bool or number there (`yes`, `on`, `0755`) is
# not what was meant, and Go's reader would not read it as a string either.
_STRING_MAPS = {("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector")}


def _value_problem(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return "a NaN or infinite number, which JSON cannot carry"
    if value is not None and not isinstance(value, bool | int | float | str | dict | list):
        return f"a {type(value).__name__} (a YAML date or binary?), which JSON cannot carry: quote it"
    return None


def patch_problems(patch: Any) -> list[tuple[str, str]]:
    """(field path inside the patch, problem) for a patch that is not one stackpin applies as the API server
    would: directives it does not support, merge-list items without their merge key, values JSON cannot
    carry, a bool or number where Kubernetes reads a string."""
    if not isinstance(patch, dict):
        return [("", "a pod template patch is a mapping (metadata, spec)")]
    return list(_walk(patch, ROOT_TYPE, ()))


def _walk(value: Any, type_name: str | None, path: Path) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        fields = _fields(type_name)
        for key, item in value.items():
            where = (*path, key)
            if key == DIRECTIVE:
                if item not in DIRECTIVES:
                    yield shown(where), (f"{item!r} is not supported: stackpin applies `$patch: replace` and "
                                         "`$patch: delete` (and null to delete a key)")
                continue
            if key.startswith("$"):
                yield shown(where), ("this strategic-merge directive is not supported: stackpin applies null "
                                     "deletion, `$patch: replace` and `$patch: delete`")
                continue
            if path in _STRING_MAPS and item is not None and not isinstance(item, str):
                yield shown(where), f"{item!r} is read as a {type(item).__name__}, not text: quote it"
                continue
            if path[-1:] in (("limits",), ("requests",)) and isinstance(item, bool):
                yield shown(where), f"{item!r} is not a quantity: quote it"
                continue
            yield from _walk_field(item, fields.get(key, {}), where)
        return
    if (problem := _value_problem(value)) is not None:
        yield shown(path), problem


def _walk_field(value: Any, meta: dict[str, Any], path: Path) -> Iterator[tuple[str, str]]:
    if not isinstance(value, list):
        yield from _walk(value, meta.get("type"), path)
        return
    key = meta.get("key")
    merges = _merges(meta)
    for n, item in enumerate(value):
        where = (*path[:-1], f"{path[-1]}[{n}]")
        if merges and isinstance(item, dict):
            if key is None:
                yield shown(where), "a list of maps that merges needs a merge key"
            elif item.get(DIRECTIVE) == "replace" and len(item) == 1:
                continue
            elif key not in item:
                yield shown(where), f"each item of this list merges by {key!r}: give it one"
                continue
            else:
                where = (*path[:-1], f"{path[-1]}[{item[key]}]")
        elif merges and any(isinstance(v, dict) for v in value):
            yield shown(where), "mixes maps and other values in a list that merges"
            continue
        if key == "name" and path[-1] == "env" and isinstance(item, dict) and "value" in item \
                and item["value"] is not None and not isinstance(item["value"], str):
            yield shown((*where, "value")), f"{item['value']!r} is read as a {type(item['value']).__name__}, " \
                                            "not text: quote it"
            continue
        yield from _walk(item, meta.get("type"), where)


def _containers(spec: dict[str, Any], field: str) -> Iterator[tuple[str, dict[str, Any]]]:
    items = spec.get(field)
    for n, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict):
            yield f"spec.{field}[{item.get('name', n)}]", item


def forbidden_problems(patch: dict[str, Any], role: str) -> list[tuple[str, str]]:
    """(field path inside the patch, what to do instead) for what a patch may not change: what the topology
    derives (GPUs, DRA claims, nodes, replicas) and what modelled fields set (image, command, args)."""
    pool = f"spec.placement.pools.{role}" if role != "frontend" else "spec.placement"
    out: list[tuple[str, str]] = []
    for key in patch:
        if key == "replicas":
            out.append((key, f"replicas come from the topology: set {pool}.replicas instead"))
        elif key not in ("metadata", "spec"):
            out.append((key, "a pod template patch holds metadata and spec only"))
    for key in ("metadata", "spec"):
        if key in patch and (patch[key] is None or (isinstance(patch[key], dict) and DIRECTIVE in patch[key])):
            out.append((key, "may not be deleted or replaced: patch its fields"))
    metadata = patch.get("metadata")
    if isinstance(metadata, dict):
        out += [(f"metadata.{k}", "a component's pod metadata carries labels and annotations only (v1alpha1's "
                 "extraPodMetadata has no other field)") for k in metadata if k not in ("labels", "annotations")]
    spec = patch.get("spec")
    if not isinstance(spec, dict):
        return out
    gpu_hint = (f"GPUs per pod come from the topology: set {pool}.tensorParallel / dataParallel / "
                "pipelineParallel / nodesPerReplica instead")
    for field, why in (("nodeName", f"nodes come from the topology ({pool}.nodesPerReplica, spec.target); "
                                    "select nodes with spec.nodeSelector or affinity"),
                       ("resourceClaims", "DRA claims (the ComputeDomain channel) come from the topology")):
        if field in spec:
            out.append((f"spec.{field}", why))
    containers = spec.get("containers")
    if containers is None and "containers" in spec:
        out.append(("spec.containers", "may not be deleted: the main container runs the engine"))
    if isinstance(containers, list) and any(isinstance(c, dict) and c.get(DIRECTIVE) == "replace" and len(c) == 1
                                            for c in containers):
        out.append(("spec.containers", "`$patch: replace` would drop the main container: patch it by name"))
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for where, container in _containers(spec, field):
            main = field == "containers" and container.get("name") == MAIN_CONTAINER
            if main and DIRECTIVE in container:
                out.append((where, "the main container may not be deleted or replaced: patch its fields"))
            if main:
                out += [(f"{where}.{k}", f"set by {MODELLED_CONTAINER[k]}, not a patch")
                        for k in MODELLED_CONTAINER if k in container]
            res = container.get("resources")
            if main and "resources" in container and (not isinstance(res, dict) or DIRECTIVE in res):
                out.append((f"{where}.resources", "may not be deleted or replaced (it holds the GPUs): patch "
                            "requests and limits by name"))
            if not isinstance(res, dict):
                continue
            if "claims" in res:
                out.append((f"{where}.resources.claims", "DRA claims come from the topology"))
            for side in ("limits", "requests"):
                amounts = res.get(side)
                if main and side in res and (not isinstance(amounts, dict) or DIRECTIVE in amounts):
                    out.append((f"{where}.resources.{side}", "may not be deleted or replaced (it holds the "
                                "GPUs): patch each resource by name"))
                if isinstance(amounts, dict):
                    out += [(f"{where}.resources.{side}.{name}", gpu_hint) for name in amounts
                            if name.endswith(GPU_SUFFIX) or name == "gpu"]
    return out


def touched(patch: dict[str, Any]) -> list[str]:
    """The fields a patch sets, two levels into spec (for the info finding reviewers read)."""
    out = []
    for key, value in patch.items():
        if key == "spec" and isinstance(value, dict):
            for field, inner in value.items():
                if field in ("containers", "initContainers") and isinstance(inner, list):
                    for item in inner:
                        name = item.get("name", "?") if isinstance(item, dict) else "?"
                        keys = sorted(k for k in item if k != "name") if isinstance(item, dict) else []
                        out.append(f"spec.{field}[{name}]" + (f" ({', '.join(keys)})" if keys else ""))
                else:
                    out.append(f"spec.{field}")
        elif isinstance(value, dict):
            out += [f"{key}.{field}" for field in value]
        else:
            out.append(key)
    return out
