"""Library twin of `stackpin apply`: a stack's rendered objects onto a cluster by server-side apply.

The run, in order; nothing is written before step 3:

1. read: render the lock; preflight (kinds served, CRD conversion, namespace); the ApplySet parent
   and its record; the live members; which objects a change must recreate (refused without
   `allow_recreate`) and which members this stack no longer has (to prune);
2. check: a server-side dry run of every write (applies with strict field validation, deletes, the
   parent), so conflicts with other field managers, RBAC refusals, schema errors and fields the server
   would drop are all found before anything changes;
3. write: the parent first, listing the union of old and new kinds (an interrupted run leaves nothing
   the next run cannot find); recreated objects deleted with foreground propagation and awaited; the
   objects applied, a ComputeDomain before the DynamoGraphDeployment that uses it; members no
   longer rendered pruned, the DynamoGraphDeployment before its ComputeDomain; then the parent again
   with the new kinds and the record entry (who, when, which stack digest and revision). A write whose
   dry run returned the object exactly as it is live (down to managedFields and resourceVersion: the
   server would store nothing) is left out, so a re-apply that changes nothing writes nothing. An apply
   the live object's managedFields already show to change nothing (`settled.py`) is neither dry-run
   nor sent: a re-apply that changes nothing makes no dry runs either (issue 37: round trips).

A re-run after any interruption converges: the parent still lists every kind that may hold members.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec.structs import replace

from stackpin.deploy.applyset import (
    AppliedRevision,
    Parent,
    member_selector,
    parent_name,
    parent_object,
    read_parent,
    with_entry,
)
from stackpin.deploy.clusterfacts import cluster_facts
from stackpin.deploy.kube import (
    CONFIGMAPS,
    FIELD_MANAGER,
    NAMESPACES,
    ApiResource,
    Cluster,
    ClusterError,
    Conflicts,
    Unreachable,
)
from stackpin.deploy.lease import LeaseLost, holding
from stackpin.deploy.objects import (
    DGD_KIND,
    Action,
    ObjectKey,
    StackObjects,
    apply_rank,
    as_member,
    key_of,
    stack_objects,
)
from stackpin.deploy.preflight import Preflight, dropped_fields, preflight
from stackpin.deploy.readiness import Readiness
from stackpin.deploy.recreate import recreate_reasons
from stackpin.deploy.settled import apply_changes_nothing
from stackpin.deploy.source import StackSource, refuse_stand_ins
from stackpin.deploy.wait import wait_gone, wait_ready
from stackpin.errors import StackpinError

Progress = Callable[[str], None]


class RecreateRefused(StackpinError):
    """The change needs a delete and a create, which was not allowed (exit 1)."""

    exit_code = 1


class DroppedFields(StackpinError):
    """The server would silently drop fields of an object (exit 1)."""

    exit_code = 1


class ApplyOptions(msgspec.Struct, frozen=True):
    namespace: str | None = None  # default: the profile's metadata.namespace
    dry_run: bool = False
    force_conflicts: bool = False
    allow_recreate: bool = False
    create_namespace: bool = False
    timeout_s: float | None = None  # for a recreated object to be gone; default: the stack's start-up budget
    lock_timeout_s: float = 0.0  # how long to wait for another writer's Lease on the deployment (0: refuse at once)
    strict: bool = False  # cluster_facts findings (no node for a pool, no image volumes) refuse instead of warn
    allow_stand_ins: bool = False  # a lock holding stand-in pins (the demo mirror's) is refused otherwise


class Outcome(msgspec.Struct, frozen=True):
    subject: str
    action: Action

    def __str__(self) -> str:
        return f"{self.subject} {self.action}"


class ApplyResult(msgspec.Struct, frozen=True):
    deployment: str
    namespace: str
    stack: str
    stack_digest: str
    revision: int | None
    dry_run: bool
    record: str  # the ApplySet parent, `configmap/<name>`
    recorded: bool  # a new record entry was written
    outcomes: tuple[Outcome, ...]
    notes: tuple[str, ...]
    serving: tuple[ApiResource, str]  # the DynamoGraphDeployment: its resource and name
    readiness: Readiness | None = None  # filled in by wait_applied

    def as_dict(self) -> dict[str, Any]:
        return {"deployment": self.deployment, "namespace": self.namespace, "stack": self.stack,
                "stackDigest": self.stack_digest, "revision": self.revision, "dryRun": self.dry_run,
                "record": self.record, "recorded": self.recorded, "notes": list(self.notes),
                "objects": [{"object": o.subject, "action": o.action} for o in self.outcomes],
                "readiness": self.readiness.as_dict() if self.readiness else None}


class Member(msgspec.Struct, frozen=True):
    key: ObjectKey
    res: ApiResource
    live: dict[str, Any]


def _quiet(_: str) -> None:
    pass


def default_timeout_s(source: StackSource) -> float:
    """The stack's start-up budget (render's estimate, the workers' startupProbe allowance)."""
    from stackpin.catalog import load_catalog
    from stackpin.render.build import startup_budget_s

    return float(startup_budget_s(source.lock.stack_profile, load_catalog()))


