"""Membership and the in-cluster record, in kubectl's ApplySet format (KEP-3659), so `kubectl apply
--prune --applyset` and stackpin read each other's sets.

The format, as kubectl implements it (`staging/src/k8s.io/kubectl/pkg/cmd/apply/applyset.go`):

- the parent object carries the label `applyset.kubernetes.io/id` = `applyset-<b64>-v1`, where <b64>
  is the unpadded URL-safe base64 of sha256(`<name>.<namespace>.<Kind>.<group>`) of the parent itself;
- its annotations: `applyset.kubernetes.io/tooling` (`<tool>/<version>`; a tool refuses to change
  another tool's set), `applyset.kubernetes.io/contains-group-kinds` (sorted `Kind.group`, comma
  separated) and `applyset.kubernetes.io/additional-namespaces` (namespaces besides the parent's);
- every member carries the label `applyset.kubernetes.io/part-of` = the parent's id;
- before applying, the parent is updated to the union of the old and new kinds, so an interrupted run
  leaks nothing; after pruning, to the new kinds only.

stackpin's parent is a ConfigMap (one of the two parent kinds kubectl accepts without a CRD) named
`stackpin-<deployment>` in the deployment's namespace. Its data keeps the record of applied revisions
(`revisions.json`: stack, stack digest, revision when known, time, who applied, the objects, and the
lock of the newest ones), so `stackpin status` works from any machine.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

import msgspec

import stackpin.jsonio as jsonio
from stackpin.deploy.kube import ClusterError
from stackpin.jsonio import canonical_json
from stackpin.records import CamelRecord
from stackpin.version import __version__

ID_LABEL = "applyset.kubernetes.io/id"
PART_OF_LABEL = "applyset.kubernetes.io/part-of"
TOOLING_ANNOTATION = "applyset.kubernetes.io/tooling"
GROUP_KINDS_ANNOTATION = "applyset.kubernetes.io/contains-group-kinds"
NAMESPACES_ANNOTATION = "applyset.kubernetes.io/additional-namespaces"
TOOL = "stackpin"
TOOLING = f"{TOOL}/v{__version__}"
RECORD_KEY = "revisions.json"
DEPLOYMENT_KEY = "deployment"
MAX_ENTRIES = 100  # revisions kept in the record
MAX_LOCKS = 10  # the newest entries keep their whole lock (a ConfigMap holds at most 1 MiB)


def parent_name(deployment: str) -> str:
    return f"{TOOL}-{deployment}"


def applyset_id(name: str, namespace: str, kind: str = "ConfigMap", group: str = "") -> str:
    """kubectl's ApplySet id of a parent object."""
    digest = hashlib.sha256(f"{name}.{namespace}.{kind}.{group}".encode()).digest()
    return "applyset-" + base64.urlsafe_b64encode(digest).decode().rstrip("=") + "-v1"


