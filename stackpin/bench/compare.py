"""Every decision drawn from bench results: `bench compare`, `rollback --if-regressed`, `upgrade trial` and
`promote`, the rollout's canary gate and `plan`'s comparison all take their verdict from `decide` over the
headlines `compare` recomputes here.

Four verdicts (as Argo Rollouts' analysis has Successful, Failed and Inconclusive): improvement,
regression, no significant change, and inconclusive, which is never a pass and never a rollback.

What a headline is compared on:
- Only valid points count (a point the client or host could not keep up with is no measurement), and
  results are read with their request logs, every figure recomputed from them (`read_evidence`).
- A headline at an operating point (single-agent tok/s at 1 agent, TTFT p90 at N agents) is compared only
  where the point is valid in every run on both sides; where it is invalid on one, it is left out of both
  and the headline is inconclusive, saying which point and why.
- A headline at the SLO (max agents under it, tok/s per GPU there) is where each side's curve crosses the
  SLO: known exactly only where the count that held and the first valid count that failed are adjacent.
  Otherwise it is censored: a lower bound (never crossed) or a bracket (crossed past a gap). Bounds decide
  only what they decide: a measured value below the other side's lower bound is a regression; two lower
  bounds are inconclusive. No percentage or interval is given for a censored headline.
- A headline needs MIN_REQUESTS valid requests in the steady window on each side (a percentile one
  MIN_TAIL_REQUESTS), or it is inconclusive.
- Draft acceptance: where both sides measured it (bench run reads the endpoint's spec-decode counters), their
  mean acceptance lengths may differ by at most acceptance.yaml's threshold, or the comparison is refused
  (`allow_acceptance_change` compares them anyway, saying so): the same trace drafting differently is not the
  same workload (stackpin/bench/acceptance.py `check_acceptance`). One side without it is stated, not refused.
- A headline timed from timestamps (single-agent speed, TTFT) is known only to within how late the host
  let them be (`late_bound`: the client's loop lag p99 plus the simulator's lateness per step): a verdict
  stands only where it holds for every value that leaves possible on both sides. Where it does not, yet no
  such value makes B worse past the threshold, the verdict is no significant change (a gain unconfirmed);
  otherwise it is inconclusive.

The interval of a measured headline comes from repeated runs when each side has two or more
(resampling runs), otherwise from the samples inside the runs (requests or agents, resampled): a single
run's interval says how noisy that run was, not how much runs vary. Resampling is seeded: same inputs,
same output.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from stackpin.bench.acceptance import AcceptanceCheck, check_acceptance
from stackpin.bench.result import BenchResult, Point, Request
from stackpin.bench.stats import percentile, slo_edge
from stackpin.bench.window import steady_requests
from stackpin.errors import StackpinError

MUST_MATCH = ("trace_digest", "model", "precision", "slo")
# A headline is judged only on this many valid requests in the steady window (bench/window.py) on each side,
# summed over its runs: under it, a TTFT p90 is the largest of a handful and a bootstrap interval of a few
# requests says nothing about the next few. docs/bench.md#decisions states it.
MIN_REQUESTS = 10
# ... and a percentile headline (TTFT p90) rests on the requests above it: at least MIN_REQUESTS of them, so
# MIN_REQUESTS / (1 - 0.9) = 100 requests a side (the p90 of 19 is set by its two largest).
MIN_TAIL_REQUESTS = 100
# `bench compare --exit-code`, `rollback --if-regressed` and `upgrade trial` exit with this when the evidence
# cannot decide (0: no regression, 1: regression, 2: bad input).
EXIT_INCONCLUSIVE = 3


class Verdict(StrEnum):
    improvement = "improvement"
    regression = "regression"
    no_change = "no significant change"
    inconclusive = "inconclusive"


class ControlsDiffer(StackpinError):
    """Two results measured under different controls: not comparable (exit 2) without --force."""

    def __init__(self, field: str, a: object, b: object, where: str = "A and B") -> None:
        super().__init__(f"controls differ between {where}: {field}: {a} vs {b}; the results are not comparable "
                         "(--force compares them anyway)")
        self.field = field


@dataclass(frozen=True)
class Estimate:
    """One side's headline: measured (`high == low`), or censored: at least `low`, at most `high` (None: no
    upper bound)."""

    low: float
    high: float | None

    @property
    def measured(self) -> bool:
        return self.high == self.low

    @property
    def value(self) -> float | None:
        return self.low if self.measured else None

    def text(self, number: Callable[[float], str]) -> str:
        if self.measured:
            return number(self.low)
        return f">= {number(self.low)}" if self.high is None else f"{number(self.low)}..{number(self.high)}"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool
    a: Estimate | None  # None: no valid evidence on that side
    b: Estimate | None
    change: float | None  # b / a - 1, both measured and a not 0
    low: float | None  # 95% interval of the change
    high: float | None
    basis: str  # "runs", "requests", "agents", "one value each", "bounds" or "-" (not compared)
    verdict: Verdict
    why: str  # what decided it, or what evidence is missing
    evidence: tuple[int, int] = (0, 0)  # valid requests in the steady window, A and B


@dataclass(frozen=True)
class Comparison:
    a: tuple[str, ...]  # stack names
    b: tuple[str, ...]
    runs: tuple[int, int]
    agents: int | None  # the common agent count TTFT is compared at
    threshold: float
    forced: tuple[str, ...]  # control fields that differ, compared anyway
    metrics: tuple[Metric, ...]
    gpus: tuple[int, int] = (0, 0)  # GPUs each side ran on; when they differ agent counts compare per GPU
    left_out: tuple[str, ...] = ()  # invalid points, one line each: "B run 1, 32 agents: <why>"
    acceptance: AcceptanceCheck = AcceptanceCheck(None, None)  # each side's measured draft acceptance, and notes

    @property
    def verdict(self) -> Verdict:
        return decide(self.metrics)

    @property
    def regressed(self) -> bool:
        return self.verdict is Verdict.regression

    def missing(self) -> list[str]:
        """What keeps an inconclusive comparison from a verdict, one line a headline."""
        if not self.metrics:
            return ["no headline has valid evidence on both sides"]
        return [f"{m.name}: {m.why}" for m in self.metrics if m.verdict is Verdict.inconclusive]


def decide(metrics: Sequence[Metric]) -> Verdict:
    """The one verdict every command acts on: a regression of any headline is a regression (measured evidence
    of harm outweighs a gain elsewhere); short of one, a headline the evidence cannot settle, or none at all,
    leaves the whole inconclusive; then an improvement of any; else no significant change."""
    verdicts = {m.verdict for m in metrics}
    if Verdict.regression in verdicts:
        return Verdict.regression
    if not metrics or Verdict.inconclusive in verdicts:
        return Verdict.inconclusive
    return Verdict.improvement if Verdict.improvement in verdicts else Verdict.no_change


# The headline a comparison is summed up by, the first it has: throughput at the SLO is what a stack is
# for; single-agent speed when no SLO was scored.
MAIN_METRICS = ("tok/s per GPU at the SLO", "single-agent tok/s")


def main_metric(comparison: Comparison) -> Metric | None:
    """The headline a comparison is summed up by: the first regression when it regressed, the first headline
    left inconclusive when it is, else the first of MAIN_METRICS it has."""
    if comparison.verdict in (Verdict.regression, Verdict.inconclusive):
        found = next((m for m in comparison.metrics if m.verdict is comparison.verdict), None)
        if found is not None:
            return found
    return next((m for name in MAIN_METRICS for m in comparison.metrics if m.name == name), None)


def control_differences(a: BenchResult, b: BenchResult) -> list[tuple[str, object, object]]:
    out = []
    for name in MUST_MATCH:
        left, right = getattr(a.controls, name), getattr(b.controls, name)
        if left != right:
            out.append((name, left.model_dump() if hasattr(left, "model_dump") else left,
                        right.model_dump() if hasattr(right, "model_dump") else right))
    return out


def no_evidence(result: BenchResult) -> str | None:
    """Why `result` cannot be recomputed (a point with requests and no request log), or None. A decision is
    never taken from figures that cannot be checked against the requests they summarise."""
    bare = [p.agents for p in result.points if p.requests and not p.request_log]
    if not bare:
        return None
    counts = ", ".join(map(str, bare))
    return (f"point(s) at {counts} agent(s) have no request log: their figures cannot be recomputed, and no "
            "decision is taken from a figure alone (bench run writes the log; keep it)")


# --- one side's numbers, recomputed from request logs -------------------------------------------------------

def _valid(result: BenchResult, agents: int) -> Point | None:
    return next((p for p in result.points if p.agents == agents and p.invalid is None), None)


def _finished(point: Point) -> list[Request]:
    return [r for r in point.request_log if not r.error and r.ttft_s is not None and r.end_s is not None
            and r.output_tokens > 0]


def _speed_pairs(point: Point) -> list[float]:
    """(tokens, seconds generating) pairs flattened as [t0, s0, t1, s1, ...]: single-agent speed is their
    ratio of sums, as the point's agent tok/s is."""
    out: list[float] = []
    for r in _finished(point):
        assert r.ttft_s is not None and r.end_s is not None
        out += [r.output_tokens, r.end_s - r.start_s - r.ttft_s]
    return out


