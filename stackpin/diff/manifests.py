"""`--manifests`: the two stacks rendered, compared object by object (matched by kind and name).

Objects are built by render itself and dumped canonically (sorted keys), the bytes `stackpin render`
writes below its header, so the diff shows what a cluster would be sent. No schema validation:
comparing needs none, and a stack that renders at all renders the same here.
"""

from __future__ import annotations

import difflib
from typing import Any

from stackpin.diff.model import ManifestDiff, ObjectDiff, ObjectStatus
from stackpin.lock.lockfile import StackLock
from stackpin.render.build import build_objects
from stackpin.yamlio import dump_yaml

Key = tuple[str, str]


def _objects(lock: StackLock) -> dict[Key, dict[str, Any]]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in build_objects(lock)}


def unified(a: str, b: str, label: str) -> str:
    """A unified diff of two texts, labelled a/<label> and b/<label>, 3 lines of context."""
    lines = difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                 fromfile=f"a/{label}", tofile=f"b/{label}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def manifest_diff(a: StackLock, b: StackLock) -> ManifestDiff:
    """Changed objects with their unified diff; objects only one side has, listed as added or removed."""
    objs_a, objs_b = _objects(a), _objects(b)
    out, unchanged = [], 0
    for key in sorted(set(objs_a) | set(objs_b)):
        kind, name = key
        if key not in objs_a:
            out.append(ObjectDiff(kind=kind, name=name, status=ObjectStatus.added))
        elif key not in objs_b:
            out.append(ObjectDiff(kind=kind, name=name, status=ObjectStatus.removed))
        else:
            text_a, text_b = dump_yaml(objs_a[key]), dump_yaml(objs_b[key])
            if text_a == text_b:
                unchanged += 1
            else:
                out.append(ObjectDiff(kind=kind, name=name, status=ObjectStatus.changed,
                                      diff=unified(text_a, text_b, f"{kind}/{name}")))
    return ManifestDiff(objects=tuple(out), unchanged=unchanged)
