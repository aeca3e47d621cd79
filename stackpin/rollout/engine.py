"""Run and resume a rollout: a revision to the fleet's racks, wave by wave (`FleetSpec.wave_plan()`).

Per wave: each rack is applied (`stackpin.deploy.apply_stack`, the same check-then-write as `stackpin
apply`), then awaited ready, then the wave soaks (every rack must stay ready), then, on the canary wave,
the bench gate (the canary's previous stack measured before the apply, the new one after, judged by
`stackpin.rollout.benchgate`). Every step is written to the record before the next starts, so a
rollout killed anywhere resumes from it; a rack whose step is `applied` or later is never applied again,
and one whose status is in sync on the target digest (`stackpin status` would exit 0: the record entry
written, nothing stale, nothing drifted) is not either. Anything less, a killed apply that created the new
DynamoGraphDeployment but pruned nothing, say, is applied again (server-side apply converges). A rack is
marked done only while its status is in sync. The states, transitions and invariants: docs/rollout.md.

The caller holds the runner's claim (`RolloutStore.claim`) while `Engine.run` runs: one runner per fleet.

Stops: a failed gate or readiness with onFailure=rollback applies the rack's previous revision back and
stops; with onFailure=pause it pauses, nothing rolled back. An API server that does not answer pauses
the rollout naming the rack (apply writes nothing before its checks pass; the next rack is not started).
A person's `rollout pause|abort` is seen between steps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from stackpin.deploy.apply import ApplyOptions, apply_stack
from stackpin.deploy.applyset import parent_name, read_parent
from stackpin.deploy.kube import CONFIGMAPS, ApiResource, Cluster, Unreachable
from stackpin.deploy.lease import DURATION_S
from stackpin.deploy.objects import DGD_KIND, key_of, stack_objects
from stackpin.deploy.readiness import readiness
from stackpin.deploy.source import StackSource, refuse_stand_ins, resolve_source
from stackpin.deploy.status import StatusReport, deployment_status
from stackpin.deploy.wait import wait_ready
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.rollout.fleet import FleetSpec, LoadedFleet, OnFailure, Rack
from stackpin.rollout.record import GateRecord, RackRecord, Rollout, RolloutStore, State, Step, now

Note = Callable[[str], None]
LEASE_WAIT_S = 3.0 * DURATION_S  # outlasts a dead holder's Lease (it expires unrenewed)
# Test seam, for the fault tests alone (tests/test_rollout_faults.py): the runner kills itself with SIGKILL
# at a fault point (each record write, each write of an apply): `N`, its Nth; `after:TEXT`, the first whose
# note holds TEXT. Never set outside those tests.
FAULT_ENV = "STACKPIN_TEST_ROLLOUT_SIGKILL_AT"


class Halt(Exception):
    """The record on disk is no longer running (a person paused or aborted it): stop between steps."""


class RackFailed(Exception):
    def __init__(self, rack: str, reason: str, inconclusive: bool = False) -> None:
        super().__init__(reason)
        # inconclusive: the evidence could not decide; never a rollback, the rollout pauses whatever onFailure says
        self.rack, self.reason, self.inconclusive = rack, reason, inconclusive


@dataclass(frozen=True)
class Live:
    revision: int | None
    digest: str | None
    problems: tuple[str, ...]  # why the rack's status is not in sync (none: `stackpin status` exits 0)

    def runs(self, digest: str) -> bool:
        """Whether the rack runs `digest` and its status is in sync: the record entry written, nothing stale
        (a member another stack left, a DGD being deleted), nothing drifted."""
        return self.digest == digest and not self.problems


def sync_problems(report: StatusReport) -> tuple[str, ...]:
    """`stackpin status`'s reasons for not being in sync, less the lockfile comparison (the rollout compares
    with its revision's digest instead)."""
    return (*report.problems, *(f"{d.subject} {d.path} drifted (changed by {d.manager})" for d in report.drift))