def _ratio_of_sums(pairs: Sequence[float]) -> float:
    seconds = sum(pairs[1::2])
    return sum(pairs[0::2]) / seconds if seconds > 0 else 0.0


def late_bound(point: Point) -> float:
    """How late any of the point's timestamps can be, in the stack's time: the client's event-loop lag p99
    plus stackpin's simulator's lateness per step. A figure timed from the timestamps is known only to
    within it: the host's share of a change is a bound on it, not a measurement."""
    return (point.loop_lag_p99_s or 0.0) + (point.server_late_s or 0.0)


def _speed_bracket(point: Point) -> Estimate:
    """Single-agent speed as the host's lateness leaves it known: every request's generating time may be off
    by up to late_bound either way (its first and last token each stamped late)."""
    pairs, late = _speed_pairs(point), late_bound(point)
    tokens, seconds, count = sum(pairs[0::2]), sum(pairs[1::2]), len(pairs) // 2
    fastest = tokens / max(seconds - count * late, 1e-12)
    return Estimate(tokens / (seconds + count * late), fastest if late else tokens / seconds)


def _ttft_bracket(point: Point) -> Estimate:
    """TTFT p90 as the host's lateness leaves it known: a first token stamped late by up to late_bound (a
    late timestamp only ever lengthens a TTFT)."""
    value = _p90(_ttfts(point))
    return Estimate(max(0.0, value - late_bound(point)), value)


