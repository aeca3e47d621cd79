"""`stackpin bench compare`: two stacks' results, headline by headline, with a bootstrap confidence
interval of the relative change and a verdict.

Results are comparable when the controls that decide the numbers match: trace, model build,
precision and SLO (engine versions are what a comparison is usually about, so they may differ).
The interval comes from repeated runs when each side has two or more (resampling runs), otherwise
from the samples inside the runs (requests or agents, resampled): a single run's interval says how
noisy that run was, not how much runs vary. Resampling is seeded: same inputs, same output.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stackpin.bench.result import BenchResult, Point
from stackpin.bench.stats import percentile
from stackpin.errors import StackpinError

MUST_MATCH = ("trace_digest", "model", "precision", "slo")


class ControlsDiffer(StackpinError):
    """Two results measured under different controls: not comparable (exit 2) without --force."""

    def __init__(self, field: str, a: object, b: object, where: str = "A and B") -> None:
        super().__init__(f"controls differ between {where}: {field}: {a} vs {b}; the results are not comparable "
                         "(--force compares them anyway)")
        self.field = field


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool
    a: float
    b: float
    change: float | None  # b / a - 1; None when a is 0
    low: float | None  # 95% interval of the change
    high: float | None
    basis: str  # "runs", "requests", "agents" or "one value each"
    verdict: str  # regression | improvement | no significant change


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

    @property
    def regressed(self) -> bool:
        return any(m.verdict == "regression" for m in self.metrics)

    @property
    def verdict(self) -> str:
        if self.regressed:
            return "regression"
        return "improvement" if any(m.verdict == "improvement" for m in self.metrics) else "no significant change"


# The headline a comparison is summed up by, the first it has: throughput at the SLO is what a stack is
# for; single-agent speed when no SLO was scored.
MAIN_METRICS = ("tok/s per GPU at the SLO", "single-agent tok/s")


def unsure(metric: Metric, threshold: float) -> bool:
    """No significant change, yet its interval reaches past the threshold on the worse side: the runs cannot
    tell a regression from none. (An interval reaching past it only on the better side is no risk: a
    TTFT of [-8%, +3%] may be faster, never more than the threshold slower.)"""
    if metric.verdict != "no significant change" or metric.low is None or metric.high is None:
        return False
    return metric.low < -threshold if metric.higher_is_better else metric.high > threshold


def settled_verdict(comparison: Comparison) -> str:
    """compare's verdict, or `inconclusive` short of a regression when a headline is unsure or no headline
    was measured on both sides (what a trial or a rollout gate acts on)."""
    if comparison.verdict != "regression" and (
            not comparison.metrics or any(unsure(m, comparison.threshold) for m in comparison.metrics)):
        return "inconclusive"
    return comparison.verdict


def main_metric(comparison: Comparison) -> Metric | None:
    """The headline the comparison is summed up by (MAIN_METRICS), None when neither was measured."""
    return next((m for name in MAIN_METRICS for m in comparison.metrics if m.name == name), None)


def control_differences(a: BenchResult, b: BenchResult) -> list[tuple[str, object, object]]:
    out = []
    for name in MUST_MATCH:
        left, right = getattr(a.controls, name), getattr(b.controls, name)
        if left != right:
            out.append((name, left.model_dump() if hasattr(left, "model_dump") else left,
                        right.model_dump() if hasattr(right, "model_dump") else right))
    return out


# A sample statistic: what a metric is, computed from the samples of one run (or of runs pooled).
Statistic = Callable[[Sequence[float]], float]


@dataclass(frozen=True)
class _Spec:
    name: str
    unit: str
    higher_is_better: bool
    value: Callable[[BenchResult], float | None]  # the run's headline
    samples: Callable[[BenchResult], list[float] | None]  # what a run's value is computed from
    statistic: Statistic | None
    basis: str


def _point(result: BenchResult, agents: int) -> Point | None:
    """The measured point at `agents` (an invalid point is not a measurement)."""
    return next((p for p in result.points if p.agents == agents and p.invalid is None), None)


def _single_requests(result: BenchResult) -> list[float] | None:
    point = _point(result, 1)
    if point is None:
        return None
    # (tokens, seconds generating) pairs flattened as [t0, s0, t1, s1, ...]: the statistic is a ratio of sums
    out: list[float] = []
    for r in point.request_log:
        if not r.error and r.ttft_s is not None and r.end_s is not None and r.output_tokens > 0:
            out += [r.output_tokens, r.end_s - r.start_s - r.ttft_s]
    return out or None


def _ratio_of_sums(pairs: Sequence[float]) -> float:
    seconds = sum(pairs[1::2])
    return sum(pairs[0::2]) / seconds if seconds > 0 else 0.0


def _single_value(result: BenchResult) -> float | None:
    if result.score is not None:
        return result.score.single_agent_tps
    point = _point(result, 1)
    return point.agent_tps.mean if point and point.agent_tps.count else None


def _slo_point(result: BenchResult) -> Point | None:
    return _point(result, result.score.max_agents) if result.score and result.score.max_agents else None


def _agent_output_rates(result: BenchResult) -> list[float] | None:
    """Per agent at the SLO's largest count: output tokens / point duration / GPUs (they sum to the
    point's throughput per GPU)."""
    point = _slo_point(result)
    if point is None or point.duration_s <= 0:
        return None
    tokens: dict[int, int] = defaultdict(int)
    for r in point.request_log:
        tokens[r.agent] += r.output_tokens
    return [tokens[a] / point.duration_s / result.stack.gpus for a in sorted(tokens)] or None


