"""What `stackpin diff` and `stackpin show` accept, turned into a comparable `Stack`.

An input is, in this order of precedence:

- `git:REF:PATH`: a profile or lockfile at a git revision (gitsource.py);
- a file: a lockfile (kind StackLock) or a profile (extends merged);
- `DEPLOYMENT@REV`: a revision in the history, through the injected `revision_lock(deployment, rev)`
  callable (the history store is wired in by the caller and resolves DEPLOYMENT, e.g.
  `dsv41-flash@gb300-nvl72`; without it the input is refused in one line);
- a bare stack name: its lockfile in the lock directory (`lockfiles/NAME.lock.yaml`).

A profile has no pins: it is compared as the effective profile only. A lock carries its pins.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stackpin.diff.gitsource import PREFIX, materialize, parse_git_spec, relabeled
from stackpin.diff.model import SourceKind, StackRef
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock, effective_profile, lock_path, read_lock
from stackpin.profile.k8s_names import DNS_LABEL
from stackpin.profile.loader import load_profile
from stackpin.profile.model import LOCK_KIND, StackProfile
from stackpin.yamlio import MAX_INPUT_BYTES, load_data

RevisionLock = Callable[[str, int], StackLock]
# DEPLOYMENT is whatever the history resolves (`NAME`, `NAME@PLATFORM`, `NAMESPACE/NAME@PLATFORM`):
# everything before the last `@`, which is followed by the revision number.
REVISION = re.compile(r"(?P<deployment>[^@\s]+(?:@[^@\s]+)?)@(?P<rev>[0-9]{1,9})")
STACK_NAME = re.compile(DNS_LABEL)


@dataclass(frozen=True)
class Stack:
    """One side of a diff: the effective profile, the lock when the input was one, and where it came from."""

    ref: StackRef
    profile: StackProfile
    lock: StackLock | None = None
    path: Path | None = None  # a profile file on disk (render looks its lock up for --manifests)
    sources: tuple[str, ...] = ()  # the files merged, the profile first, then each base it extends

    @property
    def document(self) -> dict[str, Any]:
        """The effective profile: extends merged, every default filled in (what a lock embeds)."""
        return effective_profile(self.profile)


def stack_of_lock(lock: StackLock, source: str | None = None) -> Stack:
    """A lock already in hand (a history revision, what is live) as one side of a diff."""
    return _from_lock(source or lock.metadata.name, lock)


def _from_lock(source: str, lock: StackLock) -> Stack:
    ref = StackRef(source=source, kind=SourceKind.lock, name=lock.metadata.name, stack_digest=lock.stack_digest,
                   stand_in=lock.resolved.stand_in)
    return Stack(ref=ref, profile=lock.stack_profile, lock=lock, sources=(source,))


def _kind_of(path: Path) -> str | None:
    """A file's `kind`, read cheaply; None when it cannot tell (the real loader then says why)."""
    try:
        if path.stat().st_size > MAX_INPUT_BYTES:
            return None
        doc = load_data(path.read_bytes())
    except (OSError, yaml.YAMLError):
        return None
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else None


def _from_file(source: str, path: Path, display: Callable[[Path], str] = str) -> Stack:
    if _kind_of(path) == LOCK_KIND:
        return _from_lock(source, read_lock(path))
    loaded = load_profile(path)
    ref = StackRef(source=source, kind=SourceKind.profile, name=loaded.profile.name)
    return Stack(ref=ref, profile=loaded.profile, path=path, sources=tuple(display(p) for p in loaded.sources))


def _from_git(source: str, cwd: Path) -> Stack:
    spec = parse_git_spec(source)
    with tempfile.TemporaryDirectory(prefix="stackpin-git-") as tmp, relabeled(Path(tmp), spec):
        path = materialize(spec, Path(tmp), cwd)

        def display(p: Path) -> str:
            return f"{PREFIX}{spec.ref}:{p.relative_to(tmp).as_posix()}"

        stack = _from_file(source, path, display)
    return Stack(ref=stack.ref, profile=stack.profile, lock=stack.lock, sources=stack.sources)


def load_stack(source: str, *, lockdir: Path = Path("lockfiles"), revision_lock: RevisionLock | None = None,
               cwd: Path | None = None) -> Stack:
    """Resolve one input (see the module docstring). Raises StackpinError (exit 2) with one line.
    Relative paths are read from `cwd` (default: the working directory, and paths print as given)."""
    if source.startswith(PREFIX):
        return _from_git(source, cwd or Path.cwd())
    path = Path(source) if cwd is None else cwd / source
    if path.is_dir():
        raise StackpinError(f"{source}: is a directory; give a profile, a lockfile, DEPLOYMENT@REV or git:REF:PATH")
    if path.is_file():
        return _from_file(source, path)
    if match := REVISION.fullmatch(source):
        deployment, rev = match["deployment"], int(match["rev"])
        if revision_lock is None:
            raise StackpinError(f"{source}: no such file, and no history to read revision {rev} of {deployment} from",
                                "give a lockfile, a profile or git:REF:PATH")
        return _from_lock(source, revision_lock(deployment, rev))
    if STACK_NAME.fullmatch(source):
        candidate = lock_path(lockdir if cwd is None else cwd / lockdir, source)
        if candidate.is_file():
            return _from_lock(source, read_lock(candidate))
        raise StackpinError(f"{source}: no such file, and no lockfile {lock_path(lockdir, source)}")
    raise StackpinError(f"{source}: no such file")


def lock_of(stack: Stack, lockdir: Path, cwd: Path | None = None) -> StackLock:
    """The lock to render for a side: its own, or (a profile on disk) its current lock in `lockdir`."""
    if stack.lock is not None:
        return stack.lock
    if stack.path is None:
        raise StackpinError(f"{stack.ref.source}: --manifests renders locks, and this profile has none here",
                            "diff its lockfile instead (git:REF:lockfiles/NAME.lock.yaml)")
    from stackpin.render.output import lock_for_profile

    return lock_for_profile(stack.path, lockdir if cwd is None else cwd / lockdir)