def _ttfts(point: Point) -> list[float]:
    return [r.ttft_s for r in point.request_log if not r.error and r.ttft_s is not None]


def _p90(values: Sequence[float]) -> float:
    return percentile(sorted(values), 0.9)


def _agent_output_rates(point: Point, gpus: int) -> list[float]:
    """Per agent: output tokens / point duration / GPUs (they sum to the point's throughput per GPU)."""
    tokens: dict[int, int] = defaultdict(int)
    for r in point.request_log:
        tokens[r.agent] += r.output_tokens
    return [tokens[a] / point.duration_s / gpus for a in sorted(tokens)] if point.duration_s > 0 else []


@dataclass(frozen=True)
class _Run:
    """One run's headline: its estimate, the samples a measured one is computed from, the steady
    requests it rests on, and, for one timed from timestamps, what the host's lateness leaves known of it."""

    estimate: Estimate
    samples: list[float]
    evidence: int
    timed: Estimate | None = None
    late: float = 0.0  # late_bound of its point


@dataclass(frozen=True)
class _Side:
    runs: list[_Run] | None  # None: some run has no valid evidence for it
    why: str  # when runs is None


def _at_point(results: Sequence[BenchResult], side: str, agents: int, value: Callable[[Point], float],
              samples: Callable[[Point], list[float]], timed: Callable[[Point], Estimate]) -> _Side:
    runs = []
    for n, result in enumerate(results, 1):
        point = _valid(result, agents)
        where = f"{side} run {n}" if len(results) > 1 else side
        if point is None:
            had = next((p for p in result.points if p.agents == agents), None)
            why = f"{where} has no valid point at {agents} agent(s)" + (f" ({had.invalid})" if had else "")
            return _Side(None, why)
        drawn = samples(point)
        if not drawn:
            return _Side(None, f"{where} has no finished request at {agents} agent(s)")
        v = value(point)
        runs.append(_Run(Estimate(v, v), drawn, len(steady_requests(point)), timed(point), late_bound(point)))
    return _Side(runs, "")


