"""The rollout record: one YAML file per rollout, `<root>/<fleet>/<id>.yaml`, rewritten atomically after
every step so that a rollout killed at any point resumes from it; the fleet's lock, `<root>/<fleet>/
ACTIVE` (created exclusively, holding the active rollout's id), so one rollout exists per fleet at a time;
and the runner's claim, `<root>/<fleet>/RUNNER`, an exclusive flock held for the life of the process
driving the rollout: the kernel drops it when that process dies (kill -9 included), so whether a runner
lives is known by trying the lock, never by a pid written earlier (docs/rollout.md: the state machine).

    apiVersion: stackpin.dev/v1alpha1
    kind: Rollout
    id: "000001"
    fleet: gb300-west
    fleetFile: fleet.yaml
    deployment: dynamo/dsv41-flash@gb300-nvl72
    revision: 2
    stackDigest: sha256:...
    state: running            # running | paused | succeeded | stopped | aborted
    reason: ""                # why it stopped or paused, one line
    racks:
      - {name: rack-a, wave: 0, step: done, previousRevision: 1, previousDigest: sha256:..., applies: 1, ...}
"""

from __future__ import annotations

import datetime
import os
import re
import time
from contextlib import AbstractContextManager
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import Field

from stackpin.errors import StackpinError, clip
from stackpin.models import CamelModel, load_model
from stackpin.yamlio import create_exclusive, dump_yaml, load_yaml, lock_directory, read_regular, write_atomic

ACTIVE = "ACTIVE"
RUNNER = "RUNNER"
ID_PATTERN = r"^[0-9]{6}$"  # a record's id names its file: digits only, so every path stays under rollouts/
FLEET_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # the fleet file's metadata.name (a directory name)
ACTIVE_LIMIT = 64  # bytes of the ACTIVE file: an id and a line break


class State(StrEnum):
    running = "running"
    paused = "paused"  # waits for `rollout resume` or `rollout abort`; the fleet stays locked
    succeeded = "succeeded"
    stopped = "stopped"  # a gate failed and the rack was rolled back
    aborted = "aborted"

    @property
    def ended(self) -> bool:
        return self in (State.succeeded, State.stopped, State.aborted)


class Step(StrEnum):
    """A rack's progress, in order up to `done`; `failed` and `rolled-back` end it otherwise."""

    pending = "pending"
    applying = "applying"  # the apply started: it may have written part of the stack (it converges)
    applied = "applied"
    ready = "ready"
    soaked = "soaked"
    gated = "gated"
    done = "done"
    failed = "failed"
    rolled_back = "rolled-back"

    @property
    def rank(self) -> int:
        return list(Step).index(self)


class GateRecord(CamelModel):
    """The canary's bench gate: the result files before, after, and after a rollback."""

    verdict: Literal["pass", "fail", "inconclusive"] | None = None  # None: not judged yet
    summary: str = ""
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    after_rollback: tuple[str, ...] = ()


class RackRecord(CamelModel):
    name: str
    wave: int
    step: Step = Step.pending
    previous_revision: int | None = None  # what the rack's in-cluster record said was live before
    previous_digest: str | None = None
    applies: int = 0  # how many applies this rollout wrote to the rack (a resume must not add one)
    gate: GateRecord | None = None
    started_at: str | None = None
    updated_at: str | None = None
    messages: tuple[str, ...] = ()


class Rollout(CamelModel):
    api_version: Literal["stackpin.dev/v1alpha1"] = "stackpin.dev/v1alpha1"
    kind: Literal["Rollout"] = "Rollout"
    id: str = Field(pattern=ID_PATTERN)
    fleet: str = Field(pattern=FLEET_PATTERN)
    fleet_file: str
    deployment: str  # the history's key, NAMESPACE/NAME@PLATFORM
    revision: int
    stack_digest: str
    allow_recreate: bool = False  # apply may delete and recreate a DynamoGraphDeployment (its rack goes down)
    allow_stand_ins: bool = False  # the revision's stand-in pins (a demo mirror's) may reach the racks
    state: State = State.running
    reason: str = ""
    runner: str = ""  # HOST:PID of the process that last drove it (shown; liveness is the RUNNER lock's)
    started_at: str
    updated_at: str
    racks: tuple[RackRecord, ...]

    def rack(self, name: str) -> RackRecord:
        found = next((r for r in self.racks if r.name == name), None)
        if found is None:  # the engine checks the fleet against the record first (engine.check_plan)
            raise StackpinError(f"rollout {self.id} has no rack {name}: its racks are "
                                f"{', '.join(r.name for r in self.racks)}")
        return found

    def with_rack(self, name: str, **changes: object) -> Rollout:
        """This record with rack `name` changed (and its updatedAt stamped)."""
        racks = tuple(r.model_copy(update={**changes, "updated_at": now()}) if r.name == name else r
                      for r in self.racks)
        return self.model_copy(update={"racks": racks, "updated_at": now()})

    def with_state(self, state: State, reason: str = "") -> Rollout:
        return self.model_copy(update={"state": state, "reason": reason, "updated_at": now()})

    def as_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def this_runner() -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


