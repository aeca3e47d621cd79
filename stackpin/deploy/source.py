"""Where the stack that apply sends comes from: a lockfile (or a profile with a current lock) today,
`DEPLOYMENT@REV` from the revision history once that exists. Either way apply gets a `StackSource`:
the lock, and the revision when one names it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock


@dataclass(frozen=True)
class StackSource:
    lock: StackLock
    origin: str  # what the user named: a lockfile path, later DEPLOYMENT@REV
    revision: int | None = None  # known when the lock comes from the revision history


def resolve_source(arg: str, lockdir: Path) -> StackSource:
    """A lockfile, a profile (its lock in `lockdir`, which must be current), or a directory holding
    exactly one of either."""
    from stackpin.render.output import load_inputs

    path = Path(arg)
    if not path.exists() and "@" in arg:
        deployment, _, rev = arg.rpartition("@")
        raise StackpinError(f"{arg}: applying revision {rev} of {deployment} needs the revision history, which "
                            "this stackpin does not have yet", "apply its lockfile")
    locks, _ = load_inputs([arg], lockdir)
    if len(locks) != 1:
        raise StackpinError(f"{arg}: holds {len(locks)} stacks; apply one lockfile at a time")
    return StackSource(locks[0], origin=arg)
