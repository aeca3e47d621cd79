"""The objects of a stack as apply sends them: the rendered files (exactly what `stackpin render`
writes), in the target namespace, labelled as members of the deployment's ApplySet."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

import msgspec

from stackpin.deploy.applyset import PART_OF_LABEL, Parent
from stackpin.deploy.kube import group_kind

if TYPE_CHECKING:
    from stackpin.lock.lockfile import StackLock

# render/build.py's LABEL_PREFIX (tests/test_deploy_logic.py holds the two together): spelled here so that
# `stackpin status`, which reads these labels and renders nothing, does not import the renderer.
LABEL_PREFIX = "stackpin.dev/"
DGD_KIND = "DynamoGraphDeployment"


class Action(StrEnum):
    """What an apply does (or a live diff would do) to one object; written as its value."""

    created = "created"
    configured = "configured"
    unchanged = "unchanged"
    recreated = "recreated"
    pruned = "pruned"
STACK_LABEL = f"{LABEL_PREFIX}profile"
DIGEST_ANNOTATION = f"{LABEL_PREFIX}stack-digest"
REVISION_ANNOTATION = f"{LABEL_PREFIX}revision"


class ObjectKey(msgspec.Struct, frozen=True, order=True):
    group: str
    kind: str
    namespace: str
    name: str

    @property
    def group_kind(self) -> str:
        return group_kind(self.kind, self.group)

    @property
    def subject(self) -> str:
        """kubectl's spelling: `dynamographdeployment.nvidia.com/dsv41-flash`."""
        return f"{self.kind.lower()}{'.' + self.group if self.group else ''}/{self.name}"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def key_of(obj: dict[str, Any], namespace: str | None = None) -> ObjectKey:
    meta = obj["metadata"]
    return ObjectKey(group_of(obj["apiVersion"]), obj["kind"], namespace or meta.get("namespace") or "", meta["name"])


def apply_rank(key: ObjectKey) -> int:
    """Apply order: what a DynamoGraphDeployment refers to (its ComputeDomain) first, so that a
    multi-node pool never starts without its domain; pruning goes the other way round."""
    return 1 if key.kind == DGD_KIND else 0


class StackObjects(msgspec.Struct, frozen=True):
    deployment: str
    namespace: str
    objects: tuple[dict[str, Any], ...]  # in apply order

    @property
    def group_kinds(self) -> frozenset[str]:
        return frozenset(key_of(o).group_kind for o in self.objects)


def stack_objects(lock: StackLock, namespace: str | None) -> StackObjects:
    """The lock's objects, built and validated as `stackpin render` writes them; the namespace is the profile's
    unless one is given. They go to the server as JSON, so they are not dumped to YAML and read back: the
    files render writes are that YAML, checked there to parse back to these same objects."""
    from stackpin.render.output import checked_objects

    # Through JSON: plain data, the request bodies' own, sharing nothing with what the build read (the catalog).
    objects: list[dict[str, Any]] = msgspec.json.decode(msgspec.json.encode(list(checked_objects(lock).values())))
    target = namespace or lock.stack_profile.metadata.namespace
    for obj in objects:
        obj["metadata"]["namespace"] = target
    objects.sort(key=lambda o: (apply_rank(key_of(o)), key_of(o)))
    return StackObjects(lock.stack_profile.metadata.deployment, target, tuple(objects))


def as_member(obj: dict[str, Any], parent: Parent, revision: int | None) -> dict[str, Any]:
    """A copy labelled as a member of the ApplySet (and annotated with the revision when known)."""
    meta = dict(obj["metadata"])
    meta["labels"] = {**(meta.get("labels") or {}), PART_OF_LABEL: parent.id}
    if revision is not None:
        meta["annotations"] = {**(meta.get("annotations") or {}), REVISION_ANNOTATION: str(revision)}
    return {**obj, "metadata": meta}