class AppliedRevision(CamelRecord, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """One entry of the record: what was applied, when, and by whom. Unknown keys (a newer stackpin's)
    are ignored so that an older stackpin still reads the record."""

    revision: int | None = None
    stack: str
    stack_digest: str
    applied_at: str
    applied_by: str
    objects: tuple[str, ...] = ()
    lock: dict[str, Any] | None = None

    def same_stack(self, other: AppliedRevision) -> bool:
        return (self.stack_digest, self.revision) == (other.stack_digest, other.revision)

    def to_data(self) -> dict[str, Any]:
        """The entry as the record stores it: camelCase keys, the unset revision and lock left out."""
        return {k: v for k, v in super().to_data().items() if v is not None}


class Parent(msgspec.Struct, frozen=True):
    """The ApplySet parent as it is live (or would be created)."""

    name: str
    namespace: str
    id: str
    exists: bool
    group_kinds: frozenset[str]
    namespaces: frozenset[str]  # additional ones; the parent's own is implied
    record: tuple[AppliedRevision, ...]
    resource_version: str | None

    @property
    def subject(self) -> str:
        return f"configmap/{self.name}"

    @property
    def latest(self) -> AppliedRevision | None:
        return self.record[-1] if self.record else None


def empty_parent(deployment: str, namespace: str) -> Parent:
    name = parent_name(deployment)
    return Parent(name, namespace, applyset_id(name, namespace), False, frozenset(), frozenset(), (), None)


def read_parent(live: dict[str, Any] | None, deployment: str, namespace: str) -> Parent:
    """Parse the live parent; refuse one that another tool manages or whose id is not its own."""
    parent = empty_parent(deployment, namespace)
    if live is None:
        return parent
    meta = live.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    subject = f"configmap/{parent.name} in namespace {namespace}"
    tooling = annotations.get(TOOLING_ANNOTATION)
    if tooling is None:
        raise ClusterError(f"{subject} exists but is no ApplySet parent (no {TOOLING_ANNOTATION} annotation); "
                           "stackpin will not take it over", "delete or rename it")
    if tooling.rsplit("/", 1)[0] != TOOL:
        raise ClusterError(f"{subject} is the ApplySet of another tool ({TOOLING_ANNOTATION}: {tooling}); "
                           "stackpin does not change another tool's ApplySet")
    if labels.get(ID_LABEL) != parent.id:
        raise ClusterError(f"{subject} has {ID_LABEL}={labels.get(ID_LABEL)!r}, not {parent.id!r}")
    kinds = frozenset(k for k in (annotations.get(GROUP_KINDS_ANNOTATION) or "").split(",") if k)
    spaces = frozenset(n for n in (annotations.get(NAMESPACES_ANNOTATION) or "").split(",") if n)
    record = _parse_record((live.get("data") or {}).get(RECORD_KEY), subject)
    return Parent(parent.name, namespace, parent.id, True, kinds, spaces - {namespace}, record,
                  meta.get("resourceVersion"))


def _parse_record(text: str | None, subject: str) -> tuple[AppliedRevision, ...]:
    if not text:
        return ()
    try:
        jsonio.check_depth(text)  # anyone who may edit the ConfigMap wrote it; msgspec decodes by recursion
        return msgspec.json.decode(text, type=tuple[AppliedRevision, ...])
    # msgspec's ValidationError is a DecodeError: bad JSON, not a list, a field of the wrong type.
    except (msgspec.DecodeError, jsonio.NestingError) as exc:
        first = str(exc).splitlines()[0]
        raise ClusterError(f"{subject}: {RECORD_KEY} is not a stackpin record ({first})") from None


def with_entry(record: Iterable[AppliedRevision], entry: AppliedRevision) -> tuple[AppliedRevision, ...]:
    """The record with `entry` appended, trimmed: the newest MAX_ENTRIES, locks on the newest MAX_LOCKS."""
    entries = [*record, entry][-MAX_ENTRIES:]
    keep_locks = len(entries) - MAX_LOCKS
    return tuple(e if i >= keep_locks or e.lock is None else e.replace(lock=None)
                 for i, e in enumerate(entries))


def parent_object(parent: Parent, deployment: str, group_kinds: Iterable[str],
                  record: Iterable[AppliedRevision], *, pin_version: bool) -> dict[str, Any]:
    """The parent as server-side apply sends it: the whole of what stackpin owns on it (omitting a
    field would remove it). `pin_version` adds the resourceVersion read, so that two applies at once
    cannot both append to the record."""
    entries = [e.to_data() for e in record]
    metadata: dict[str, Any] = {
        "name": parent.name,
        "namespace": parent.namespace,
        "labels": {ID_LABEL: parent.id, "app.kubernetes.io/managed-by": TOOL, "app.kubernetes.io/part-of": deployment},
        "annotations": {TOOLING_ANNOTATION: TOOLING, GROUP_KINDS_ANNOTATION: ",".join(sorted(set(group_kinds))),
                        NAMESPACES_ANNOTATION: ",".join(sorted(parent.namespaces))},
    }
    if pin_version and parent.resource_version:
        metadata["resourceVersion"] = parent.resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": {DEPLOYMENT_KEY: deployment, RECORD_KEY: canonical_json(entries).decode()}}


def member_selector(parent: Parent) -> str:
    return f"{PART_OF_LABEL}={parent.id}"