def _resource_of(cluster: Cluster, pre: Preflight, group_kind: str) -> ApiResource | None:
    for res in pre.resources.values():
        if res.group_kind == group_kind:
            return res
    return cluster.resource_for(group_kind)


def _members(cluster: Cluster, pre: Preflight, parent: Parent, stack: StackObjects,
             notes: Notes) -> dict[ObjectKey, Member]:
    """Live objects labelled as members, in every kind the parent or the stack lists."""
    found: dict[ObjectKey, Member] = {}
    if not parent.exists:
        return found
    for group_kind in sorted(parent.group_kinds | stack.group_kinds):
        res = _resource_of(cluster, pre, group_kind)
        if res is None:
            notes.add(f"{group_kind} is no longer served: its members cannot be listed or pruned")
            continue
        for namespace in sorted({parent.namespace, *parent.namespaces}):
            for obj in cluster.list(res, namespace, member_selector(parent)):
                key = key_of(obj)
                found[key] = Member(key, res, obj)
    return found


def _comparable(obj: dict[str, Any] | None) -> Any:
    if obj is None:
        return None
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("managedFields", "resourceVersion",
                                                                        "generation")}
    return {**obj, "metadata": meta}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Notes(msgspec.Struct):
    """Notes kept for the result and passed on as they come (an error later must not swallow them)."""

    warn: Progress
    items: list[str] = msgspec.field(default_factory=list)

    def add(self, note: str) -> None:
        self.items.append(note)
        self.warn(note)


class Plan(msgspec.Struct, frozen=True):
    """What the read phase found: everything the check and write phases act on."""

    stack: StackObjects
    parent: Parent
    desired: tuple[dict[str, Any], ...]  # in apply order, labelled as members
    res_of: dict[ObjectKey, ApiResource]
    live: dict[ObjectKey, dict[str, Any] | None]  # each desired object as it is now (None: absent)
    recreate: dict[ObjectKey, list[str]]  # objects that need delete and create, with the reasons
    prune: tuple[Member, ...]  # members the stack no longer has, a DynamoGraphDeployment first
    namespace_missing: bool
    parent_live: dict[str, Any] | None = None  # the parent as read

    @property
    def keys(self) -> list[ObjectKey]:
        return [key_of(o) for o in self.desired]


class CheckedApply(msgspec.Struct, frozen=True):
    """What the read and check phases found (nothing written yet, bar a namespace asked for):
    `write_checked` carries it out. Lets a caller do its own step between the check and the write
    (`stackpin rollback --apply` records the history revision there)."""

    source: StackSource
    options: ApplyOptions
    plan: Plan
    predicted: dict[ObjectKey, Action]
    notes: Notes
    namespace_pending: bool = False  # a dry run for a namespace that does not exist yet
    # Writes the dry run showed to be no-ops (the server returned the object exactly as it is, down to
    # managedFields and resourceVersion): `write_checked` leaves them out, as the server would store nothing.
    settled: frozenset[ObjectKey] = frozenset()
    parent_settled: bool = False  # the same for the parent's first write (the union of kinds, the record as is)

    def result(self, dry_run: bool, recorded: bool, actions: dict[ObjectKey, Action]) -> ApplyResult:
        plan, lock = self.plan, self.source.lock
        dgd = next(k for k in plan.keys if k.kind == DGD_KIND)
        outcomes = [Outcome(k.subject, actions.get(k, Action.created)) for k in plan.keys]
        outcomes += [Outcome(m.key.subject, Action.pruned) for m in plan.prune]
        return ApplyResult(plan.stack.deployment, plan.stack.namespace, lock.metadata.name, lock.stack_digest,
                           self.source.revision, dry_run, plan.parent.subject, recorded, tuple(outcomes),
                           tuple(self.notes.items), (plan.res_of[dgd], dgd.name))

    def dry_result(self) -> ApplyResult:
        return self.result(True, False, {} if self.namespace_pending else self.predicted)