class Refused(StackpinError):
    """Another rollout holds the fleet, or a live runner drives it (exit 1)."""

    exit_code = 1


class Claim:
    """The runner's claim on a fleet: an exclusive flock on `<fleet>/RUNNER`, held until `release()` or the
    process ends (the kernel drops it on any death, kill -9 included). The file's text names the holder,
    for the person refused; the lock, not the text, is the claim."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def describe(self, what: str) -> None:
        """Say in the file who holds the claim for what (read by the person refused)."""
        text = f"{this_runner()} {what}\n".encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text, 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = -1

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


class RolloutStore:
    """The records of one fleet's rollouts under `root/<fleet>/`."""

    def __init__(self, root: Path, fleet: str) -> None:
        if not re.match(FLEET_PATTERN, fleet):  # it names a directory under root: never `..` or a path
            raise StackpinError(f"fleet {fleet!r}: not a fleet name (a fleet file's metadata.name, "
                                "lowercase letters, digits and '-')")
        self.root, self.fleet = root, fleet
        self.directory = root / fleet

    def path(self, rollout_id: str) -> Path:
        if not re.match(ID_PATTERN, rollout_id):  # never a path outside the fleet's directory
            raise StackpinError(f"rollout id {rollout_id!r}: not a rollout id (six digits)")
        return self.directory / f"{rollout_id}.yaml"

    def ids(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.yaml") if re.match(ID_PATTERN, p.stem))

    def read(self, rollout_id: str) -> Rollout:
        path = self.path(rollout_id)
        data, positions = load_yaml(path)
        record = load_model(data, Rollout, positions.locate)  # every problem at its file:line:col
        if (record.id, record.fleet) != (rollout_id, self.fleet):  # its id and fleet name the file it is written to
            raise StackpinError(f"{path}: its id {record.id} and fleet {record.fleet} are not the file's "
                                f"({rollout_id}, {self.fleet})")
        return record

    def write(self, record: Rollout) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path(record.id), dump_yaml(record.as_dict(), sort_keys=False))

    def writing(self) -> AbstractContextManager[None]:
        """Hold the fleet directory's lock for a read-then-write of a record: the runner's step and a
        person's `rollout pause|abort` never overwrite each other's write (held for milliseconds)."""
        return lock_directory(self.directory)

    def active_id(self) -> str | None:
        """The id in the fleet's ACTIVE file (None: no active rollout); anything but an id is refused, naming
        the file."""
        lock = self.directory / ACTIVE
        try:
            raw = read_regular(lock, ACTIVE_LIMIT, follow=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StackpinError(f"{lock}: {exc.strerror or exc}") from None
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise StackpinError(f"{lock}: not UTF-8 text: it should hold a rollout id (six digits)") from None
        if not text:
            return None
        if not re.match(ID_PATTERN, text):
            raise StackpinError(f"{lock}: {text[:20]!r} is not a rollout id (six digits): remove the file if no "
                                "rollout of this fleet is active")
        return text

    # --- the runner's claim -------------------------------------------------------------------------------

    def claim(self, what: str) -> Claim:
        """Take the runner's claim, or Refused when a live process holds it (waits half a second at most)."""
        import fcntl

        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / RUNNER
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            for attempt in range(6):  # a `rollout status` probing the lock holds it for microseconds
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 5:
                        raise
                    time.sleep(0.1)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise Refused(f"fleet {self.fleet}: its runner ({clip(holder)}) still runs: one runner per fleet "
                          f"({path}); wait for it to stop (rollout pause stops it after its current step)") from None
        except BaseException:
            os.close(fd)
            raise
        claim = Claim(fd, path)
        claim.describe(what)
        return claim

    def runner_alive(self) -> bool:
        """Whether a process holds the runner's claim now (tried, never waited on)."""
        import fcntl

        path = self.directory / RUNNER
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: two probes never see each other
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def latest(self) -> Rollout | None:
        """The active rollout, else the newest one."""
        rollout_id = self.active_id() or (self.ids()[-1] if self.ids() else None)
        return self.read(rollout_id) if rollout_id else None

    def acquire(self) -> str:
        """Take the fleet's lock under a new rollout id; Refused names the rollout that holds it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        ids = self.ids()
        new_id = f"{int(ids[-1]) + 1 if ids else 1:06d}"
        try:
            create_exclusive(self.directory / ACTIVE, new_id + "\n")
        except FileExistsError:
            held = self.active_id() or "?"
            where = self.path(held) if held != "?" else self.directory / ACTIVE
            state = self.read(held).state if where.is_file() and held != "?" else "starting"
            raise Refused(f"fleet {self.fleet} already has rollout {held} ({state}, {where}): "
                          f"resume or abort it first (stackpin rollout resume|abort)") from None
        return new_id

    def release(self, rollout_id: str) -> None:
        """Drop the fleet's lock if `rollout_id` holds it."""
        if self.active_id() == rollout_id:
            (self.directory / ACTIVE).unlink(missing_ok=True)