def _specs(agents: int | None, per_gpu: bool = False) -> list[_Spec]:
    """The headlines. `per_gpu`: the two sides ran on different GPU counts (a share of a stack, another
    topology), so agent counts compare only per GPU, and TTFT at one agent count is not the same load."""
    max_agents = (_Spec("max agents per GPU under SLO", "agents/GPU", True,
                        lambda r: r.score.max_agents / r.stack.gpus if r.score else None, lambda _: None, None, "runs")
                  if per_gpu else
                  _Spec("max agents under SLO", "agents", True,
                        lambda r: float(r.score.max_agents) if r.score else None, lambda _: None, None, "runs"))
    specs = [
        _Spec("single-agent tok/s", "tok/s", True, _single_value, _single_requests, _ratio_of_sums, "requests"),
        max_agents,
        _Spec("tok/s per GPU at the SLO", "tok/s/GPU", True,
              lambda r: r.score.output_tps_per_gpu_at_slo if r.score else None, _agent_output_rates, sum, "agents"),
    ]
    if agents is not None and not per_gpu:
        def ttft(result: BenchResult) -> float | None:
            point = _point(result, agents)
            return point.ttft_s.p90 if point and point.ttft_s.count else None

        def ttfts(result: BenchResult) -> list[float] | None:
            point = _point(result, agents)
            values = [r.ttft_s for r in point.request_log if not r.error and r.ttft_s is not None] if point else []
            return values or None

        specs.append(_Spec(f"TTFT p90 at {agents} agents", "s", False, ttft, ttfts,
                           lambda v: percentile(sorted(v), 0.9), "requests"))
    return specs


def common_agents(a: Sequence[BenchResult], b: Sequence[BenchResult]) -> int | None:
    """The largest agent count every run measured (asked, not searched, when there is one)."""
    sets = [{p.agents for p in r.points if p.ttft_s.count and p.invalid is None} for r in [*a, *b]]
    common = set.intersection(*sets) if sets else set()
    return max(common) if common else None


def _interval(changes: list[float]) -> tuple[float, float]:
    ordered = sorted(changes)
    return percentile(ordered, 0.025), percentile(ordered, 0.975)