def check_apply(cluster: Cluster, source: StackSource, options: ApplyOptions, progress: Progress = _quiet,
                warn: Progress = _quiet) -> CheckedApply:
    """Steps 1 and 2 (see the module docstring): raises what would stop the apply, writes nothing
    (except the namespace, with `create_namespace` and no dry run)."""
    notes = Notes(warn)
    refuse_stand_ins(source, options.allow_stand_ins)  # allowed: the objects carry the stand-in label
    plan = read_plan(cluster, source, options, notes)
    if plan.namespace_missing:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": plan.stack.namespace}}
        cluster.apply(NAMESPACES, namespace, dry_run=options.dry_run)
        if options.dry_run:
            notes.add(f"namespace {plan.stack.namespace} would be created; its objects could not be dry-run "
                      "before it exists")
            return CheckedApply(source, options, plan, {}, notes, namespace_pending=True)
        progress(f"namespace/{plan.stack.namespace} created")
    predicted, settled, parent_settled = _dry_run(cluster, plan, options, notes)
    return CheckedApply(source, options, plan, predicted, notes, settled=settled, parent_settled=parent_settled)


def write_checked(cluster: Cluster, checked: CheckedApply, progress: Progress = _quiet) -> ApplyResult:
    """Step 3: the writes (a dry run returns what the check predicted)."""
    if checked.options.dry_run:
        return checked.dry_result()
    source, options = checked.source, checked.options
    timeout_s = options.timeout_s if options.timeout_s is not None else default_timeout_s(source)
    actions, recorded = _write(cluster, checked, timeout_s, progress)
    return checked.result(False, recorded, actions)


def apply_stack(cluster: Cluster, source: StackSource, options: ApplyOptions,
                progress: Progress = _quiet, warn: Progress = _quiet) -> ApplyResult:
    """Apply `source` (see the module docstring), holding the deployment's Lease from the read to the
    last write (a dry run writes nothing and takes none). `progress` hears each step, `warn` each note
    on what could not be checked or done, as it happens."""
    refuse_stand_ins(source, options.allow_stand_ins)  # before the Lease: nothing reaches the cluster
    if options.dry_run:
        return write_checked(cluster, check_apply(cluster, source, options, progress, warn), progress)
    profile = source.lock.stack_profile
    with holding(cluster, options.namespace or profile.metadata.namespace, profile.metadata.deployment,
                 _operation(source), wait_s=options.lock_timeout_s, create_namespace=options.create_namespace,
                 progress=progress):
        return write_checked(cluster, check_apply(cluster, source, options, progress, warn), progress)


def _operation(source: StackSource) -> str:
    revision = f" revision {source.revision}" if source.revision is not None else ""
    return f"apply {source.lock.metadata.name}{revision}"


def wait_applied(cluster: Cluster, result: ApplyResult, timeout_s: float, progress: Progress = _quiet) -> ApplyResult:
    """Watch the applied DynamoGraphDeployment until it and every component is ready (`--wait`);
    WaitTimeout names what is not."""
    res, name = result.serving
    return replace(result, readiness=wait_ready(cluster, res, result.namespace, name, timeout_s, progress))