def _at_slo(results: Sequence[BenchResult], side: str, per_gpu: bool, throughput: bool) -> _Side:
    """Each run's SLO edge on its valid points: max agents (per GPU) under the SLO, or the throughput per GPU
    there; a bracket where the edge is not located exactly (throughput between the two counts' taken as
    rising with agents, as a curve below saturation does)."""
    runs = []
    for n, result in enumerate(results, 1):
        slo = result.controls.slo
        edge = slo_edge(result.points, slo) if slo is not None else None
        where = f"{side} run {n}" if len(results) > 1 else side
        if edge is None:
            return _Side(None, f"{where} has no valid point" if slo is not None else f"{where} has no SLO")
        gpus = result.stack.gpus
        held, failed = edge.held, edge.failed
        if throughput:
            low = held.output_tps_per_gpu if held else 0.0
            high = None if failed is None else low if not edge.bound else max(low, failed.output_tps_per_gpu)
            samples = _agent_output_rates(held, gpus) if held and not edge.bound else []
        else:
            scale = gpus if per_gpu else 1
            low = (held.agents if held else 0) / scale
            high = None if failed is None else (failed.agents - 1) / scale
            samples = []
        basis = held or failed
        assert basis is not None
        runs.append(_Run(Estimate(low, high), samples, len(steady_requests(basis))))
    return _Side(runs, "")


# --- judging one headline -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Spec:
    name: str
    unit: str
    higher_is_better: bool
    side: Callable[[Sequence[BenchResult], str], _Side]
    statistic: Callable[[Sequence[float]], float] | None  # how a measured run's value follows from its samples
    basis: str  # what the samples are
    asked: Callable[[Sequence[BenchResult]], bool]  # whether any run set out to measure it
    minimum: int = MIN_REQUESTS  # valid steady requests a side it needs


def _has_one_agent(results: Sequence[BenchResult]) -> bool:
    return any(p.agents == 1 for r in results for p in r.points)


def _has_slo(results: Sequence[BenchResult]) -> bool:
    return any(r.controls.slo is not None for r in results)


def _specs(agents: int | None, per_gpu: bool) -> list[_Spec]:
    """The headlines: single-agent speed where a run measured one agent, the SLO's where the runs had one,
    TTFT at the agent count compared (a count --agents asks for must be valid everywhere)."""
    specs = [
        _Spec("single-agent tok/s", "tok/s", True,
              lambda rs, s: _at_point(rs, s, 1, lambda p: _ratio_of_sums(_speed_pairs(p)), _speed_pairs,
                                      _speed_bracket),
              _ratio_of_sums, "requests", _has_one_agent),
        _Spec("max agents per GPU under SLO" if per_gpu else "max agents under SLO",
              "agents/GPU" if per_gpu else "agents", True,
              lambda rs, s: _at_slo(rs, s, per_gpu, throughput=False), None, "runs", _has_slo),
        _Spec("tok/s per GPU at the SLO", "tok/s/GPU", True, lambda rs, s: _at_slo(rs, s, per_gpu, throughput=True),
              sum, "agents", _has_slo),
    ]
    if agents is not None and not per_gpu:
        specs.append(_Spec(f"TTFT p90 at {agents} agent{'s' * (agents != 1)}", "s", False,
                           lambda rs, s: _at_point(rs, s, agents, lambda p: _p90(_ttfts(p)), _ttfts, _ttft_bracket),
                           _p90,
                           "requests", lambda _: True, MIN_TAIL_REQUESTS))
    return specs


