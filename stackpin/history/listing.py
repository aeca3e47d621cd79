"""Library twin of `stackpin history`: a deployment's revisions with what changed at each, the
deployments a store holds, and whether each deployment directory holds its newest revision."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stackpin.history.deployed import DeploymentCheck, check_deployment
from stackpin.history.model import DeploymentKey, Revision, RevisionSummary
from stackpin.history.store import Chain, HistoryStore
from stackpin.lock.lockfile import StackLock

# (previous revision's lock, this revision's lock) -> one line saying what changed (stackpin.diff's
# StackDiff.one_line, wired by the caller: history sits before diff in the pipeline).
Summarize = Callable[[StackLock, StackLock], str]


@dataclass(frozen=True)
class HistoryEntry:
    summary: RevisionSummary
    change: str | None  # None: the first revision, or no summarize given
    chain: Chain = field(repr=False, compare=False)

    @property
    def revision(self) -> Revision:
        """The whole revision, lock included (parsed on first use: a listing needs only the summary)."""
        return self.chain.get(self.summary.revision)


def list_history(store: HistoryStore, key: DeploymentKey, summarize: Summarize | None = None,
                 summarize_name: str | None = None) -> list[HistoryEntry]:
    """Every revision of `key`, oldest first, the whole chain verified (see HistoryStore.chain). What each
    row shows comes from the verified cache where the same bytes were listed before (verified.py); a
    revision is parsed only when it was not. `summarize_name` names what `summarize` computes (its CHANGE
    lines are then cached under that name); without it they are computed on every listing."""
    chain = store.chain(key)
    cache = chain.cache
    entries: list[HistoryEntry] = []
    for index, link in enumerate(chain.links):
        number = index + 1
        data = cache.summary(link.content)
        summary = RevisionSummary.from_data(data) if data is not None and data["revision"] == number else None
        if summary is None:
            summary = chain.get(number).summary()
            cache.put_summary(link.content, summary.data())
        change = None
        if summarize is not None and index:
            before = chain.links[index - 1].content
            change = cache.change(summarize_name, before, link.content) if summarize_name else None
            if change is None:
                change = summarize(chain.get(number - 1).lock, chain.get(number).lock)
                if summarize_name:
                    cache.put_change(summarize_name, before, link.content, change)
        entries.append(HistoryEntry(summary, change, chain))
    cache.save({link.content for link in chain.links})
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
