"""Library twin of `stackpin status`: what is live for a deployment, read from the cluster alone (the
ApplySet parent and its record, the members), so it gives the same answer on any machine.

- the live stack digest and revision (the annotations stackpin apply writes on every object);
- whether they match a lock (one given, or the lockfile of the live stack in the lock directory);
- drift: fields another field manager changed since stackpin applied (`drift.py`);
- readiness of the DynamoGraphDeployment and each of its components (`readiness.py`);
- what makes the live state wrong whatever the lock: the record behind the live objects (an apply
  stopped between its last object and its record entry: the objects, not the record, say what is
  live, and no other stack's entry is shown as live), a member being deleted, a ConfigMap the
  DynamoGraphDeployment's pods mount or read that does not exist, and a DynamoGraphDeployment the
  record has that is gone (an apply killed between a recreate's delete and its create): nothing serves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from stackpin.deploy.applyset import AppliedRevision, member_selector, parent_name, read_parent
from stackpin.deploy.drift import DriftedField, drifted_fields
from stackpin.deploy.kube import CONFIGMAPS, ApiResource, Cluster, ClusterError
from stackpin.deploy.objects import DGD_KIND, DIGEST_ANNOTATION, REVISION_ANNOTATION, STACK_LABEL, apply_rank, key_of
from stackpin.deploy.preflight import CORE
from stackpin.deploy.readiness import Readiness, readiness
from stackpin.profile.k8s_names import STAND_IN_LABEL


class LiveObject(msgspec.Struct, frozen=True):
    subject: str
    stack_digest: str | None
    revision: str | None


class LockCheck(msgspec.Struct, frozen=True):
    path: str
    stack: str
    stack_digest: str
    matches: bool


class StatusReport(msgspec.Struct, frozen=True):
    deployment: str
    namespace: str
    record: str
    stack: str | None
    stack_digest: str | None
    revision: int | None
    last_applied: AppliedRevision | None
    revisions: int
    objects: tuple[LiveObject, ...]
    lock: LockCheck | None
    drift: tuple[DriftedField, ...]
    readiness: Readiness | None
    problems: tuple[str, ...]
    entries: tuple[AppliedRevision, ...] = ()  # the whole record, oldest first (history --cluster)
    record_behind: bool = False  # the live objects carry a stack the record's newest entry is not
    stand_in: bool = False  # the live objects are marked as a lock's with stand-in pins (not production digests)
    dgd_gone: bool = False  # the record has a DynamoGraphDeployment and none is live: nothing serves

    @property
    def in_sync(self) -> bool:
        """No drift, nothing missing or mixed, and the lock (if any) matches."""
        return not self.drift and not self.problems and (self.lock is None or self.lock.matches)

    def as_dict(self) -> dict[str, Any]:
        last = self.last_applied
        return {
            "deployment": self.deployment, "namespace": self.namespace, "record": self.record,
            "stack": self.stack, "stackDigest": self.stack_digest, "revision": self.revision,
            "lastApplied": None if last is None else {"stack": last.stack, "stackDigest": last.stack_digest,
                                                      "revision": last.revision, "appliedAt": last.applied_at,
                                                      "appliedBy": last.applied_by},
            "revisions": self.revisions, "recordBehind": self.record_behind, "standIn": self.stand_in,
            "dgdGone": self.dgd_gone,
            "objects": [{"object": o.subject, "stackDigest": o.stack_digest, "revision": o.revision}
                        for o in self.objects],
            "lock": None if self.lock is None else {"path": self.lock.path, "stack": self.lock.stack,
                                                    "stackDigest": self.lock.stack_digest,
                                                    "matches": self.lock.matches},
            "drift": [d.as_dict() for d in self.drift],
            "readiness": self.readiness.as_dict() if self.readiness else None,
            "problems": list(self.problems),
            "inSync": self.in_sync,
        }


def _lock_check(lock_arg: str | None, stack: str | None, lockdir: Path, live_digest: str | None) -> LockCheck | None:
    from stackpin.lock.lockfile import lock_path, read_lock

    if lock_arg:
        from stackpin.deploy.source import resolve_source

        lock = resolve_source(lock_arg, lockdir).lock
        path = lock_arg
    elif stack and lock_path(lockdir, stack).is_file():
        path = str(lock_path(lockdir, stack))
        lock = read_lock(Path(path))
    else:
        return None
    return LockCheck(path, lock.metadata.name, lock.stack_digest, lock.stack_digest == live_digest)


def deployment_status(cluster: Cluster, deployment: str, namespace: str, *, lock: str | None = None,
                      lockdir: Path = Path("lockfiles")) -> StatusReport:
    parent = read_parent(cluster.get(CONFIGMAPS, namespace, parent_name(deployment)), deployment, namespace)
    if not parent.exists:
        raise ClusterError(f"no stackpin deployment {deployment} in namespace {namespace} "
                           f"(no {parent.subject}): apply it with stackpin apply, or name another namespace with -n")
    problems: list[str] = []
    members: list[dict[str, Any]] = []
    served = served_resources(cluster, parent.group_kinds)
    for group_kind in sorted(parent.group_kinds):
        res = served[group_kind]
        if res is None:
            problems.append(f"{group_kind} is no longer served by the cluster")
            continue
        for ns in sorted({namespace, *parent.namespaces}):
            members += cluster.list(res, ns, member_selector(parent))
    members.sort(key=lambda m: (apply_rank(key_of(m)), key_of(m)))
    subjects = {key_of(m).subject for m in members}
    objects = tuple(LiveObject(key_of(m).subject, (m["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION),
                               (m["metadata"].get("annotations") or {}).get(REVISION_ANNOTATION)) for m in members)
    digests = {o.stack_digest for o in objects}
    if len(digests) > 1:
        problems.append("the objects carry different stack digests (an apply stopped part way?): "
                        + ", ".join(f"{o.subject} {o.stack_digest}" for o in objects))
    dgd = next((m for m in members if m["kind"] == DGD_KIND), None)
    latest = parent.latest
    # Digest and revision from one object: the DynamoGraphDeployment, or (it gone) the first member, so a
    # stack applied from a history revision is not taken for another entry when only its DGD is missing.
    marked = dgd if dgd is not None else (members[0] if members else None)
    annotations = (marked["metadata"].get("annotations") or {}) if marked else {}
    digest = annotations.get(DIGEST_ANNOTATION)
    revision_text = annotations.get(REVISION_ANNOTATION)
    revision = int(revision_text) if revision_text and revision_text.isdigit() else None
    # The record entry of what is live: the newest one with the live digest and revision.
    live_entry = next((e for e in reversed(parent.record) if (e.stack_digest, e.revision) == (digest, revision)),
                      None) if members else latest
    behind = bool(members) and digest is not None and latest is not None and live_entry is not latest
    if behind:
        assert latest is not None
        problems.append(f"the record is behind the live objects: they carry stack digest {digest}"
                        f"{f' (revision {revision})' if revision is not None else ''}, the record's newest entry is "
                        f"{latest.stack} {latest.stack_digest}: an apply stopped before writing its record entry "
                        "(run it again: it converges)")
    recorded = live_entry if live_entry is not None else latest
    gone = None if dgd is not None or recorded is None else \
        next((s for s in recorded.objects if s.startswith("dynamographdeployment.")), None)
    if gone is not None:
        problems.insert(0, f"the DynamoGraphDeployment is gone: nothing serves ({gone} is in the record, not in "
                           "the cluster: an apply stopped between a recreate's delete and its create, or it was "
                           "deleted outside stackpin): run the apply again to create it")
    if live_entry is not None and not behind:
        problems += [f"{s} is missing (deleted outside stackpin?)" for s in live_entry.objects
                     if s not in subjects and s != gone]
    for m in members:
        if since := m["metadata"].get("deletionTimestamp"):
            finalizers = ", ".join(m["metadata"].get("finalizers") or []) or "none"
            problems.append(f"{key_of(m).subject} is being deleted (since {since}; waiting on finalizers: "
                            f"{finalizers})")
    if dgd is not None:
        for name in sorted(set(referenced_config_maps(dgd.get("spec")))):
            if f"configmap/{name}" not in subjects and cluster.get(CONFIGMAPS, namespace, name) is None:
                problems.append(f"configmap/{name}, which {key_of(dgd).subject} mounts or reads, does not exist: "
                                "its pods cannot start")
    stack = (dgd["metadata"].get("labels") or {}).get(STACK_LABEL) if dgd else (latest.stack if latest else None)
    drift = tuple(d for m in members for d in drifted_fields(m, key_of(m).subject))
    return StatusReport(
        deployment=deployment, namespace=namespace, record=parent.subject, stack=stack, stack_digest=digest,
        revision=revision, last_applied=live_entry, revisions=len(parent.record), objects=objects,
        lock=_lock_check(lock, stack, lockdir, digest), drift=drift,
        readiness=readiness(dgd) if dgd else None, problems=tuple(problems), entries=parent.record,
        record_behind=behind, dgd_gone=gone is not None,
        stand_in=any((m["metadata"].get("labels") or {}).get(STAND_IN_LABEL) == "true" for m in members))


def served_resources(cluster: Cluster, group_kinds: Iterable[str]) -> dict[str, ApiResource | None]:
    """The served resource of each `Kind.group` at its group's preferred version (None: not served), in
    as few round trips as discovery allows: the preferred versions of all groups in one read of /apis,
    then one read per group version; a core kind every server serves (preflight.CORE) not looked up."""
    core = {res.group_kind: res for res in CORE.values()}
    wanted = sorted(set(group_kinds))
    groups = {gk.partition(".")[2] for gk in wanted if gk not in core} - {""}
    preferred: dict[str, str] = {}
    if groups:
        status, data = cluster.request("GET", "/apis")
        if status < 300 and isinstance(data, dict):
            preferred = {str(g.get("name")): str((g.get("preferredVersion") or {}).get("version"))
                         for g in data.get("groups") or [] if isinstance(g, dict) and g.get("preferredVersion")}
        else:  # one group at a time, which says why in its own typed error
            preferred = {g: v for g in sorted(groups) if (v := cluster.preferred_version(g)) is not None}
    found: dict[tuple[str, str], dict[str, ApiResource]] = {}
    out: dict[str, ApiResource | None] = {}
    for group_kind in wanted:
        if group_kind in core:
            out[group_kind] = core[group_kind]
            continue
        kind, _, group = group_kind.partition(".")
        version = preferred.get(group) if group else "v1"
        if version is None:
            out[group_kind] = None
            continue
        if (group, version) not in found:
            found[(group, version)] = cluster.resources(group, version) or {}
        out[group_kind] = found[(group, version)].get(kind)
    return out


def referenced_config_maps(node: Any) -> Iterator[str]:
    """Names of the ConfigMaps a pod spec anywhere under `node` uses: volumes (`configMap`, projected
    sources), `envFrom[].configMapRef`, `env[].valueFrom.configMapKeyRef` (optional ones left out:
    the pod starts without them)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("configMap", "configMapRef", "configMapKeyRef") and isinstance(value, dict) and \
                    isinstance(value.get("name"), str) and not value.get("optional"):
                yield value["name"]
            else:
                yield from referenced_config_maps(value)
    elif isinstance(node, list):
        for item in node:
            yield from referenced_config_maps(item)
