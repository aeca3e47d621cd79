"""Library twin of `stackpin diff`: two inputs in, a `StackDiff` out (the CLI only prints it)."""

from __future__ import annotations

from pathlib import Path

from stackpin.diff.engine import diff_stacks
from stackpin.diff.inputs import RevisionLock, Stack, load_stack, lock_of, stack_of_lock
from stackpin.diff.model import StackDiff
from stackpin.lock.lockfile import StackLock


def diff_sources(a: str, b: str, *, manifests: bool = False, lockdir: Path = Path("lockfiles"),
                 revision_lock: RevisionLock | None = None, cwd: Path | None = None) -> StackDiff:
    """Compare two inputs (profile, lockfile, NAME, DEPLOYMENT@REV, git:REF:PATH; see inputs.py).
    With `manifests`, also render both (a profile renders from its current lock in `lockdir`)."""
    stack_a = load_stack(a, lockdir=lockdir, revision_lock=revision_lock, cwd=cwd)
    stack_b = load_stack(b, lockdir=lockdir, revision_lock=revision_lock, cwd=cwd)
    return diff_loaded(stack_a, stack_b, manifests=manifests, lockdir=lockdir, cwd=cwd)


def diff_loaded(stack_a: Stack, stack_b: Stack, *, manifests: bool = False, lockdir: Path = Path("lockfiles"),
                cwd: Path | None = None) -> StackDiff:
    """Two sides already in hand (`load_stack`, `stack_of_lock`): the Python API mixes locks and inputs."""
    rendered = None
    if manifests:
        from stackpin.diff.manifests import manifest_diff  # render's builder loads only for --manifests

        rendered = manifest_diff(lock_of(stack_a, lockdir, cwd), lock_of(stack_b, lockdir, cwd))
    return diff_stacks(stack_a, stack_b, manifests=rendered)


def diff_locks(a: StackLock, b: StackLock) -> StackDiff:
    """Two locks in hand (consecutive history revisions, what is live against what is next)."""
    return diff_stacks(stack_of_lock(a), stack_of_lock(b))


# What `summarize_locks` computes, as listings cache its lines (history/verified.py): change the number when
# the grouping or the wording of `one_line` changes, so lines cached by the old code are not shown.
CHANGE_LINE = "stackpin.diff.one_line/1"


def summarize_locks(a: StackLock, b: StackLock) -> str:
    """The one-line summary of B over A (`kernels, placement (recreate)`), for listings."""
    return diff_locks(a, b).one_line()
