"""Drift from `metadata.managedFields`: the fields of a live object another manager owns.

Server-side apply records, per field manager, the set of fields it last set (`fieldsV1`). When
another manager changes a field stackpin applied (`kubectl edit`, `kubectl scale`, a controller's
update), ownership of that field moves to it; a field someone adds is theirs from the start. So the
fields under `spec`, `metadata.labels` and `metadata.annotations` that a manager other than stackpin
owns, through the object itself (not its status subresource), and stackpin does not, are the drift
(a field both set to the same value is shared, not drifted). Pure.

Paths are spelled as the API server spells them in conflict messages:
`.spec.components[name="worker"].replicas`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec

import stackpin.jsonio as jsonio
from stackpin.deploy.kube import FIELD_MANAGER

WATCHED = (".spec", ".metadata.labels", ".metadata.annotations")


class DriftedField(msgspec.Struct, frozen=True):
    subject: str  # the object, kubectl's spelling
    path: str
    manager: str
    operation: str  # Update | Apply
    time: str

    def as_dict(self) -> dict[str, str]:
        return {"object": self.subject, "path": self.path, "manager": self.manager, "operation": self.operation,
                "time": self.time}


def _element(key: str) -> str:
    """One fieldsV1 key as a path element."""
    prefix, _, rest = key.partition(":")
    if prefix == "f":
        return f".{rest}"
    if prefix == "k":
        try:
            fields = jsonio.loads(rest)
            return "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in fields.items()) + "]"
        except ValueError:
            return f"[{rest}]"
    if prefix == "v":
        return f"[={rest}]"
    if prefix == "i":
        return f"[{rest}]"
    return f".{key}"


def leaf_paths(fields: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Every leaf of a fieldsV1 set; a list element owned as a whole ("." with no children) is a leaf."""
    for key, sub in sorted(fields.items()):
        if key == ".":
            continue
        path = prefix + _element(key)
        children = {k: v for k, v in (sub or {}).items() if k != "."}
        if children:
            yield from leaf_paths(children, path)
        else:
            yield path


def _watched(path: str) -> bool:
    return any(path == w or path.startswith(w + ".") or path.startswith(w + "[") for w in WATCHED)


def drifted_fields(obj: dict[str, Any], subject: str, manager: str = FIELD_MANAGER) -> list[DriftedField]:
    """Fields of `obj` under spec, labels and annotations owned by a manager other than `manager`
    (and not by `manager` too: a field two managers set to the same value has not drifted)."""
    entries = [e for e in (obj.get("metadata") or {}).get("managedFields") or [] if not e.get("subresource")]
    ours = {p for e in entries if e.get("manager") == manager for p in leaf_paths(e.get("fieldsV1") or {})}
    out = []
    for entry in entries:
        if entry.get("manager") == manager:
            continue
        for path in leaf_paths(entry.get("fieldsV1") or {}):
            if _watched(path) and path not in ours:
                out.append(DriftedField(subject, path, str(entry.get("manager")), str(entry.get("operation")),
                                        str(entry.get("time") or "")))
    return sorted(out, key=lambda d: (d.subject, d.path, d.manager))
