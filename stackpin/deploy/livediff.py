"""Library twin of `stackpin diff DEPLOYMENT@live B`: what `stackpin apply B` would change in the cluster.

Two views of the same change, like `kubectl diff --server-side` plus stackpin's semantic diff:

- **stack**: the stack live (the lock of the record's newest entry, the ApplySet parent's data) against
  B, through `stackpin.diff` (grouped changes, rollout impact: restart or recreate);
- **objects**: B rendered as apply renders it, each object server-side applied as a dry run (field
  manager stackpin, strict validation) over what is live, and the live object compared with the
  server's answer as YAML. Members B no longer has are shown deleted (apply prunes them), objects B
  adds created. An object whose change needs a recreate cannot be dry-run while the old one exists
  (Dynamo's webhook refuses it in place): it is shown against B's rendered object, without the server's
  defaults, and marked so.

Fields that change on every write and say nothing about the object (`metadata.managedFields`,
`resourceVersion`, `generation`, `uid`, `creationTimestamp`) are left out, as kubectl diff does. Reads
and dry runs only: nothing is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stackpin.deploy.apply import ApplyOptions, Notes, read_plan
from stackpin.deploy.applyset import AppliedRevision, parent_name, read_parent
from stackpin.deploy.kube import CONFIGMAPS, Cluster, ClusterError, Conflicts, FieldConflict
from stackpin.deploy.objects import Action
from stackpin.deploy.preflight import dropped_fields
from stackpin.deploy.source import StackSource
from stackpin.diff.model import StackDiff
from stackpin.errors import StackpinError
from stackpin.yamlio import dump_yaml

NOISE = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")
LIVE = "live"
Warn = Callable[[str], None]


@dataclass(frozen=True)
class ObjectChange:
    subject: str
    action: Action
    diff: str  # unified diff of the YAML, live -> after the apply; empty when unchanged
    conflicts: tuple[FieldConflict, ...] = ()  # fields another manager owns: apply stops without --force-conflicts
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"object": self.subject, "action": self.action, "diff": self.diff, "note": self.note or None,
                "conflicts": [{"manager": c.manager, "field": c.field} for c in self.conflicts]}


@dataclass(frozen=True)
class LiveDiff:
    deployment: str
    namespace: str
    record: str  # the ApplySet parent, `configmap/<name>`
    live: AppliedRevision  # the record's newest entry
    target: str  # B as the user named it
    target_stack: str
    target_digest: str
    target_revision: int | None
    stack: StackDiff | None  # None when the record no longer holds the live lock
    objects: tuple[ObjectChange, ...]
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """Applying B would change the cluster: an object, or the stack the record holds."""
        return (any(o.action != Action.unchanged for o in self.objects)
                or (self.live.stack_digest, self.live.revision) != (self.target_digest, self.target_revision))

    def as_dict(self) -> dict[str, Any]:
        live = self.live
        return {
            "deployment": self.deployment, "namespace": self.namespace, "record": self.record,
            "live": {"stack": live.stack, "stackDigest": live.stack_digest, "revision": live.revision,
                     "appliedAt": live.applied_at, "appliedBy": live.applied_by},
            "target": {"source": self.target, "stack": self.target_stack, "stackDigest": self.target_digest,
                       "revision": self.target_revision},
            "stackDiff": self.stack.dump() if self.stack is not None else None,
            "objects": [o.as_dict() for o in self.objects],
            "notes": list(self.notes),
            "changed": self.changed,
        }


def without_noise(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in NOISE}
    return {**obj, "metadata": meta}


def yaml_diff(before: dict[str, Any] | None, after: dict[str, Any] | None, subject: str,
              after_label: str = "dry-run") -> str:
    """A unified diff of the two objects' YAML (noise left out), labelled live/ and dry-run/ (or
    `after_label`/), /dev/null for a side that does not exist."""
    a = dump_yaml(without_noise(before)) if before is not None else ""
    b = dump_yaml(without_noise(after)) if after is not None else ""
    lines = difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                 fromfile=f"live/{subject}" if before is not None else "/dev/null",
                                 tofile=f"{after_label}/{subject}" if after is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _quiet(_: str) -> None:
    pass


def live_diff(cluster: Cluster, deployment: str, source: StackSource, *, namespace: str | None = None,
              force_conflicts: bool = False, warn: Warn = _quiet) -> LiveDiff:
    """Compare what is live for `deployment` with what applying `source` would leave (see the module
    docstring). `namespace` defaults to B's, as for apply."""
    lock = source.lock
    target_deployment = lock.stack_profile.metadata.deployment
    if target_deployment != deployment:
        raise StackpinError(f"{source.origin} deploys {target_deployment}, not {deployment}: applying it would not "
                            f"change {deployment}", f"diff {target_deployment}@live {source.origin}")
    ns = namespace or lock.stack_profile.metadata.namespace
    parent_live = cluster.get(CONFIGMAPS, ns, parent_name(deployment))
    parent = read_parent(parent_live, deployment, ns)
    if not parent.exists or parent.latest is None:
        raise ClusterError(f"nothing live for deployment {deployment} in namespace {ns} (no stackpin record "
                           f"configmap/{parent.name}): nothing to diff against",
                           "apply it first, or name its namespace with -n")
    notes = Notes(warn)
    options = ApplyOptions(namespace=ns, allow_recreate=True, force_conflicts=force_conflicts, dry_run=True)
    plan = read_plan(cluster, source, options, notes, parent_live)
    changes = []
    for obj, key in zip(plan.desired, plan.keys, strict=True):
        current = plan.live[key]
        if key in plan.recreate:
            assert current is not None
            reasons = "; ".join(plan.recreate[key])
            changes.append(ObjectChange(key.subject, Action.recreated, yaml_diff(current, obj, key.subject, "rendered"),
                                        note=f"needs delete and recreate ({reasons}); the new object is shown as "
                                             "rendered: it cannot be dry-run while the old one exists"))
            continue
        conflicts: tuple[FieldConflict, ...] = ()
        try:
            after = cluster.apply(plan.res_of[key], obj, force=force_conflicts, dry_run=True)
        except Conflicts as exc:  # say what apply would stop on, and show what taking the fields would do
            conflicts = exc.conflicts
            after = cluster.apply(plan.res_of[key], obj, force=True, dry_run=True)
        if lost := dropped_fields(obj, after):
            notes.add(f"{key.subject}: the server would drop {', '.join(lost[:5])}")
        text = yaml_diff(current, after, key.subject)
        action = Action.created if current is None else Action.configured if text else Action.unchanged
        note = "" if not conflicts else "apply stops here without --force-conflicts"
        changes.append(ObjectChange(key.subject, action, text, conflicts, note))
    for member in plan.prune:
        changes.append(ObjectChange(member.key.subject, Action.pruned,
                                    yaml_diff(member.live, None, member.key.subject)))
    live = parent.latest
    return LiveDiff(deployment, ns, parent.subject, live, source.origin, lock.metadata.name, lock.stack_digest,
                    source.revision, _stack_diff(live, source, deployment, notes), tuple(changes),
                    tuple(notes.items))


def _stack_diff(live: AppliedRevision, source: StackSource, deployment: str, notes: Notes) -> StackDiff | None:
    """The semantic diff of the record's live lock against B; None (with a note) if the lock is gone."""
    import msgspec

    from stackpin.diff.engine import diff_stacks
    from stackpin.diff.inputs import stack_of_lock
    from stackpin.lock.lockfile import StackLock, stack_digest

    if live.lock is None:
        notes.add(f"the record no longer holds the lock of the live stack {live.stack} (only the newest ones are "
                  "kept): no semantic diff, the objects only")
        return None
    try:
        lock = msgspec.convert(live.lock, StackLock)
        intact = stack_digest(lock.profile, lock.resolved) == lock.stack_digest == live.stack_digest
    except msgspec.ValidationError:
        intact = False
    if not intact:
        notes.add(f"the record's lock of the live stack {live.stack} does not match its digest (edited?): "
                  "no semantic diff, the objects only")
        return None
    live_name = f"{deployment}@{LIVE}" + (f" (revision {live.revision})" if live.revision is not None else "")
    return diff_stacks(stack_of_lock(lock, live_name), stack_of_lock(source.lock, source.origin))