def _verdict(change: float | None, low: float | None, high: float | None, higher_is_better: bool, threshold: float,
             a: float, b: float) -> str:
    if change is None:  # a == 0
        better = b > 0 if higher_is_better else b < 0
        return "no significant change" if b == a else ("improvement" if better else "regression")
    sign = 1 if higher_is_better else -1
    gain = sign * change
    if low is not None and high is not None:
        worst, best = sorted((sign * low, sign * high))
        if gain < -threshold and best < 0:
            return "regression"
        if gain > threshold and worst > 0:
            return "improvement"
        return "no significant change"
    return "regression" if gain < -threshold else "improvement" if gain > threshold else "no significant change"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def compare(a: Sequence[BenchResult], b: Sequence[BenchResult], threshold: float = 0.05, seed: int = 0,
            resamples: int = 2000, agents: int | None = None, force: bool = False) -> Comparison:
    """Compare the runs of stack A with those of stack B (one or more each)."""
    if not a or not b:
        raise StackpinError("compare needs at least one result on each side")
    for side, runs in (("A", a), ("B", b)):
        for other in runs[1:]:
            for field_name, left, right in control_differences(runs[0], other):
                raise ControlsDiffer(field_name, left, right, f"the repeated runs of {side}")
            if other.stack.digest != runs[0].stack.digest:
                raise StackpinError(f"the repeated runs of {side} are of different stacks: {runs[0].stack.digest} "
                                    f"vs {other.stack.digest}")
    differences = control_differences(a[0], b[0])
    if differences and not force:
        raise ControlsDiffer(*differences[0])
    per_gpu = len({r.stack.gpus for r in [*a, *b]}) > 1
    agents = None if per_gpu else agents if agents is not None else common_agents(a, b)
    rng = random.Random(seed)
    metrics = []
    for spec in _specs(agents, per_gpu):
        values_a = [spec.value(r) for r in a]
        values_b = [spec.value(r) for r in b]
        if any(v is None for v in [*values_a, *values_b]):
            continue  # not measured on one side (no SLO, no 1-agent point)
        va, vb = _mean([v for v in values_a if v is not None]), _mean([v for v in values_b if v is not None])
        change = vb / va - 1 if va else None
        low = high = None
        basis = "one value each"
        if len(a) >= 2 and len(b) >= 2:
            ra, rb = [v for v in values_a if v is not None], [v for v in values_b if v is not None]
            changes = []
            for _ in range(resamples):
                ma, mb = _mean(rng.choices(ra, k=len(ra))), _mean(rng.choices(rb, k=len(rb)))
                if ma:
                    changes.append(mb / ma - 1)
            basis = "runs"
        else:
            sa = [s for r in a for s in (spec.samples(r) or [])]
            sb = [s for r in b for s in (spec.samples(r) or [])]
            changes = []
            if spec.statistic is not None and sa and sb:
                basis = spec.basis
                pairs = spec.basis == "requests" and spec.statistic is _ratio_of_sums
                for _ in range(resamples):
                    xa, xb = (_resample_pairs(rng, sa), _resample_pairs(rng, sb)) if pairs else (
                        rng.choices(sa, k=len(sa)), rng.choices(sb, k=len(sb)))
                    ma = spec.statistic(xa)
                    if ma:
                        changes.append(spec.statistic(xb) / ma - 1)
        if changes and change is not None:
            low, high = _interval(changes)
        metrics.append(Metric(spec.name, spec.unit, spec.higher_is_better, va, vb, change, low, high, basis,
                              _verdict(change, low, high, spec.higher_is_better, threshold, va, vb)))
    return Comparison(tuple(r.stack.name for r in a), tuple(r.stack.name for r in b), (len(a), len(b)), agents,
                      threshold, tuple(f for f, _, _ in differences), tuple(metrics),
                      (a[0].stack.gpus, b[0].stack.gpus))


def _resample_pairs(rng: random.Random, pairs: Sequence[float]) -> list[float]:
    count = len(pairs) // 2
    out: list[float] = []
    for i in rng.choices(range(count), k=count):
        out += [pairs[2 * i], pairs[2 * i + 1]]
    return out