def _fault_at() -> int | str | None:
    value = os.environ.get(FAULT_ENV)
    if value is None:
        return None
    if value.startswith("after:") and len(value) > 6:
        return value[6:]
    if not value.isdigit() or int(value) < 1:
        raise StackpinError(f"{FAULT_ENV}={value!r}: a test seam taking a fault point's number (1, 2, ...) "
                            "or after:TEXT")
    return int(value)


@dataclass
class Engine:
    fleet: LoadedFleet
    target: StackSource
    store: RolloutStore
    record: Rollout
    history: Path = Path("history")
    lockdir: Path = Path("lockfiles")
    on_note: Note = print
    request_timeout_s: float = 30.0
    poll_s: float = 1.0
    connect: Callable[[Rack], Cluster] | None = None
    _clusters: dict[str, Cluster] = field(default_factory=dict)
    working: str = "?"  # the rack the last step began on (an error names it)
    _fault_at: int | str | None = field(default_factory=_fault_at)
    _faults: int = 0

    def fault_point(self, label: str) -> None:
        """The fault tests' seam (FAULT_ENV): SIGKILL this process at the chosen fault point."""
        if self._fault_at is None:
            return
        self._faults += 1
        if self._faults == self._fault_at or isinstance(self._fault_at, str) and self._fault_at in label:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)

    # --- the record ---------------------------------------------------------------------------------

    def save(self, record: Rollout) -> None:
        """Write `record`; a pause or abort a person wrote since the last write wins over `running`."""
        with self.store.writing():
            if self.store.path(record.id).is_file():
                on_disk = self.store.read(record.id)
                if on_disk.state in (State.paused, State.aborted) and record.state == State.running:
                    record = record.with_state(on_disk.state, on_disk.reason)
            self.store.write(record)
        self.record = record
        self.fault_point("record written")

    def rack_update(self, name: str, **changes: Any) -> None:
        self.save(self.record.with_rack(name, **changes))

    def checkpoint(self) -> None:
        on_disk = self.store.read(self.record.id)
        if on_disk.state != State.running:
            self.record = on_disk
            raise Halt(on_disk.state)

    def note(self, rack: str, message: str) -> None:
        self.on_note(f"{rack}: {message}")

    # --- the cluster --------------------------------------------------------------------------------

    def cluster(self, rack: Rack) -> Cluster:
        if rack.name not in self._clusters:
            if self.connect is not None:
                self._clusters[rack.name] = self.connect(rack)
            else:
                from stackpin.deploy.kube import connect

                kubeconfig = str(self.fleet.resolve(rack.kubeconfig)) if rack.kubeconfig else None
                self._clusters[rack.name] = connect(kubeconfig, rack.context, self.request_timeout_s)
        return self._clusters[rack.name]

    def namespace(self, rack: Rack) -> str:
        return rack.namespace or self.target.lock.stack_profile.metadata.namespace

    def live(self, rack: Rack) -> Live | None:
        """What the rack's in-cluster record says is live (None: no stackpin deployment there)."""
        cluster, ns = self.cluster(rack), self.namespace(rack)
        deployment = self.target.lock.stack_profile.metadata.deployment
        if not read_parent(cluster.get(CONFIGMAPS, ns, parent_name(deployment)), deployment, ns).exists:
            return None
        report = deployment_status(cluster, deployment, ns, lockdir=self.lockdir)
        return Live(report.revision, report.stack_digest, sync_problems(report))

    def in_sync(self, rack: Rack) -> None:
        """RackFailed unless the rack's status is in sync on the target digest (a rack is done only then)."""
        live = self.live(rack)
        target = self.target.lock.stack_digest
        if live is None:
            raise RackFailed(rack.name, "its status is not in sync: no stackpin deployment there")
        if not live.runs(target):
            why = "; ".join(live.problems) or f"it runs {live.digest}, not {target}"
            raise RackFailed(rack.name, f"its status is not in sync: {why}")

    def serving(self, rack: Rack, lock: StackLock) -> tuple[ApiResource, str]:
        """The DynamoGraphDeployment `lock` renders on `rack`: its resource and name."""
        stack = stack_objects(lock, self.namespace(rack))
        dgd = next(key_of(o) for o in stack.objects if o["kind"] == DGD_KIND)
        res = self.cluster(rack).resource_for(dgd.group_kind)
        if res is None:
            raise StackpinError(f"rack {rack.name}: the cluster does not serve {dgd.group_kind}")
        return res, dgd.name

    def apply(self, rack: Rack, source: StackSource) -> None:
        ready = self.fleet.fleet.spec.gates.ready.timeout_seconds
        # A rollout killed mid-apply leaves its Lease until it expires: a resume waits it out.
        options = ApplyOptions(namespace=rack.namespace, timeout_s=ready, allow_recreate=self.record.allow_recreate,
                               lock_timeout_s=LEASE_WAIT_S, allow_stand_ins=self.record.allow_stand_ins)
        def progress(message: str) -> None:
            self.note(rack.name, message)
            self.fault_point(message)  # after each write of the apply

        apply_stack(self.cluster(rack), source, options, progress=progress,
                    warn=lambda m: self.note(rack.name, f"warning: {m}"))

    def wait(self, rack: Rack, lock: StackLock) -> None:
        res, name = self.serving(rack, lock)
        timeout = self.fleet.fleet.spec.gates.ready.timeout_seconds
        wait_ready(self.cluster(rack), res, self.namespace(rack), name, timeout,
                   progress=lambda m: self.note(rack.name, m))

    # --- the steps ----------------------------------------------------------------------------------

    def run(self) -> Rollout:
        """Carry the record on from its first step not done, to its end or a pause. The caller holds the
        runner's claim."""
        from stackpin.rollout.record import this_runner

        spec = self.fleet.fleet.spec
        check_plan(self.fleet, self.record)
        self.save(self.record.model_copy(update={"runner": this_runner()}))
        try:
            if any(r.step == Step.failed for r in self.record.racks):  # a rollback the last run could not finish
                failed = next(r for r in self.record.racks if r.step == Step.failed)
                raise RackFailed(failed.name, failed.messages[-1] if failed.messages else "failed")
            for index, wave in enumerate(spec.wave_plan()):
                self.on_note(f"wave {index + 1}: {', '.join(r.name for r in wave)}")
                for rack in wave:
                    self.checkpoint()
                    self.apply_rack(rack, canary=index == 0)
                for rack in wave:
                    self.checkpoint()
                    self.ready_rack(rack)
                self.checkpoint()
                self.soak(wave)
                if index == 0:
                    self.checkpoint()
                    self.gate(wave[0])
                for rack in wave:
                    if self.record.rack(rack.name).step != Step.done:
                        self.working = rack.name
                        self.in_sync(rack)  # done only while `stackpin status` would say in sync
                        self.rack_update(rack.name, step=Step.done)
            self.save(self.record.with_state(State.succeeded, f"revision {self.record.revision} is live on "
                                             f"all {len(spec.racks)} racks"))
        except Halt:
            pass
        except Unreachable as exc:
            self.save(self.record.with_state(State.paused, f"rack {self.current_rack()}: its API server did not answer "
                                             f"({exc.message}); resume once it does"))
        except RackFailed as exc:
            self.failed(exc)
        except StackpinError as exc:  # apply refused (conflicts, recreate, ...): its check wrote nothing
            self.save(self.record.with_state(State.paused, f"rack {self.current_rack()}: {' '.join(exc.lines())}"))
        if self.record.state.ended:
            self.store.release(self.record.id)
        return self.record

    def current_rack(self) -> str:
        return self.working

    def apply_rack(self, rack: Rack, canary: bool) -> None:
        entry = self.record.rack(rack.name)
        if entry.step.rank >= Step.applied.rank:
            return
        self.working = rack.name
        live = self.live(rack)
        if entry.step == Step.pending:
            self.rack_update(rack.name, previous_revision=live.revision if live else None,
                             previous_digest=live.digest if live else None, started_at=now())
            entry = self.record.rack(rack.name)
        bench = self.fleet.fleet.spec.gates.bench
        target_digest = self.target.lock.stack_digest
        if canary and bench is not None and entry.previous_digest not in (None, target_digest) \
                and not (entry.gate and entry.gate.before):
            before = self.measure(rack, self.previous_lock(rack, entry), "before")
            self.rack_update(rack.name, gate=GateRecord(before=before))
        if live is not None and live.runs(target_digest):
            self.note(rack.name, f"already runs {target_digest[:19]}, in sync: not applied again")
            self.rack_update(rack.name, step=Step.applied,
                             messages=(*entry.messages, "the cluster already ran the target digest"))
            return
        self.checkpoint()  # a pause or abort written during the bench above stops here, before the apply
        self.rack_update(rack.name, step=Step.applying)
        self.apply(rack, self.target)
        self.rack_update(rack.name, step=Step.applied, applies=self.record.rack(rack.name).applies + 1)

    def ready_rack(self, rack: Rack) -> None:
        if self.record.rack(rack.name).step.rank >= Step.ready.rank:
            return
        from stackpin.deploy.wait import WaitTimeout

        self.working = rack.name
        try:
            self.wait(rack, self.target.lock)
        except WaitTimeout as exc:
            raise RackFailed(rack.name, exc.message) from None
        self.in_sync(rack)
        self.rack_update(rack.name, step=Step.ready)

    def soak(self, wave: list[Rack]) -> None:
        """Wait gates.soakSeconds, every rack of the wave staying ready."""
        racks = [r for r in wave if self.record.rack(r.name).step.rank < Step.soaked.rank]
        seconds = self.fleet.fleet.spec.gates.soak_seconds
        deadline, said = time.monotonic() + seconds, 0.0
        serving = {rack.name: self.serving(rack, self.target.lock) for rack in racks}  # rendered once, not per poll
        while racks:
            for rack in racks:
                self.working = rack.name
                res, name = serving[rack.name]
                live = self.cluster(rack).get(res, self.namespace(rack), name)
                state = readiness(live) if live else None
                if state is None or not state.ready:
                    what = state.summary() if state else "deleted"
                    raise RackFailed(rack.name, f"stopped being ready while soaking: {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if time.monotonic() - said >= 30 or said == 0:
                self.on_note(f"soaking {', '.join(r.name for r in racks)}: {left:.0f}s of {seconds:g}s left")
                said = time.monotonic()
            time.sleep(min(self.poll_s, left))
            self.checkpoint()
        for rack in racks:
            self.rack_update(rack.name, step=Step.soaked)

    def gate(self, canary: Rack) -> None:
        entry = self.record.rack(canary.name)
        if entry.step.rank >= Step.gated.rank:
            return
        self.working = canary.name
        bench = self.fleet.fleet.spec.gates.bench
        if bench is None:
            gate = GateRecord(verdict="pass", summary="no bench gate: passed on ready and soak")
        elif not (entry.gate and entry.gate.before):
            gate = GateRecord(verdict="pass", summary="no previous stack on the rack to compare with: passed on "
                                                      "ready and soak")
        else:
            from stackpin.bench.binding import parse_threshold

            after = self.measure(canary, self.target.lock, "after")
            from stackpin.rollout.benchgate import judge

            result = judge([Path(p) for p in entry.gate.before], [Path(p) for p in after],
                           parse_threshold(bench.threshold, "threshold"), bench.allow_acceptance_change)
            gate = entry.gate.model_copy(update={"verdict": result.verdict, "summary": result.summary,
                                                 "after": after})
        self.rack_update(canary.name, gate=gate)
        self.note(canary.name, f"bench gate {gate.verdict}: {gate.summary}")
        if gate.verdict != "pass":
            raise RackFailed(canary.name, f"bench gate {gate.verdict}: {gate.summary}",
                             inconclusive=gate.verdict == "inconclusive")
        self.rack_update(canary.name, step=Step.gated)

    def measure(self, rack: Rack, lock: StackLock, label: str) -> tuple[str, ...]:
        bench = self.fleet.fleet.spec.gates.bench
        assert bench is not None and rack.endpoint is not None  # the fleet's validator holds the canary to it
        out_dir = self.store.directory / self.record.id / rack.name
        out_dir.mkdir(parents=True, exist_ok=True)
        self.note(rack.name, f"bench gate: measuring {lock.metadata.name} ({label}), {bench.runs} run(s)")
        from stackpin.rollout.benchgate import measure, pinned_slo

        # Every side is held to the SLO of the stack the rack ran before (bench compare refuses others).
        gate = pinned_slo(bench, self.previous_lock(rack, self.record.rack(rack.name)))
        files = measure(rack.endpoint, lock, gate, self.fleet.resolve(bench.trace), out_dir, label,
                        lambda m: self.note(rack.name, m))
        return tuple(str(f) for f in files)

    # --- failure ------------------------------------------------------------------------------------

    def previous_source(self, rack: Rack, entry: RackRecord) -> StackSource:
        """What ran on the rack before: its history revision (DEPLOYMENT@PREV), else the lock its record kept."""
        if entry.previous_revision is not None:
            return resolve_source(f"{self.record.deployment}@{entry.previous_revision}", self.lockdir, self.history)
        cluster, ns = self.cluster(rack), self.namespace(rack)
        deployment = self.target.lock.stack_profile.metadata.deployment
        parent = read_parent(cluster.get(CONFIGMAPS, ns, parent_name(deployment)), deployment, ns)
        kept = next((e.lock for e in reversed(parent.record) if e.stack_digest == entry.previous_digest and e.lock),
                    None)
        if kept is None:
            raise StackpinError(f"rack {rack.name}: the lock of {entry.previous_digest} is not in its record")
        return StackSource(msgspec.convert(kept, StackLock), origin=f"rack {rack.name}'s record")

    def previous_lock(self, rack: Rack, entry: RackRecord) -> StackLock:
        return self.previous_source(rack, entry).lock

    def failed(self, exc: RackFailed) -> None:
        entry = self.record.rack(exc.rack)
        messages = entry.messages if entry.messages[-1:] == (exc.reason,) else (*entry.messages, exc.reason)
        if self.fleet.fleet.spec.on_failure == OnFailure.pause or exc.inconclusive:
            self.rack_update(exc.rack, messages=messages)
            self.save(self.record.with_state(State.paused, f"rack {exc.rack}: {exc.reason}; resume to retry the "
                                             "step, or abort"))
            return
        self.rack_update(exc.rack, step=Step.failed, messages=messages)
        if entry.previous_digest in (None, self.record.stack_digest):
            why = "no stackpin deployment ran there before" if entry.previous_digest is None else \
                "the rack ran this stack before the rollout"
            self.save(self.record.with_state(State.stopped, f"rack {exc.rack}: {exc.reason}; nothing to roll back "
                                             f"to ({why})"))
            return
        rack = next(r for r in self.fleet.fleet.spec.racks if r.name == exc.rack)
        try:
            self.roll_back(rack, self.record.rack(exc.rack))
        except StackpinError as lost:  # unreachable, a timeout, a refusal: resume retries the rollback
            self.save(self.record.with_state(State.paused, f"rack {exc.rack}: {exc.reason}; the rollback did not "
                                             f"finish ({' '.join(lost.lines())}); resume to roll back"))
            return
        what = f"revision {entry.previous_revision}" if entry.previous_revision else entry.previous_digest
        self.save(self.record.with_state(State.stopped, f"rack {exc.rack}: {exc.reason}; rolled back to {what}"))

    def roll_back(self, rack: Rack, entry: RackRecord) -> None:
        self.working = rack.name
        source = self.previous_source(rack, entry)
        self.note(rack.name, f"rolling back to {source.origin}")
        self.apply(rack, source)
        self.rack_update(rack.name, applies=entry.applies + 1)
        self.wait(rack, source.lock)
        self.rack_update(rack.name, step=Step.rolled_back)
        gate = self.record.rack(rack.name).gate
        if gate is not None and gate.before:
            try:
                again = self.measure(rack, source.lock, "after-rollback")
            except StackpinError as exc:  # rolled back all the same: the record says the bench did not run
                entry = self.record.rack(rack.name)
                self.rack_update(rack.name, messages=(*entry.messages, f"bench after the rollback: {exc.message}"))
                return
            self.rack_update(rack.name, gate=gate.model_copy(update={"after_rollback": again}))


def planned(spec: FleetSpec) -> list[tuple[str, int]]:
    """(rack, wave) in the fleet's wave order: what a record of it names."""
    return [(r.name, i) for i, wave in enumerate(spec.wave_plan()) for r in wave]


def check_plan(fleet: LoadedFleet, record: Rollout) -> None:
    """Refuse (exit 2, before anything is written) a fleet file whose racks or waves are not the record's:
    a rollout goes on over the racks and waves it started with, never over an edited file's."""
    now_plan, then = planned(fleet.fleet.spec), [(r.name, r.wave) for r in record.racks]
    if now_plan == then:
        return
    names, recorded = {n for n, _ in now_plan}, {n for n, _ in then}
    if names - recorded or recorded - names:
        parts = [f"rack {', '.join(sorted(names - recorded))} added"] if names - recorded else []
        parts += [f"rack {', '.join(sorted(recorded - names))} removed"] if recorded - names else []
        what = " and ".join(parts)
    elif now_plan[0][0] != then[0][0]:
        what = f"the canary is {now_plan[0][0]}, the rollout's is {then[0][0]}"
    else:
        waves = dict(now_plan)
        moved = next(((n, w) for n, w in then if waves[n] != w), None)
        what = f"rack {moved[0]} is in wave {waves[moved[0]] + 1}, the rollout's wave {moved[1] + 1}" if moved \
            else "the racks of a wave are in another order"
    raise StackpinError(f"{fleet.path}: its racks and waves are not rollout {record.id}'s ({what}): resume "
                        f"with the fleet file it started with ({record.fleet_file}), or abort it")


def new_record(fleet: LoadedFleet, source: StackSource, rollout_id: str, allow_recreate: bool = False,
               allow_stand_ins: bool = False) -> Rollout:
    """The record of a rollout about to start: every rack pending, in wave order."""
    from stackpin.history.model import DeploymentKey

    lock = source.lock
    if source.revision is None:
        raise StackpinError(f"{source.origin}: a rollout sends a revision of the history: name it DEPLOYMENT@REV")
    refuse_stand_ins(source, allow_stand_ins)  # before the record: a refused rollout leaves nothing behind
    deployment = lock.stack_profile.metadata.deployment
    for rack in fleet.fleet.spec.racks:
        if rack.deployment not in (None, deployment):
            raise StackpinError(f"rack {rack.name} names deployment {rack.deployment}, the revision deploys "
                                f"{deployment}: the name is part of the locked stack; drop the rack's deployment")
    stamp = now()
    racks = tuple(RackRecord(name=name, wave=wave) for name, wave in planned(fleet.fleet.spec))
    return Rollout(id=rollout_id, fleet=fleet.fleet.metadata.name, fleet_file=str(fleet.path),
                   deployment=str(DeploymentKey.of_lock(lock)), revision=source.revision,
                   stack_digest=lock.stack_digest, allow_recreate=allow_recreate,
                   allow_stand_ins=allow_stand_ins, started_at=stamp,
                   updated_at=stamp, racks=racks)
