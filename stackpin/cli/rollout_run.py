"""`stackpin rollout start|status|pause|resume|abort`: the engine (stackpin.rollout.engine) run and its
records (stackpin.rollout.record) shown. Exit 0 succeeded, 1 stopped, paused, aborted or refused (another
rollout holds the fleet, or a live runner drives it), 2 bad input (a fleet file, ACTIVE file or record)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import ALLOW_STAND_INS, HISTORY, OUTPUT, allow_stand_ins, emit, user_errors

if TYPE_CHECKING:
    from stackpin.rollout.engine import Engine
    from stackpin.rollout.fleet import LoadedFleet
    from stackpin.rollout.record import Rollout, RolloutStore

ROLLOUTS = click.option("--rollouts", "rollouts_dir", default="rollouts", show_default=True, metavar="DIR",
                        type=click.Path(file_okay=False), help="Where rollout records are kept: <fleet>/<id>.yaml.")
LOCKDIR = click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
                       help="Where lockfiles are looked up.")


def note(message: str) -> None:
    """Progress on stderr: a rollout runs for minutes to hours."""
    click.echo(f"  {message}", err=True)


def _store(fleet_arg: str, rollouts_dir: str) -> RolloutStore:
    """FLEET is a fleet file or a fleet's name (its directory under --rollouts)."""
    from stackpin.rollout.fleet import load_fleet
    from stackpin.rollout.record import RolloutStore

    name = load_fleet(fleet_arg).fleet.metadata.name if Path(fleet_arg).is_file() else fleet_arg
    return RolloutStore(Path(rollouts_dir), name)


def _active(store: RolloutStore) -> Rollout:
    from stackpin.rollout.record import Refused

    rollout_id = store.active_id()
    if rollout_id is None:
        raise Refused(f"fleet {store.fleet} has no active rollout in {store.directory}")
    return store.read(rollout_id)


def _engine(store: RolloutStore, record: Rollout, fleet_arg: str | None, history: str, lockdir: str) -> Engine:
    """The engine for an existing record: its fleet file and its revision, checked against the record."""
    from stackpin.deploy.source import resolve_source
    from stackpin.errors import StackpinError
    from stackpin.rollout.engine import Engine, check_plan
    from stackpin.rollout.fleet import load_fleet

    fleet_file = fleet_arg if fleet_arg and Path(fleet_arg).is_file() else record.fleet_file
    fleet: LoadedFleet = load_fleet(fleet_file)
    check_plan(fleet, record)  # an edited fleet file is refused before anything is written
    source = resolve_source(f"{record.deployment}@{record.revision}", Path(lockdir), Path(history))
    if source.lock.stack_digest != record.stack_digest:
        raise StackpinError(f"{record.deployment}@{record.revision} in {history} has stack digest "
                            f"{source.lock.stack_digest}, the rollout sends {record.stack_digest}: not the same "
                            "history")
    return Engine(fleet, source, store, record, Path(history), Path(lockdir), on_note=note)


def _finish(record: Rollout, store: RolloutStore, output: str) -> None:
    from stackpin.rollout.record import State

    show(record, store, output)
    if record.state != State.succeeded:
        sys.exit(1)


@click.command()
@click.argument("fleet_file", metavar="FLEET", type=click.Path(exists=True, dir_okay=False))
@click.argument("revision", metavar="DEPLOYMENT@REV")
@click.option("--allow-recreate", is_flag=True,
              help="Let apply delete and recreate a DynamoGraphDeployment whose change cannot be made in place "
                   "(that rack's pods go down; the rollout takes one wave at a time). Kept for resume.")