def _interval(changes: list[float]) -> tuple[float, float]:
    ordered = sorted(changes)
    return percentile(ordered, 0.025), percentile(ordered, 0.975)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _pct(value: float) -> str:
    return f"{value * 100:+.1f}%"


def _measured_verdict(change: float | None, low: float | None, high: float | None, higher_is_better: bool,
                      threshold: float, a: float, b: float) -> tuple[Verdict, str]:
    if change is None:  # a == 0
        better = b > 0 if higher_is_better else b < 0
        if b == a:
            return Verdict.no_change, "both 0"
        return (Verdict.improvement, "from 0") if better else (Verdict.regression, "from 0")
    sign = 1 if higher_is_better else -1
    gain = sign * change
    if low is None or high is None:
        verdict = Verdict.regression if gain < -threshold else Verdict.improvement if gain > threshold \
            else Verdict.no_change
        return verdict, f"{_pct(change)} against the {threshold:.0%} threshold (one value each: no interval)"
    worst, best = sorted((sign * low, sign * high))
    if gain < -threshold and best < 0:
        return Verdict.regression, f"{_pct(change)}, its 95% interval on the worse side of 0"
    if gain > threshold and worst > 0:
        return Verdict.improvement, f"{_pct(change)}, its 95% interval on the better side of 0"
    if worst < -threshold:
        # no significant change, yet the interval reaches past the threshold on the worse side: the runs
        # cannot tell a regression from none (past it only on the better side is no risk)
        return Verdict.inconclusive, (f"the 95% interval [{_pct(low)}, {_pct(high)}] reaches past the "
                                      f"{threshold:.0%} threshold on the worse side: more runs or longer points")
    return Verdict.no_change, f"{_pct(change)} [{_pct(low)}, {_pct(high)}], within the {threshold:.0%} threshold"


def ratio_range(a: Estimate, b: Estimate) -> tuple[float, float]:
    """The smallest and the largest b / a the two estimates allow (math.inf where unbounded; a 0 below b's
    values gives inf, 0 / 0 gives 1)."""
    def ratio(x: float | None, y: float | None) -> float:  # None as +infinity
        if x is None:
            return math.inf
        if y is None:
            return 0.0
        return x / y if y > 0 else (math.inf if x > 0 else 1.0)

    return ratio(b.low, a.high), ratio(b.high, a.low)


def change_range(a: Estimate, b: Estimate, higher_is_better: bool) -> tuple[float, float]:
    """B's gain over A (positive: better) in its worst and its best case over every pair of values the two
    estimates allow."""
    smallest, largest = ratio_range(a, b)
    return (smallest - 1, largest - 1) if higher_is_better else (1 - largest, 1 - smallest)


def censored_verdict(a: Estimate, b: Estimate, higher_is_better: bool, threshold: float) -> tuple[Verdict, str]:
    """What bounds decide: B's change lies between its worst and best case over every pair of values the
    two estimates allow. A regression only where even the best case is worse by the threshold, an
    improvement only where even the worst case is better by it, no significant change where both cases lie
    within it; anything else is inconclusive."""
    worst, best = change_range(a, b, higher_is_better)
    if best < -threshold:
        return Verdict.regression, f"B is at least {-best:.0%} worse whatever lies within the bounds"
    if worst > threshold:
        return Verdict.improvement, f"B is at least {worst:.0%} better whatever lies within the bounds"
    if worst >= -threshold and best <= threshold:
        return Verdict.no_change, f"within the {threshold:.0%} threshold whatever lies within the bounds"
    if a.high is None and b.high is None:
        return Verdict.inconclusive, ("both are lower bounds: neither curve crossed the SLO at the counts measured "
                                      "validly; measure agent counts past it")
    return Verdict.inconclusive, ("the bounds overlap past the threshold: the SLO's edge is not located closely "
                                  "enough (measure the counts between, or finer --search-resolution)")


