"""Where the stack that apply sends comes from: a lockfile (or a profile with a current lock), or a
revision of a deployment's history (`DEPLOYMENT@REV`, or `DEPLOYMENT` for its newest revision).
Either way apply gets a `StackSource`: the lock, and the revision when one names it."""

from __future__ import annotations

from pathlib import Path

import msgspec

from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock


class StackSource(msgspec.Struct, frozen=True):
    lock: StackLock
    origin: str  # what the user named: a lockfile path, later DEPLOYMENT@REV
    revision: int | None = None  # known when the lock comes from the revision history


def resolve_source(arg: str, lockdir: Path, history: Path = Path("history")) -> StackSource:
    """A lockfile, a profile (its lock in `lockdir`, which must be current), a directory holding
    exactly one of either, or a deployment in `history`: `NAME[@PLATFORM][@REV]` (newest by default)."""
    from stackpin.render.output import load_inputs

    if not Path(arg).exists() and not arg.endswith((".yaml", ".yml")):
        return _from_history(arg, history)
    locks, _ = load_inputs([arg], lockdir)
    if len(locks) != 1:
        raise StackpinError(f"{arg}: holds {len(locks)} stacks; apply one lockfile at a time")
    return StackSource(locks[0], origin=arg)


def _from_history(arg: str, history: Path) -> StackSource:
    from stackpin.history.store import HistoryStore

    revision = HistoryStore(history).query(arg)
    return StackSource(revision.lock, origin=f"{revision.deployment}@{revision.revision}", revision=revision.revision)


def refuse_stand_ins(source: StackSource, allowed: bool) -> None:
    """A cluster gets stand-in pins (the demo mirror's: not production digests) only when the user says so
    (`allowed`, --allow-stand-ins; render then marks every object): StackpinError (exit 2) naming each."""
    named = [f"{which} {pinned}" for which, pinned in source.lock.resolved.stand_ins()]
    if named and not allowed:
        raise StackpinError(
            f"{source.origin}: stack {source.lock.metadata.name} holds stand-in pins, not production digests: "
            + "; ".join(named),
            "lock against the site's registry or mirror (docs/lockfiles.md), or pass --allow-stand-ins for a "
            "test cluster")