@ALLOW_STAND_INS
@ROLLOUTS
@HISTORY
@LOCKDIR
@OUTPUT
@user_errors
def start(fleet_file: str, revision: str, allow_recreate: bool, rollouts_dir: str, history_dir: str, lockdir: str,
          output: str) -> None:
    """Roll DEPLOYMENT@REV out to the racks of FLEET (a fleet file), wave by wave: the canary, then
    batchSize racks at a time; each rack applied, awaited ready and soaked, the canary bench-gated.

    One rollout per fleet at a time (rollouts/<fleet>/ACTIVE); every step is recorded in
    rollouts/<fleet>/<id>.yaml, so `rollout resume` carries on after any interruption.
    """
    from stackpin.deploy.source import resolve_source
    from stackpin.rollout.engine import Engine, new_record
    from stackpin.rollout.fleet import load_fleet
    from stackpin.rollout.record import RolloutStore

    fleet = load_fleet(fleet_file)
    source = resolve_source(revision, Path(lockdir), Path(history_dir))
    record = new_record(fleet, source, "000000", allow_recreate, allow_stand_ins())
    store = RolloutStore(Path(rollouts_dir), fleet.fleet.metadata.name)
    store.active_id()  # a bad ACTIVE file is one line, before anything is taken
    # The runner's claim before the fleet's lock: no resume can take up the new record while it starts.
    with store.claim("starting a rollout") as claim:
        record = record.model_copy(update={"id": store.acquire()})
        claim.describe(f"rollout {record.id}")
        store.write(record)
        click.echo(f"rollout {record.id}: {record.deployment}@{record.revision} to fleet {record.fleet} "
                   f"({store.path(record.id)})", err=True)
        engine = Engine(fleet, source, store, record, Path(history_dir), Path(lockdir), on_note=note)
        done = engine.run()
    _finish(done, store, output)


@click.command()
@click.argument("fleet", metavar="FLEET")
@ROLLOUTS
@HISTORY
@LOCKDIR
@OUTPUT
@user_errors
def resume(fleet: str, rollouts_dir: str, history_dir: str, lockdir: str, output: str) -> None:
    """Carry on FLEET's active rollout (paused, or whose process died) from its first step not done;
    a rack the record shows applied, or whose status is in sync on the revision, is not applied again.
    Refused while another process drives it (the fleet's runner lock), and for a fleet file whose racks or
    waves are not the rollout's."""
    from stackpin.rollout.record import State

    store = _store(fleet, rollouts_dir)
    _active(store)  # no active rollout, or a bad ACTIVE file: said before the lock is tried
    with store.claim("resuming") as claim:  # exactly one runner: a second resume is refused here
        record = _active(store)  # read again under the claim: what a runner that just ended left
        claim.describe(f"rollout {record.id}")
        engine = _engine(store, record, fleet, history_dir, lockdir)
        engine.record = record.with_state(State.running)
        store.write(engine.record)
        click.echo(f"rollout {record.id}: resuming", err=True)
        done = engine.run()
    _finish(done, store, output)


@click.command()
@click.argument("fleet", metavar="FLEET")
@ROLLOUTS
@user_errors
def pause(fleet: str, rollouts_dir: str) -> None:
    """Mark FLEET's active rollout paused: its process stops after the step it is in (exit 0)."""
    from stackpin.rollout.record import Refused, State

    store = _store(fleet, rollouts_dir)
    _active(store)
    with store.writing():  # against the runner's own read-then-write of the record
        record = _active(store)
        if record.state != State.running:
            raise Refused(f"rollout {record.id} is {record.state}, not running")
        store.write(record.with_state(State.paused, "paused by rollout pause"))
    click.echo(f"rollout {record.id}: paused (a running process stops after its current step)")


@click.command()
@click.argument("fleet", metavar="FLEET")
@click.option("--rollback", is_flag=True,
              help="Also apply each rack this rollout changed back to what it ran before.")
@ROLLOUTS
@HISTORY
@LOCKDIR
@user_errors
def abort(fleet: str, rollback: bool, rollouts_dir: str, history_dir: str, lockdir: str) -> None:
    """End FLEET's active rollout (state aborted) and release the fleet; nothing is rolled back unless
    --rollback."""
    from contextlib import nullcontext

    from stackpin.rollout.record import State, Step

    store = _store(fleet, rollouts_dir)
    record = _active(store)
    # A rollback writes to racks: only with the runner's claim (a live runner may be mid-apply: refused).
    with store.claim(f"rolling back rollout {record.id}") if rollback else nullcontext():
        with store.writing():  # against the runner's own read-then-write of the record
            record = _active(store)
            store.write(record.with_state(State.aborted, "aborted by rollout abort"))
        if rollback:
            engine = _engine(store, store.read(record.id), fleet, history_dir, lockdir)
            racks = {r.name: r for r in engine.fleet.fleet.spec.racks}
            for entry in record.racks:
                if entry.step.rank >= Step.applying.rank and entry.step != Step.rolled_back and \
                        entry.previous_digest not in (None, record.stack_digest):
                    engine.roll_back(racks[entry.name], entry)
        store.release(record.id)
    click.echo(f"rollout {record.id}: aborted; fleet {store.fleet} released")


