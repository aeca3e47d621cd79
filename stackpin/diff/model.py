"""The typed result of comparing two stacks: what changed, grouped by what it is, and what it costs.

A `StackDiff` is data only: the CLI prints it, `apply` will read its impact before touching a
cluster, and the history listing shows `one_line()` per revision. JSON and YAML keys are camelCase,
as in lockfiles.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from stackpin.models import CamelModel


class Impact(StrEnum):
    """What rolling B out over A takes, mildest first (`rank` orders them)."""

    none = "none"  # nothing a pod runs changes
    restart = "restart"  # a rolling update of the named components
    recreate = "recreate"  # the Dynamo admission webhook refuses it in place: delete and create again

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Impact.none: 0, Impact.restart: 1, Impact.recreate: 2}


def worst(impacts: Iterable[Impact]) -> Impact:
    return max(impacts, key=lambda i: i.rank, default=Impact.none)


class GroupId(StrEnum):
    """The kinds of change, in the order they are listed."""

    engine = "engine"
    kernels = "kernels"
    autotune = "autotune"
    cuda_graphs = "cuda-graphs"
    speculative = "speculative"
    placement = "placement"
    target = "target"
    model = "model"
    service = "service"
    pins = "pins"
    metadata = "metadata"


GROUP_TITLES = {
    GroupId.engine: "serving engine",
    GroupId.kernels: "engine versions and kernels",
    GroupId.autotune: "FlashInfer autotune",
    GroupId.cuda_graphs: "CUDA graphs",
    GroupId.speculative: "speculative decoding",
    GroupId.placement: "placement and pools",
    GroupId.target: "hardware target",
    GroupId.model: "model and precision",
    GroupId.service: "service target",
    GroupId.pins: "image and model pins",
    GroupId.metadata: "metadata",
}
GROUP_ORDER = tuple(GroupId)


class Invalidated(StrEnum):
    """What a change makes stale, besides the pods."""

    autotune_cache = "autotune-cache"  # a pinned FlashInfer autotune cache no longer matches
    accuracy = "accuracy"  # the model's outputs may change: re-run the accuracy evaluation
    benchmark = "benchmark"  # performance numbers measured on A do not carry over


class ChangeKind(StrEnum):
    changed = "changed"
    added = "added"  # set in B, absent in A (a map entry such as an env var)
    removed = "removed"


class Change(CamelModel):
    """One field: `path: old -> new`. Values are as the effective profile or the lock holds them."""

    path: str
    kind: ChangeKind
    old: Any = None
    new: Any = None
    impact: Impact
    restarts: tuple[str, ...] = ()  # components whose pods roll for this change alone
    note: str | None = None  # why the impact is what it is, where that is not obvious


class Invalidation(CamelModel):
    what: Invalidated
    because: tuple[str, ...]  # the field paths that cause it
    detail: str


class Group(CamelModel):
    id: GroupId
    title: str
    impact: Impact
    restarts: tuple[str, ...]  # components rolled (impact restart); frontend first, then pools in role order
    recreate_reasons: tuple[str, ...] = ()
    changes: tuple[Change, ...]
    invalidates: tuple[Invalidation, ...] = ()


class SourceKind(StrEnum):
    profile = "profile"
    lock = "lock"


class StackRef(CamelModel):
    """One side of the comparison: what the user named and what it turned out to be."""

    source: str  # as given: a path, NAME@REV or git:REF:PATH
    kind: SourceKind
    name: str
    stack_digest: str | None = None  # locks only
    stand_in: bool = False  # a lock whose pins are stand-ins (a demo mirror's), not production digests


class ObjectStatus(StrEnum):
    changed = "changed"
    added = "added"
    removed = "removed"


class ObjectDiff(CamelModel):
    kind: str
    name: str
    status: ObjectStatus
    diff: str = ""  # unified diff of the canonical YAML (changed objects only)


class ManifestDiff(CamelModel):
    objects: tuple[ObjectDiff, ...]  # differing objects, sorted by kind then name
    unchanged: int


class StackDiff(CamelModel):
    a: StackRef
    b: StackRef
    groups: tuple[Group, ...]  # only groups with changes, in GROUP_ORDER
    pins_compared: bool  # False when a side is a profile: its pins are unknown until it is locked
    equal: bool
    impact: Impact
    restarts: tuple[str, ...]
    invalidates: tuple[Invalidation, ...]
    manifests: ManifestDiff | None = None

    def one_line(self) -> str:
        """`kernels, autotune, placement (recreate)`: what changed and what rolling it out takes."""
        if self.equal:
            return "no changes"
        return f"{', '.join(g.id.value for g in self.groups)} ({self.impact.value})"

    def dump(self) -> dict[str, Any]:
        """Plain data for JSON/YAML output (camelCase keys; `oneLine` included for listings)."""
        return {**self.model_dump(mode="json", by_alias=True), "oneLine": self.one_line()}
