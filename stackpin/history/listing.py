"""Library twin of `stackpin history`: a deployment's revisions with what changed at each, the
deployments a store holds, and whether each deployment directory holds its newest revision."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from stackpin.history.deployed import DeploymentCheck, check_deployment
from stackpin.history.model import DeploymentKey, Revision
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import StackLock

# (previous revision's lock, this revision's lock) -> one line saying what changed (stackpin.diff's
# StackDiff.one_line, wired by the caller: history sits before diff in the pipeline).
Summarize = Callable[[StackLock, StackLock], str]


@dataclass(frozen=True)
class HistoryEntry:
    revision: Revision
    change: str | None  # None: the first revision, or no summarize given


def list_history(store: HistoryStore, key: DeploymentKey, summarize: Summarize | None = None) -> list[HistoryEntry]:
    """Every revision of `key`, oldest first, verified (see HistoryStore.revisions)."""
    revisions = store.revisions(key)
    entries = []
    for previous, revision in zip([None, *revisions], revisions, strict=False):
        change = summarize(previous.lock, revision.lock) if summarize and previous else None
        entries.append(HistoryEntry(revision, change))
    return entries


@dataclass(frozen=True)
class DeploymentSummary:
    key: DeploymentKey
    directory: Path
    newest: Revision


def list_deployments(store: HistoryStore) -> list[DeploymentSummary]:
    """Every deployment with a history, with its newest revision (verified)."""
    out = []
    for key in store.keys():
        newest = store.newest(key)
        if newest is not None:
            out.append(DeploymentSummary(key, store.directory(key), newest))
    return out


def check_deployments(store: HistoryStore, deployments: Path, keys: Sequence[DeploymentKey]) -> list[DeploymentCheck]:
    """Verify each deployment's whole history, then compare its directory under `deployments` with a
    fresh render of its newest revision."""
    checks = []
    for key in keys:
        revisions = store.revisions(key)
        if revisions:
            checks.append(check_deployment(deployments, revisions[-1]))
    return checks
