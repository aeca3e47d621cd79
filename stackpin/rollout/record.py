"""The rollout record: one YAML file per rollout, `<root>/<fleet>/<id>.yaml`, rewritten atomically after
every step so that a rollout killed at any point resumes from it; and the fleet's lock, `<root>/<fleet>/
ACTIVE` (created exclusively, holding the active rollout's id), so one rollout runs per fleet at a time.

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
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from stackpin.errors import StackpinError
from stackpin.yamlio import create_exclusive, dump_yaml, load_yaml, write_atomic

ACTIVE = "ACTIVE"


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


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class GateRecord(_Model):
    """The canary's bench gate: the result files before, after, and after a rollback."""

    verdict: Literal["pass", "fail", "inconclusive"] | None = None  # None: not judged yet
    summary: str = ""
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    after_rollback: tuple[str, ...] = ()


class RackRecord(_Model):
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


class Rollout(_Model):
    api_version: Literal["stackpin.dev/v1alpha1"] = "stackpin.dev/v1alpha1"
    kind: Literal["Rollout"] = "Rollout"
    id: str
    fleet: str
    fleet_file: str
    deployment: str  # the history's key, NAMESPACE/NAME@PLATFORM
    revision: int
    stack_digest: str
    allow_recreate: bool = False  # apply may delete and recreate a DynamoGraphDeployment (its rack goes down)
    allow_stand_ins: bool = False  # the revision's stand-in pins (a demo mirror's) may reach the racks
    state: State = State.running
    reason: str = ""
    runner: str = ""  # HOST:PID of the process running it (resume refuses while that process lives)
    started_at: str
    updated_at: str
    racks: tuple[RackRecord, ...]

    def rack(self, name: str) -> RackRecord:
        return next(r for r in self.racks if r.name == name)

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
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def runner_alive(record: Rollout) -> bool:
    """Whether the process that ran `record` still runs (known only on the same host)."""
    import os
    import socket

    host, _, pid = record.runner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Refused(StackpinError):
    """Another rollout holds the fleet (exit 1)."""

    exit_code = 1


class RolloutStore:
    """The records of one fleet's rollouts under `root/<fleet>/`."""

    def __init__(self, root: Path, fleet: str) -> None:
        self.root, self.fleet = root, fleet
        self.directory = root / fleet

    def path(self, rollout_id: str) -> Path:
        return self.directory / f"{rollout_id}.yaml"

    def ids(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.yaml") if p.stem.isdigit())

    def read(self, rollout_id: str) -> Rollout:
        path = self.path(rollout_id)
        data, _ = load_yaml(path)
        try:
            return Rollout.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise StackpinError(f"{path}: not a rollout record ({where}: {first['msg']})") from None

    def write(self, record: Rollout) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path(record.id), dump_yaml(record.as_dict(), sort_keys=False))

    def active_id(self) -> str | None:
        lock = self.directory / ACTIVE
        return lock.read_text(encoding="utf-8").strip() or None if lock.is_file() else None

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
            state = self.read(held).state if self.path(held).is_file() else "starting"
            raise Refused(f"fleet {self.fleet} already has rollout {held} ({state}, {self.path(held)}): "
                          f"resume or abort it first (stackpin rollout resume|abort)") from None
        return new_id

    def release(self, rollout_id: str) -> None:
        """Drop the fleet's lock if `rollout_id` holds it."""
        if self.active_id() == rollout_id:
            (self.directory / ACTIVE).unlink(missing_ok=True)