def _judge(spec: _Spec, side_a: _Side, side_b: _Side, threshold: float, rng: random.Random,
           resamples: int) -> Metric:
    if side_a.runs is None or side_b.runs is None:
        why = "; ".join(s.why for s in (side_a, side_b) if s.runs is None)
        return Metric(spec.name, spec.unit, spec.higher_is_better, _combined(side_a), _combined(side_b), None,
                      None, None, "-", Verdict.inconclusive, why)
    runs_a, runs_b = side_a.runs, side_b.runs
    ea, eb = _combined(side_a), _combined(side_b)
    assert ea is not None and eb is not None
    evidence = (sum(r.evidence for r in runs_a), sum(r.evidence for r in runs_b))

    def metric(change: float | None, low: float | None, high: float | None, basis: str, verdict: Verdict,
               why: str) -> Metric:
        return Metric(spec.name, spec.unit, spec.higher_is_better, ea, eb, change, low, high, basis, verdict, why,
                      evidence)

    if min(evidence) < spec.minimum:
        return metric(None, None, None, "-", Verdict.inconclusive,
                      f"too few valid requests in the steady window (A {evidence[0]}, B {evidence[1]}; at least "
                      f"{spec.minimum} a side): longer points or more sessions")
    if not (ea.measured and eb.measured):
        verdict, why = censored_verdict(ea, eb, spec.higher_is_better, threshold)
        return metric(None, None, None, "bounds", verdict, why)
    va, vb = ea.low, eb.low
    change = vb / va - 1 if va else None
    changes: list[float] = []
    basis = "one value each"
    if len(runs_a) >= 2 and len(runs_b) >= 2:
        ra, rb = [r.estimate.low for r in runs_a], [r.estimate.low for r in runs_b]
        for _ in range(resamples):
            ma = _mean(rng.choices(ra, k=len(ra)))
            if ma:
                changes.append(_mean(rng.choices(rb, k=len(rb))) / ma - 1)
        basis = "runs"
    elif spec.statistic is not None:
        sa = [s for r in runs_a for s in r.samples]
        sb = [s for r in runs_b for s in r.samples]
        if sa and sb:
            basis = spec.basis
            pairs = spec.statistic is _ratio_of_sums
            for _ in range(resamples):
                xa, xb = (_resample_pairs(rng, sa), _resample_pairs(rng, sb)) if pairs else (
                    rng.choices(sa, k=len(sa)), rng.choices(sb, k=len(sb)))
                ma = spec.statistic(xa)
                if ma:
                    changes.append(spec.statistic(xb) / ma - 1)
    low = high = None
    if changes and change is not None:
        low, high = _interval(changes)
    verdict, why = _measured_verdict(change, low, high, spec.higher_is_better, threshold, va, vb)
    timed_a, timed_b = _timed(runs_a), _timed(runs_b)
    if verdict is not Verdict.inconclusive and timed_a is not None and timed_b is not None:
        # The host's lateness bounds what the timestamps can show: a verdict stands only where it holds for
        # every value the late timestamps leave possible on both sides.
        bounded, _ = censored_verdict(timed_a, timed_b, spec.higher_is_better, threshold)
        if bounded is not verdict:
            late = max(r.late for r in [*runs_a, *runs_b])
            lateness = (f"timestamps up to {late * 1000:.1f} ms late, A {timed_a.text(_short)}, B "
                        f"{timed_b.text(_short)}")
            worst, best = change_range(timed_a, timed_b, spec.higher_is_better)
            if verdict is not Verdict.regression and worst >= -threshold:
                # Whatever the lateness hides, B is no worse past the threshold: what the timestamps cannot
                # confirm is only a gain, and an unconfirmed gain is no significant change.
                verdict, why = Verdict.no_change, (
                    f"{_pct(change) if change is not None else 'the change'}, a gain the host's lateness leaves "
                    f"unconfirmed: between {worst:+.1%} and {best:+.1%} whatever it hid ({lateness}), never a "
                    f"regression past the {threshold:.0%} threshold")
            else:
                verdict, why = Verdict.inconclusive, (
                    f"{_pct(change) if change is not None else 'the change'} is within what the host's lateness "
                    f"could make of it ({lateness}): a quieter host, or a simulator's lower --speed")
    return metric(change, low, high, basis, verdict, why)