def read_plan(cluster: Cluster, source: StackSource, options: ApplyOptions, notes: Notes,
              parent_live: dict[str, Any] | None = None) -> Plan:
    """1. Read: render, preflight, the parent and its members, what to recreate and what to prune.
    `parent_live`: the parent as the caller has just read it (read here otherwise)."""
    stack = stack_objects(source.lock, options.namespace)
    ns = stack.namespace
    pre = preflight(cluster, stack.objects, ns)
    for note in pre.notes:
        notes.add(note)
    facts = cluster_facts(cluster, stack.objects)
    for note in facts.notes:
        notes.add(note)
    if facts.findings and options.strict:
        raise ClusterError("\n".join(facts.findings), "fix the cluster or spec.target.nodeLabels, or apply without "
                           "--strict to be warned only")
    for finding in facts.findings:
        notes.add(finding)
    if pre.namespace_missing and not options.create_namespace:
        raise ClusterError(f"namespace {ns} does not exist", "create it, or pass --create-namespace")
    if parent_live is None:
        parent_live = cluster.get(CONFIGMAPS, ns, parent_name(stack.deployment))
    parent = read_parent(parent_live, stack.deployment, ns)
    desired = tuple(as_member(o, parent, source.revision) for o in stack.objects)
    res_of = {key_of(o): pre.resources[(o["apiVersion"], o["kind"])] for o in desired}
    members = _members(cluster, pre, parent, stack, notes)
    live: dict[ObjectKey, dict[str, Any] | None] = {}
    for key in (key_of(o) for o in desired):
        member = members.get(key)
        live[key] = member.live if member else None if pre.namespace_missing else cluster.get(res_of[key], ns,
                                                                                                 key.name)
    recreate = {key_of(o): reasons for o in desired
                if (current := live[key_of(o)]) is not None and (reasons := recreate_reasons(current, o))}
    if recreate and not options.allow_recreate:
        raise RecreateRefused("\n".join(
            f"{key.subject} in namespace {ns} needs delete and recreate ({'; '.join(reasons)}): its pods go down; "
            "re-run with --allow-recreate to do it" for key, reasons in sorted(recreate.items())))
    prune = tuple(sorted((m for k, m in members.items() if k not in live), key=lambda m: (-apply_rank(m.key), m.key)))
    return Plan(stack, parent, desired, res_of, live, recreate, prune, pre.namespace_missing, parent_live)


def _dry_run(cluster: Cluster, plan: Plan, options: ApplyOptions,
             notes: Notes) -> tuple[dict[ObjectKey, Action], frozenset[ObjectKey], bool]:
    """2. Check: every write as a server-side dry run; all conflicts are reported together. Returns
    the predicted action per object, the objects whose apply is a no-op, and whether the parent's first
    write is one."""
    predicted: dict[ObjectKey, Action] = {}
    settled: set[ObjectKey] = set()
    conflicts: list[Conflicts] = []
    dropped: list[str] = []
    for obj, key in zip(plan.desired, plan.keys, strict=True):
        current = plan.live[key]
        if key in plan.recreate:
            assert current is not None
            cluster.delete(plan.res_of[key], key.namespace, key.name, propagation="Foreground",
                           uid=current["metadata"]["uid"], dry_run=True)
            notes.add(f"{key.subject}: the new object cannot be dry-run while the old one exists; only its "
                      "deletion was")
            predicted[key] = Action.recreated
            continue
        if apply_changes_nothing(current, obj, FIELD_MANAGER):  # nothing to write: no dry run of it needed
            predicted[key] = Action.unchanged
            settled.add(key)
            continue
        try:
            result = cluster.apply(plan.res_of[key], obj, force=options.force_conflicts, dry_run=True)
        except Conflicts as exc:
            conflicts.append(exc)
            continue
        if lost := dropped_fields(obj, result):
            dropped.append(f"{key.subject}: the server would drop {', '.join(lost[:5])}"
                           + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
                           + " (a CRD without the version or conversion webhook it needs?)")
        predicted[key] = (Action.created if current is None else
                          Action.unchanged if _comparable(current) == _comparable(result) else Action.configured)
        if current is not None and result == current:
            settled.add(key)
    for member in plan.prune:
        cluster.delete(member.res, member.key.namespace, member.key.name, uid=member.live["metadata"]["uid"],
                       dry_run=True)
    parent, stack = plan.parent, plan.stack
    first = parent_object(parent, stack.deployment, parent.group_kinds | stack.group_kinds, parent.record,
                          pin_version=False)
    parent_settled = apply_changes_nothing(plan.parent_live, first, FIELD_MANAGER)
    if not parent_settled:
        written = cluster.apply(CONFIGMAPS, first, dry_run=True)
        parent_settled = plan.parent_live is not None and written == plan.parent_live
    if conflicts:
        raise Conflicts.merge(conflicts)
    if dropped:
        raise DroppedFields("\n".join(dropped))
    return predicted, frozenset(settled), parent_settled


