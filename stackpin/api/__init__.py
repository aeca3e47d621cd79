"""The Python API's entry points (docs/api.md): each does the work of one CLI command, takes `str` or `Path`
where a command takes a path, returns typed results and prints nothing. `from stackpin import ...` reaches
them lazily (stackpin/__init__.py), so each imports what it needs only when called."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stackpin.diff.inputs import Stack
    from stackpin.diff.model import StackDiff
    from stackpin.history.listing import HistoryEntry
    from stackpin.history.model import DeploymentKey
    from stackpin.history.record import Recorded
    from stackpin.history.store import HistoryStore
    from stackpin.lock.lockfile import StackLock
    from stackpin.lock.run import Locked
    from stackpin.render.output import RenderedStack
    from stackpin.validate.check import CheckResult

StrPath = str | PathLike[str]


def _paths(paths: StrPath | Iterable[StrPath]) -> list[str]:
    """One path or several (a `str` is one path, not its characters)."""
    if isinstance(paths, str | PathLike):
        return [str(paths)]
    return [str(p) for p in paths]


def validate_profiles(paths: StrPath | Iterable[StrPath], *, upgrade_to: str | None = None) -> CheckResult:
    """`stackpin validate`: every profile (a directory stands for the profiles in it), its findings and
    summary. Unreadable input in one file is in `input_errors` and does not hide the others' findings.
    `upgrade_to` (`ENGINE==X`, such as `vllm==0.33.0` or `sglang==0.5.22`, or a bare vLLM version): report what
    moving each profile to that release of its engine breaks or changes instead."""
    from stackpin.backends import DEFAULT
    from stackpin.errors import StackpinError
    from stackpin.validate.check import check_profiles, expand_profile_args
    from stackpin.validate.upgrade import parse_target

    target = None
    if upgrade_to is not None:
        try:
            target = parse_target(upgrade_to if "==" in upgrade_to else f"{DEFAULT}=={upgrade_to}")
        except ValueError:
            raise StackpinError(f"upgrade_to={upgrade_to!r} is not ENGINE==X (vllm==0.33.0) or a vLLM version such "
                                "as 0.33.0") from None
    return check_profiles(expand_profile_args(_paths(paths)), upgrade_to=target)


def lock_profiles(paths: StrPath | Iterable[StrPath], lockdir: StrPath = "lockfiles", *, offline: bool = False,
                  mirrors: Mapping[str, str] | None = None, oci_layout: StrPath | None = None,
                  hf_cache: StrPath | None = None, hf_endpoint: str | None = None,
                  docker_config: StrPath | None = None, timeout: float | None = 300.0,
                  on_note: Callable[[str], None] | None = None) -> list[Locked]:
    """`stackpin lock`: pin every floating reference and write `<lockdir>/<name>.lock.yaml` for each
    profile, all or none. `offline`: only pins the lockfiles already hold, nothing asked of a network."""
    from stackpin.lock.run import run_lock
    from stackpin.validate.check import expand_profile_args

    def text(path: StrPath | None) -> str | None:
        return None if path is None else str(path)

    return run_lock(expand_profile_args(_paths(paths)), Path(lockdir), offline=offline, mirrors=mirrors,
                    oci_layout=text(oci_layout), hf_cache=text(hf_cache), hf_endpoint=hf_endpoint,
                    docker_config=text(docker_config), timeout=timeout, on_note=on_note)


def read_lock(path: StrPath) -> StackLock:
    """One lockfile, validated (its digests checked)."""
    from stackpin.lock.lockfile import read_lock as read

    return read(Path(path))


def load_locks(inputs: StrPath | Iterable[StrPath] = (), lockdir: StrPath = "lockfiles", *,
               on_stale: Callable[[str], None] | None = None) -> list[StackLock]:
    """The locks `stackpin render` takes: lockfiles as they are, a profile's (or a directory's profiles')
    current lock in `lockdir` (a missing or stale one is an error), or with no inputs every lock in
    `lockdir`. `on_stale` hears of a lockfile whose profile changed since it was locked."""
    from stackpin.render.output import load_inputs

    return load_inputs(_paths(inputs), Path(lockdir), warn=on_stale)[0]


def render_locks(locks: StackLock | Iterable[StackLock], output_dir: StrPath | None = None) -> list[RenderedStack]:
    """`stackpin render`: each stack's manifests, validated against the bundled schemas, in memory; with
    `output_dir`, also written to `<output_dir>/<name>/` (all files or none). Never touches the network."""
    from stackpin.lock.lockfile import StackLock
    from stackpin.render.output import render_stacks, write_stacks

    stacks = render_stacks([locks] if isinstance(locks, StackLock) else list(locks))
    if output_dir is not None:
        write_stacks(stacks, Path(output_dir))
    return stacks


def diff_stacks(a: StrPath | StackLock, b: StrPath | StackLock, *, manifests: bool = False,
                lockdir: StrPath = "lockfiles", history: StrPath | HistoryStore = "history") -> StackDiff:
    """`stackpin diff A B`: changes grouped by what they are, the rollout they need, what they invalidate.
    Each side is a lock in hand, or what the command takes: a profile, a lockfile, a stack name (its
    lockfile in `lockdir`), `DEPLOYMENT@REV` (a revision in `history`) or `git:REF:PATH`. `manifests`:
    also render both and diff each object."""
    from stackpin.diff.inputs import load_stack, stack_of_lock
    from stackpin.diff.run import diff_loaded
    from stackpin.history.store import HistoryStore
    from stackpin.lock.lockfile import StackLock

    store = history if isinstance(history, HistoryStore) else open_history(history)
    revision_lock = store.lock_reader()  # two revisions of one deployment: its chain verified once

    def side(value: StrPath | StackLock) -> Stack:
        if isinstance(value, StackLock):
            return stack_of_lock(value)
        return load_stack(str(value), lockdir=Path(lockdir), revision_lock=revision_lock)

    return diff_loaded(side(a), side(b), manifests=manifests, lockdir=Path(lockdir))


def open_history(root: StrPath = "history", *, signing_key: StrPath | None = None,
                 allowed_signers: StrPath | None = None) -> HistoryStore:
    """The history store under `root` (`stackpin promote/history/rollback --history`). `signing_key` signs
    each revision recorded, `allowed_signers` makes every read require valid signatures (defaults:
    $STACKPIN_SIGNING_KEY, $STACKPIN_ALLOWED_SIGNERS)."""
    from stackpin.history.store import HistoryStore

    return HistoryStore(Path(root), signing_key=None if signing_key is None else Path(signing_key),
                        allowed_signers=None if allowed_signers is None else Path(allowed_signers))


def _key(store: HistoryStore, deployment: str | DeploymentKey) -> DeploymentKey:
    return store.resolve(deployment) if isinstance(deployment, str) else deployment


def list_revisions(store: HistoryStore, deployment: str | DeploymentKey) -> list[HistoryEntry]:
    """`stackpin history DEPLOYMENT`: every revision, oldest first, the whole chain verified, each with
    the one-line summary of what changed from the revision before."""
    from stackpin.diff.run import summarize_locks
    from stackpin.history.listing import list_history

    return list_history(store, _key(store, deployment), summarize=summarize_locks)


def promote(lock: StackLock, message: str, store: HistoryStore, deployments: StrPath = "deployments", *,
            allow_same: bool = False) -> Recorded:
    """`stackpin promote`: record `lock` as the next revision of its deployment and render the
    deployment's directory under `deployments`. The stack the newest revision already has is refused
    unless `allow_same`."""
    from stackpin.history.record import promote as record

    return record(lock, message, store, Path(deployments), allow_same=allow_same)


def rollback(store: HistoryStore, deployment: str | DeploymentKey, deployments: StrPath = "deployments", *,
             to: int | None = None, message: str | None = None) -> Recorded:
    """`stackpin rollback`: record a new revision whose stack is revision `to`'s (default: the one before
    the newest) and render it. History is never rewritten."""
    from stackpin.history.record import rollback as record

    return record(store, _key(store, deployment), Path(deployments), to=to, message=message)
