"""Measured speculative-decoding acceptance: the record a bench point carries (`Acceptance`, kept with the
other result records in result.py and named here), a run's sum of it, and the rule every comparison of
results takes (acceptance.yaml holds the counters' sources and the threshold).

A point's `Acceptance` is the difference of the endpoint's Prometheus counters across the point
(stackpin/bench/specmetrics.py reads them): drafts (one per request per step that verified drafts), draft
tokens, and per draft position how many drafts had that position and every one before it accepted, as
vLLM counts them. Two figures follow: the conditional acceptance per position (`rates`) and the mean
acceptance length (`mean_length`, 1 + accepted / drafts: tokens a verifying step gives a request).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.bench.result import Acceptance, BenchResult
from stackpin.errors import StackpinError

__all__ = ["Acceptance", "AcceptanceCheck", "AcceptanceDiffers", "acceptance_of", "check_acceptance",
           "comparable_lengths", "default_threshold", "facts"]

FACTS_FILE = Path(__file__).with_name("acceptance.yaml")


@cache
def facts() -> dict[str, Any]:
    from stackpin.yamlio import load_data

    data: dict[str, Any] = load_data(FACTS_FILE.read_text(encoding="utf-8"))
    return data


def default_threshold() -> float:
    """bench compare's limit on the relative difference of mean acceptance length (acceptance.yaml, with why)."""
    return float(facts()["compare"]["mean_length_threshold"])


def acceptance_of(result: BenchResult, agents: Collection[int] | None = None) -> Acceptance | None:
    """A run's measured acceptance: its points' summed (only those at `agents` when given); None where the
    endpoint exposed none, or nothing was drafted."""
    total: Acceptance | None = None
    for point in result.points:
        if point.acceptance is None or (agents is not None and point.agents not in agents):
            continue
        total = point.acceptance if total is None else total.plus(point.acceptance)
    return total if total is not None and total.drafts > 0 else None


class AcceptanceDiffers(StackpinError):
    """Two sides drafted with acceptance too different for their results to be one workload's (exit 2)."""


def _side(results: Sequence[BenchResult], agents: Collection[int] | None) -> Acceptance | None:
    total: Acceptance | None = None
    for result in results:
        found = acceptance_of(result, agents)
        if found is not None:
            total = found if total is None else total.plus(found)
    return total


def _measured_at(results: Sequence[BenchResult]) -> set[int]:
    return {p.agents for r in results for p in r.points if p.acceptance is not None and p.acceptance.drafts}


def comparable_lengths(a: Acceptance, b: Acceptance) -> tuple[float, float, int]:
    """Each side's mean acceptance length where the sides can be held to one workload: from their per-position
    rates over the positions both drafted (1 + the sum over positions j of r_1 x ... x r_j), so that a stack
    drafting more or fewer tokens a step (a retuned num_speculative_tokens, an adaptive k) is not taken for
    text that drafts differently; the raw mean lengths where a side has no per-position counts (SGLang).
    The third figure is the positions compared (0: raw lengths)."""
    n = min(len(a.rates), len(b.rates))
    if not n:
        return a.mean_length, b.mean_length, 0

    def length(rates: tuple[float, ...]) -> float:
        total, reach = 1.0, 1.0
        for rate in rates[:n]:
            reach *= rate
            total += reach
        return total

    return length(a.rates), length(b.rates), n


@dataclass(frozen=True)
class AcceptanceCheck:
    """Each side's measured acceptance (at the agent counts both measured it at) and what to state of it."""

    a: Acceptance | None
    b: Acceptance | None
    notes: tuple[str, ...] = ()


def check_acceptance(a: Sequence[BenchResult], b: Sequence[BenchResult], allow: bool = False,
                     threshold: float | None = None) -> AcceptanceCheck:
    """The rule every comparison of results takes (bench compare, rollback --if-regressed, upgrade trial and
    promote, the rollout's bench gate, all through bench.compare.compare): where both sides measured draft
    acceptance with the same drafting settings (method, draft model, draft and rejection sampling: a stack that
    drafts differently accepts differently, which is what a retune is for), their mean acceptance lengths (at
    the agent counts both measured it at, over the draft positions both drafted: `comparable_lengths`) may
    differ by at most `threshold` relative to A's, or the comparison is refused (AcceptanceDiffers, exit 2)
    unless `allow`. Stated, not refused: acceptance on one side only, sides drafting differently, and a
    difference compared anyway."""
    limit = default_threshold() if threshold is None else threshold
    common = _measured_at(a) & _measured_at(b)
    side_a, side_b = _side(a, common or None), _side(b, common or None)
    if side_a is None or side_b is None:
        if side_a is None and side_b is None:
            return AcceptanceCheck(None, None)
        which, other, found = ("A", "B", side_a) if side_b is None else ("B", "A", side_b)
        assert found is not None
        return AcceptanceCheck(side_a, side_b, (
            f"draft acceptance measured on {which} only (mean length {found.text()}), not on {other}: the "
            "acceptance check is not made",))
    if side_a.drafting and side_b.drafting and side_a.drafting != side_b.drafting:
        # The stacks draft differently: a difference in acceptance is theirs (what a retune changes), not the
        # text's, so it says nothing of whether the workload was the same.
        return AcceptanceCheck(side_a, side_b, (
            f"the sides draft differently (A {side_a.drafting}; B {side_b.drafting}): their acceptance (A "
            f"{side_a.text()}; B {side_b.text()}) is the stacks', so it is not held to one workload's",))
    length_a, length_b, positions = comparable_lengths(side_a, side_b)
    apart = abs(length_b / length_a - 1)
    over = f" over the {positions} draft position{'s' * (positions != 1)} both drafted" if positions else ""
    both = f"A {length_a:.2f}, B {length_b:.2f}{over} (A {side_a.text()}; B {side_b.text()})"
    if apart <= limit:
        return AcceptanceCheck(side_a, side_b)
    if not allow:
        raise AcceptanceDiffers(f"mean acceptance length differs: {both}: {apart:.1%} apart, past {limit:.0%}; the "
                                "drafts' acceptance changes what the same workload means, so the results are not "
                                "comparable (--allow-acceptance-change compares them anyway; in a fleet's bench "
                                "gate, allowAcceptanceChange: true)")
    return AcceptanceCheck(side_a, side_b, (
        f"mean acceptance length {both}: {apart:.1%} apart, past {limit:.0%}; compared anyway "
        "(--allow-acceptance-change)",))
