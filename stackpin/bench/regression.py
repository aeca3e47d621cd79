"""`stackpin rollback --if-regressed`'s decision: does a deployment's newest revision regress against
the one before it, by the bench results attached to both (`stackpin bench attach`)?"""

from __future__ import annotations

from dataclasses import dataclass

from stackpin.bench.compare import Comparison, Verdict, compare
from stackpin.bench.resultfile import read_evidence
from stackpin.history.attachments import attachment_path
from stackpin.history.model import DeploymentKey
from stackpin.history.store import HistoryStore


@dataclass(frozen=True)
class RegressionCheck:
    previous: int | None  # the revision compared against (None when there is none)
    newest: int | None
    comparison: Comparison | None  # None when the two cannot be compared
    reason: str | None  # why there is no comparison

    @property
    def roll_back_to(self) -> int | None:
        """The revision to roll back to: the previous one, when the newest regressed against it (never on an
        inconclusive comparison)."""
        return self.previous if self.comparison is not None and self.comparison.verdict is Verdict.regression \
            else None

    @property
    def inconclusive(self) -> bool:
        return self.comparison is not None and self.comparison.verdict is Verdict.inconclusive


def check_regression(store: HistoryStore, key: DeploymentKey, threshold: float,
                     allow_acceptance_change: bool = False) -> RegressionCheck:
    newest = store.newest(key)
    if newest is None or newest.revision < 2:
        return RegressionCheck(None, None, None, f"{key} has no revision before its newest to compare with")
    previous = newest.revision - 1
    paths = {n: attachment_path(store, key, n, "bench") for n in (previous, newest.revision)}
    missing = [n for n, p in paths.items() if not p.is_file()]
    if missing:
        return RegressionCheck(previous, newest.revision, None,
                               f"revision {' and '.join(map(str, missing))} of {key} has no bench result "
                               "(stackpin bench attach DEPLOYMENT@REV RESULT.json)")
    comparison = compare([read_evidence(paths[previous])], [read_evidence(paths[newest.revision])],
                         threshold=threshold, allow_acceptance_change=allow_acceptance_change)
    return RegressionCheck(previous, newest.revision, comparison, None)