def _timed(runs: list[_Run]) -> Estimate | None:
    """What the host's lateness leaves known of a side's mean over its runs (None: not timed)."""
    if any(r.timed is None for r in runs):
        return None
    return Estimate(_mean([r.timed.low for r in runs if r.timed]),
                    _mean([r.timed.high if r.timed.high is not None else math.inf for r in runs if r.timed]))


def _short(value: float) -> str:
    return f"{value:.3g}"


def _combined(side: _Side) -> Estimate | None:
    """A side's estimate over its runs: the mean where every run measured it; else the mean of the lower
    bounds and of the upper ones (the mean of the true values lies between them)."""
    if not side.runs:
        return None
    estimates = [r.estimate for r in side.runs]
    low = _mean([e.low for e in estimates])
    if all(e.measured for e in estimates):
        return Estimate(low, low)
    highs = [e.high for e in estimates]
    return Estimate(low, None if any(h is None for h in highs) else _mean([h for h in highs if h is not None]))


def _resample_pairs(rng: random.Random, pairs: Sequence[float]) -> list[float]:
    count = len(pairs) // 2
    out: list[float] = []
    for i in rng.choices(range(count), k=count):
        out += [pairs[2 * i], pairs[2 * i + 1]]
    return out


def common_agents(a: Sequence[BenchResult], b: Sequence[BenchResult]) -> int | None:
    """The largest agent count every run measured validly (asked, not searched, when there is one)."""
    sets = [{p.agents for p in r.points if p.ttft_s.count and p.invalid is None} for r in [*a, *b]]
    common = set.intersection(*sets) if sets else set()
    return max(common) if common else None


def _left_out(results: Sequence[BenchResult], side: str) -> list[str]:
    out = []
    for n, result in enumerate(results, 1):
        where = f"{side} run {n}" if len(results) > 1 else side
        out += [f"{where}, {p.agents} agents: {p.invalid}" for p in result.points if p.invalid is not None]
    return out


def compare(a: Sequence[BenchResult], b: Sequence[BenchResult], threshold: float = 0.05, seed: int = 0,
            resamples: int = 2000, agents: int | None = None, force: bool = False,
            allow_acceptance_change: bool = False, acceptance_threshold: float | None = None) -> Comparison:
    """Compare the runs of stack A with those of stack B (one or more each), every headline recomputed from
    the request logs; results without them are refused, and so are sides whose measured draft acceptance
    differs past `acceptance_threshold` (acceptance.yaml's default) unless `allow_acceptance_change`."""
    if not a or not b:
        raise StackpinError("compare needs at least one result on each side")
    for side, runs in (("A", a), ("B", b)):
        for n, result in enumerate(runs, 1):
            if (why := no_evidence(result)) is not None:
                raise StackpinError(f"{side} run {n} ({result.stack.name}): {why}")
        for other in runs[1:]:
            for field_name, left, right in control_differences(runs[0], other):
                raise ControlsDiffer(field_name, left, right, f"the repeated runs of {side}")
            if other.stack.digest != runs[0].stack.digest:
                raise StackpinError(f"the repeated runs of {side} are of different stacks: {runs[0].stack.digest} "
                                    f"vs {other.stack.digest}")
    differences = control_differences(a[0], b[0])
    if differences and not force:
        raise ControlsDiffer(*differences[0])
    accepted = check_acceptance(a, b, allow_acceptance_change, acceptance_threshold)
    per_gpu = len({r.stack.gpus for r in [*a, *b]}) > 1
    agents = None if per_gpu else agents if agents is not None else common_agents(a, b)
    rng = random.Random(seed)
    metrics = [_judge(spec, spec.side(a, "A"), spec.side(b, "B"), threshold, rng, resamples)
               for spec in _specs(agents, per_gpu) if spec.asked([*a, *b])]
    return Comparison(tuple(r.stack.name for r in a), tuple(r.stack.name for r in b), (len(a), len(b)), agents,
                      threshold, tuple(f for f, _, _ in differences), tuple(metrics),
                      (a[0].stack.gpus, b[0].stack.gpus), tuple(_left_out(a, "A") + _left_out(b, "B")), accepted)