def _write(cluster: Cluster, checked: CheckedApply, timeout_s: float,
           progress: Progress) -> tuple[dict[ObjectKey, Action], bool]:
    """3. Write, in the order the module docstring gives. Returns the action per object and whether a
    record entry was added. A lost server or Lease says how far the writes got."""
    plan = checked.plan
    done: list[str] = []
    total = 2 + len(plan.recreate) + len(plan.keys) + len(plan.prune)

    def step(message: str) -> None:
        done.append(message)
        progress(message)

    try:
        return _writes(cluster, checked, timeout_s, progress, step)
    except (Unreachable, LeaseLost) as exc:
        last = f" (the last: {done[-1]})" if done else ""
        again = "run it again once the server answers: it converges" if isinstance(exc, Unreachable) else \
            "run it again: it converges"
        raise type(exc)(f"{exc.message}; the apply stopped after {len(done)} of its {total} writes{last}",
                        again) from None


def _writes(cluster: Cluster, checked: CheckedApply, timeout_s: float, progress: Progress,
            step: Progress) -> tuple[dict[ObjectKey, Action], bool]:
    """The writes of `_write`; `step` hears each one done, `progress` what happens in between. A write
    the dry run showed to be a no-op is not sent (nothing would change, so nothing can be lost)."""
    plan, source, options = checked.plan, checked.source, checked.options
    stack, ns = plan.stack, plan.stack.namespace
    union = plan.parent.group_kinds | stack.group_kinds
    if checked.parent_settled:
        parent = plan.parent
        step(f"{plan.parent.subject} unchanged (it lists the kinds of the old and the new stack)")
    else:
        written = cluster.apply(CONFIGMAPS, parent_object(plan.parent, stack.deployment, union, plan.parent.record,
                                                          pin_version=False))
        step(f"{plan.parent.subject} written (the kinds of the old and the new stack)")
        parent = replace(plan.parent, exists=True, resource_version=written["metadata"]["resourceVersion"])
    live = dict(plan.live)
    actions: dict[ObjectKey, Action] = {}
    for key in plan.keys:
        current = live[key]
        if current is None:
            continue
        uid = current["metadata"]["uid"]
        if key in plan.recreate:
            progress(f"{key.subject}: deleting for recreate ({'; '.join(plan.recreate[key])})")
            cluster.delete(plan.res_of[key], ns, key.name, propagation="Foreground", uid=uid)
            step(f"{key.subject} deleted for recreate")
            actions[key] = Action.recreated
        elif not current["metadata"].get("deletionTimestamp"):
            continue
        # Deleting (now, or left so by an interrupted recreate): applying to it would be lost with it.
        wait_gone(cluster, plan.res_of[key], ns, key.name, uid, timeout_s, progress)
        live[key] = None
    for obj, key in zip(plan.desired, plan.keys, strict=True):  # a ComputeDomain before its user
        before = live[key]
        if key in checked.settled and before is not None:
            actions[key] = Action.unchanged
            step(f"{key.subject} {actions[key]}")
            continue
        after = cluster.apply(plan.res_of[key], obj, force=options.force_conflicts)
        actions[key] = actions.get(key) or (Action.created if before is None else Action.unchanged if
                                            before["metadata"]["resourceVersion"] == after["metadata"][
                                                "resourceVersion"] else Action.configured)
        step(f"{key.subject} {actions[key]}")
    for member in plan.prune:  # the DynamoGraphDeployment first, then what it used
        cluster.delete(member.res, member.key.namespace, member.key.name, uid=member.live["metadata"]["uid"])
        step(f"{member.key.subject} pruned")
    lock = source.lock
    entry = AppliedRevision(revision=source.revision, stack=lock.metadata.name, stack_digest=lock.stack_digest,
                            applied_at=_now(), applied_by="", objects=tuple(k.subject for k in plan.keys),
                            lock=lock.to_data())
    record = parent.record
    recorded = parent.latest is None or not parent.latest.same_stack(entry)
    if recorded:
        record = with_entry(record, entry.replace(applied_by=cluster.whoami()))
    elif checked.parent_settled and union == stack.group_kinds:
        return actions, recorded  # the parent as it is already says this: the same kinds, the same record
    cluster.apply(CONFIGMAPS, parent_object(parent, stack.deployment, stack.group_kinds, record, pin_version=True))
    return actions, recorded
