"""Library twins of `stackpin promote`, `stackpin rollback` and `stackpin history --render`.

Each new revision is recorded under the deployment's lock in three steps: the next number's file is
created exclusively (the revision is committed once it has its name), then the deployment directory
is switched to that revision's manifests. A write that fails takes the new revision back out, so
nothing changes; a process killed between the two leaves the revision recorded and the directory one
revision behind, which `stackpin history --check` reports and the next promote, rollback or
`stackpin history --render` brings up to date.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stackpin.errors import StackpinError, clip
from stackpin.history.deployed import deployment_dir, deployment_files, write_deployment
from stackpin.history.identity import author_of, created_at
from stackpin.history.model import (
    MESSAGE_CONTROL,
    Action,
    ActionKind,
    DeploymentKey,
    Revision,
    new_revision,
    revision_text,
)
from stackpin.history.signing import signature_path
from stackpin.history.store import HEAD_FILE, Chain, HistoryStore
from stackpin.lock.lockfile import StackLock
from stackpin.render.output import RenderedStack, render_stack
from stackpin.yamlio import create_exclusive, write_atomic

MAX_MESSAGE = 4000
# Given the verified chain, what to record next (decided holding the lock).
_Choose = Callable[[Chain], tuple[StackLock, Action, str, RenderedStack]]
# A caller's step bound to recording a revision, run holding the lock (see `rollback`).
Hook = Callable[[Revision], None]


@dataclass(frozen=True)
class Recorded:
    """A revision just recorded, and the deployment directory rendered from it."""

    revision: Revision
    path: Path
    directory: Path
    files: tuple[str, ...]


def checked_message(message: str) -> str:
    text = message.strip()
    if not text:
        raise StackpinError("the message is empty: say why this revision exists (-m MESSAGE)")
    if len(text) > MAX_MESSAGE:
        raise StackpinError(f"the message is {len(text):,} characters; a revision's message holds at most "
                            f"{MAX_MESSAGE:,}")
    if MESSAGE_CONTROL.search(text):
        raise StackpinError(f"the message {clip(text)!r} holds a control character; write text, line breaks "
                            "and tabs only")
    return text


def promote(lock: StackLock, message: str, store: HistoryStore, deployments: Path, *,
            env: Mapping[str, str] | None = None, allow_same: bool = False,
            check: Hook | None = None, then: Hook | None = None) -> Recorded:
    """Record `lock` as the next revision of its deployment and render the deployment directory. The
    stack the newest revision already has is refused (a revision that changes nothing would read as a
    change in history, diff and rollback) unless `allow_same`. `check` and `then` as `rollback`'s
    (`stackpin upgrade promote` checks the newest revision is still the one it benched, then attaches
    the trial's results)."""
    text = checked_message(message)
    rendered = render_stack(lock)  # a stack that does not render is refused before anything is written
    key = DeploymentKey.of_lock(lock)

    def choose(chain: Chain) -> tuple[StackLock, Action, str, RenderedStack]:
        newest = chain.newest
        if newest is not None and newest.stack_digest == lock.stack_digest and not allow_same:
            raise StackpinError(f"deployment {key}: its newest revision, {newest.revision}, already has stack "
                                f"{lock.metadata.name} ({lock.stack_digest[:19]}); nothing to promote",
                                "pass --allow-same to record it again")
        return lock, Action(kind=ActionKind.promote), text, rendered

    return _record(store, key, deployments, choose, env, check, then)


def rollback(store: HistoryStore, key: DeploymentKey, deployments: Path, *, to: int | None = None,
             message: str | None = None, env: Mapping[str, str] | None = None,
             check: Hook | None = None, then: Hook | None = None) -> Recorded:
    """A new revision whose stack is revision `to`'s (default: the one before the newest). History is
    never rewritten: rolling back is a revision like any other, and can itself be rolled back.

    `check(revision)` runs holding the lock once the new revision is known, before anything is written:
    raising writes nothing. `then(revision)` runs holding the lock after the revision and the deployment
    directory are written: raising takes both back (the file removed, the directory rendered from the
    revision before) and re-raises, so the revision exists only if `then` completed (`stackpin rollback
    --apply` applies the revision to a cluster there)."""
    text = checked_message(message) if message is not None else None

    def choose(chain: Chain) -> tuple[StackLock, Action, str, RenderedStack]:
        target = rollback_target(key, chain.newest, to)
        source = chain.get(target)  # a number out of range is a one-line error
        return (source.lock, Action(kind=ActionKind.rollback, revision=target),
                text or f"Roll back to revision {target}", render_stack(source.lock))

    return _record(store, key, deployments, choose, env, check, then)


def checked_time(key: DeploymentKey, created: str, newest: Revision | None) -> None:
    """A new revision is never created before the newest: reading refuses a history whose times go back, so a key
    whose allowed-signers entry has expired cannot sign a new revision by back-dating it."""
    if newest is not None and created < newest.created:  # one fixed format: text order is time order
        raise StackpinError(f"deployment {key}: the new revision's time {created} is before revision "
                            f"{newest.revision}'s ({newest.created}); a history's times never go back, nothing "
                            "written", "check the clock, or unset SOURCE_DATE_EPOCH or set it later")


def rollback_target(key: DeploymentKey, newest: Revision | None, to: int | None) -> int:
    """The revision a rollback restores (default: the one before the newest); one-line errors."""
    if newest is None:
        raise StackpinError(f"deployment {key} has no revisions")
    if to is None and newest.revision == 1:
        raise StackpinError(f"deployment {key} has one revision; there is none before it to roll back to")
    target = to if to is not None else newest.revision - 1
    if target == newest.revision:
        raise StackpinError(f"revision {target} is the newest revision of {key} already; nothing to roll back")
    return target


def planned_rollback(store: HistoryStore, key: DeploymentKey, *, to: int | None = None, message: str | None = None,
                     env: Mapping[str, str] | None = None) -> Revision:
    """The revision `rollback` would record now, without writing (a dry run's revision number)."""
    text = checked_message(message) if message is not None else None
    environ = os.environ if env is None else env
    chain = store.chain(key)  # read and verified once
    newest = chain.newest
    target = rollback_target(key, newest, to)
    assert newest is not None
    created = created_at(environ)
    checked_time(key, created, newest)
    return new_revision(key, newest.revision + 1, chain.get(target).lock, created=created,
                        author=author_of(store.root, environ), message=text or f"Roll back to revision {target}",
                        action=Action(kind=ActionKind.rollback, revision=target), previous=newest)


def rerender(store: HistoryStore, key: DeploymentKey, deployments: Path) -> Recorded:
    """Bring the deployment directory up to date with the newest revision (no new revision): after a
    process was killed between the two writes, or after an upgrade of stackpin renders differently."""
    with store.writing(key):
        newest = store.newest(key)
        if newest is None:
            raise StackpinError(f"deployment {key} has no revisions")
        stack = deployment_files(newest)
        write_deployment(deployments, stack, key)
    return Recorded(newest, store.path(key, newest.revision), deployment_dir(deployments, key), tuple(stack.files))


def _record(store: HistoryStore, key: DeploymentKey, deployments: Path, choose: _Choose,
            env: Mapping[str, str] | None, check: Hook | None = None, then: Hook | None = None) -> Recorded:
    environ = os.environ if env is None else env
    author, created = author_of(store.root, environ), created_at(environ)
    with store.writing(key):
        # The whole chain, verified: a revision recorded on top of an edited, missing or replaced one would
        # vouch for it. Nothing is written on a broken chain. Read once, for the choice and the link.
        chain = store.chain(key)
        newest = chain.newest
        lock, action, message, rendered = choose(chain)
        checked_time(key, created, newest)
        number = newest.revision + 1 if newest is not None else 1
        revision = new_revision(key, number, lock, created=created, author=author, message=message,
                                action=action, previous=newest)
        text = revision_text(revision)
        signature = store.signed(revision, text)  # refused (no key, a key not allowed) before any write
        if check is not None:
            check(revision)
        stack = deployment_files(revision, rendered)
        path = store.path(key, number)
        sig = signature_path(path)
        # The signature first: a revision never stands unsigned where one is required, even if the process is
        # killed between the two; a signature left by a killed writer is replaced (or removed) here.
        if signature is not None:
            write_atomic(sig, signature)
        else:
            sig.unlink(missing_ok=True)
        try:
            create_exclusive(path, text)
        except FileExistsError:  # only a writer that ignores the lock gets here
            raise StackpinError(f"{path}: revision {number} was created by another writer meanwhile; "
                                "nothing written, try again") from None
        try:
            write_deployment(deployments, stack, key)
        except StackpinError:  # nothing was switched (write_files puts back what was there): take it back
            path.unlink(missing_ok=True)
            sig.unlink(missing_ok=True)
            raise
        store.write_head(key, revision)
        store.remember(chain, revision, text.encode("utf-8"))
        if then is not None:
            try:
                then(revision)
            except BaseException as exc:
                try:
                    _take_back(store, path, deployments, key, newest, stack)
                except (StackpinError, OSError) as undo:
                    why = exc.lines()[0] if isinstance(exc, StackpinError) else type(exc).__name__
                    raise StackpinError(f"{path}: revision {number} was recorded, then what it was recorded for "
                                        f"failed ({why}), and taking it back failed too ({undo})",
                                        f"remove {path} and run stackpin history --render") from exc
                raise
    return Recorded(revision, path, deployment_dir(deployments, key), tuple(stack.files))


def _take_back(store: HistoryStore, path: Path, deployments: Path, key: DeploymentKey,
               previous: Revision | None, written: RenderedStack) -> None:
    """Undo a recorded revision: the head back to `previous`, its file removed, the deployment directory
    back to `previous` (for a first revision, the files it was given removed: a GitOps tool must not
    deploy a revision that no longer exists)."""
    if previous is not None:
        store.write_head(key, previous)
    else:
        (store.directory(key) / HEAD_FILE).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    signature_path(path).unlink(missing_ok=True)
    if previous is not None:
        write_deployment(deployments, deployment_files(previous), key)
        return
    directory = deployment_dir(deployments, key)
    for name in written.files:
        (directory / name).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:  # not empty (files of someone else's): left as it is
        pass