@click.command()
@click.argument("fleet", metavar="[FLEET]", required=False)
@ROLLOUTS
@OUTPUT
@user_errors
def status(fleet: str | None, rollouts_dir: str, output: str) -> None:
    """FLEET's active (else newest) rollout from its record: per rack the wave, revision live, step, gate
    result, and why it stopped. Without FLEET, every fleet under --rollouts."""
    from stackpin.rollout.record import RolloutStore

    root = Path(rollouts_dir)
    from stackpin.rollout.record import FLEET_PATTERN

    names = [fleet] if fleet else sorted(p.name for p in root.iterdir() if p.is_dir()
                                         and re.match(FLEET_PATTERN, p.name)) if root.is_dir() else []
    stores = [_store(name, rollouts_dir) if name == fleet else RolloutStore(root, name) for name in names]
    found = [(s, r) for s in stores if (r := s.latest()) is not None]
    # Whether a runner drives it is the runner lock's answer, tried now (never the pid the record names).
    alive = {s.fleet: s.runner_alive() for s, _ in found}
    if output != "text":
        rows = [as_shown(r, alive[s.fleet]) for s, r in found]
        emit(rows if fleet is None else rows[0] if rows else None, output)
        return
    if not found:
        click.echo(f"no rollouts in {rollouts_dir}" + (f" for fleet {fleet}" if fleet else ""))
    for store, record in found:
        show(record, store, "text", alive[store.fleet])


def shown_state(record: Rollout, alive: bool | None) -> str:
    """The record's state as it stands: `running` only while a runner holds the claim, else `interrupted`
    (the runner died: kill -9, a crash, a lost machine)."""
    from stackpin.rollout.record import State

    return "interrupted" if record.state == State.running and alive is False else str(record.state)


def as_shown(record: Rollout, alive: bool | None) -> dict[str, object]:
    data = record.as_dict()
    if alive is not None:
        data.update(state=shown_state(record, alive), recordState=str(record.state), runnerAlive=alive)
    return data


def next_step(record: Rollout) -> str:
    """What `rollout resume` would do first."""
    from stackpin.rollout.record import Step

    entry = next((r for r in record.racks if r.step != Step.done), None)
    if entry is None:
        return "it would check the racks and end it"
    what = {Step.pending: "applied", Step.applying: "applied again unless its status is in sync on the revision",
            Step.failed: "rolled back"}.get(entry.step, "awaited ready and in sync, then the gates")
    return f"it would carry on at rack {entry.name} (step {entry.step}: {what})"


def show(record: Rollout, store: RolloutStore, output: str, alive: bool | None = None) -> None:
    """`alive`: whether a runner holds the fleet's claim (None: not asked, this process is the runner)."""
    from stackpin.rollout.record import State, Step

    if output != "text":
        emit(as_shown(record, alive), output)
        return
    state = shown_state(record, alive)
    if record.state == State.running and alive:
        state += f" (runner {record.runner})"
    elif record.state == State.paused and alive:
        state += " (its runner still finishes its step)"
    click.echo(f"rollout {record.id}  fleet {record.fleet}  {record.deployment}@{record.revision}  "
               f"{state}  ({store.path(record.id)})")
    rows = [("RACK", "WAVE", "LIVE", "STEP", "APPLIES", "GATE")]
    for r in record.racks:
        on_new = r.step.rank >= Step.applied.rank and r.step not in (Step.failed, Step.rolled_back) or \
            r.previous_digest == record.stack_digest
        live = record.revision if on_new else r.previous_revision
        gate = f"{r.gate.verdict or 'measuring'}: {r.gate.summary}" if r.gate else "-"
        rows.append((r.name, str(r.wave + 1), "-" if live is None else str(live), str(r.step), str(r.applies),
                     gate))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[5])
    for r in record.racks:
        if r.messages:
            click.echo(f"{r.name}: {r.messages[-1]}")
    if record.reason:
        click.echo(f"reason: {record.reason}")
    if state == "interrupted":
        click.echo(f"runner: {record.runner or 'its process'} is gone (killed or crashed); `stackpin rollout "
                   f"resume {record.fleet}`: {next_step(record)}")
