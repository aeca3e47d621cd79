"""Where a measured curve meets a service target: interpolated between measured points, never past them.

A result's points are agent counts; at each the client measured every agent's output speed, the TTFT
distribution and the throughput per GPU. The target holds at a point when no request failed, the
slowest agent keeps the target speed (the SLO is a speed *every* agent must hold) and the chosen TTFT
percentile is within the limit (as `stackpin bench run` judges `slo_met`). Between the last point
where it holds and the first where it does not, agents and throughput are interpolated linearly in
whichever limit is crossed first (curves are taken as measured: a point that holds again after a
failing one is not used). Past the largest measured count nothing is assumed: the answer is then a
lower bound and says so (`Bound.at_least`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from stackpin.bench.result import BenchResult, Point, Slo


class Bound(StrEnum):
    within = "within"  # the target is crossed between two measured points: interpolated
    at_least = "at-least"  # the target still holds at the largest measured count: a lower bound
    unmet = "unmet"  # the target fails already at the smallest measured count


@dataclass(frozen=True)
class CurvePoint:
    agents: int
    speed: float  # the slowest agent's output tok/s
    ttft_s: float  # at the SLO's percentile
    tps_per_gpu: float
    errors: int = 0


@dataclass(frozen=True)
class Operating:
    """The operating point a stack reaches under a target on its measured curve."""

    agents: float  # concurrent agents on the stack's GPUs (fractional where interpolated)
    agents_per_gpu: float
    tps_per_gpu: float
    speed: float  # per-agent output tok/s there (the target where interpolated)
    bound: Bound
    limited_by: str | None  # "tps", "ttft" or "errors": the limit crossed; None unless within
    note: str


def point_speed(point: Point) -> float:
    """The slowest agent's speed; the median agent's where the result carries no per-agent samples."""
    return min(point.agent_tps_samples) if point.agent_tps_samples else point.agent_tps.p50


def curve_of(result: BenchResult, percentile: str) -> list[CurvePoint]:
    """The result's measured points that served requests, by agent count (an invalid point, where the
    client could not keep up, is not on the curve)."""
    points = sorted((p for p in result.points if p.requests > p.errors and p.invalid is None), key=lambda p: p.agents)
    return [CurvePoint(p.agents, point_speed(p), getattr(p.ttft_s, percentile), p.output_tps_per_gpu, p.errors)
            for p in points]


def holds(point: CurvePoint, slo: Slo) -> bool:
    """The SLO held at a measured point: no failed request, the slowest agent at the target speed, the
    TTFT percentile within the limit (as stackpin.bench.stats.holds judges a Point)."""
    return point.errors == 0 and point.speed >= slo.tps and point.ttft_s <= slo.ttft_s


def invalid_counts(result: BenchResult) -> tuple[int, ...]:
    """The agent counts of the result's invalid points: a crossing may lie at any of them."""
    return tuple(sorted(p.agents for p in result.points if p.invalid is not None))


def operating_point(curve: list[CurvePoint], slo: Slo, gpus: int, invalid: Sequence[int] = ()) -> Operating:
    """Where `curve` (valid points, by agent count) meets `slo`. `invalid`: agent counts measured but invalid;
    a crossing past one of them is not interpolated over it (the curve there is unknown): the answer is
    then a lower bound at the last count that held."""
    if not curve:
        return Operating(0, 0, 0, 0, Bound.unmet, None, "no valid measured point served a request")
    first = curve[0]
    if not holds(first, slo):
        why = (f"{first.speed:.0f} tok/s < {slo.tps:g}" if first.speed < slo.tps
               else f"TTFT {slo.percentile} {first.ttft_s:.2f}s > {slo.ttft_s:g}s" if first.ttft_s > slo.ttft_s
               else f"{first.errors} failed request(s)")
        fewer = "" if first.agents == 1 else f"; fewer than {first.agents} agents were not measured"
        return Operating(0, 0, 0, 0, Bound.unmet, None, f"fails at {first.agents} agents ({why}){fewer}")
    last_ok = first
    for point in curve[1:]:
        if holds(point, slo):
            last_ok = point
            continue
        gap = [a for a in invalid if last_ok.agents < a < point.agents]
        if gap:
            return Operating(last_ok.agents, last_ok.agents / gpus, last_ok.tps_per_gpu, last_ok.speed,
                             Bound.at_least, None, f"met at {last_ok.agents} agents, missed at {point.agents}, with "
                             f"{', '.join(map(str, gap))} invalid between: a lower bound, not interpolated over them")
        # Crossed between last_ok and point: the fraction of the way at which each failing limit is hit.
        crossings = []
        if point.speed < slo.tps:
            crossings.append(((last_ok.speed - slo.tps) / (last_ok.speed - point.speed), "tps"))
        if point.ttft_s > slo.ttft_s:
            crossings.append(((slo.ttft_s - last_ok.ttft_s) / (point.ttft_s - last_ok.ttft_s), "ttft"))
        if not crossings:  # only failed requests: no limit to interpolate on, so the last clean count stands
            return Operating(last_ok.agents, last_ok.agents / gpus, last_ok.tps_per_gpu, last_ok.speed, Bound.within,
                             "errors", f"{point.errors} request(s) failed at {point.agents} agents: the last "
                             f"measured count without failures, {last_ok.agents}, stands")
        f, limit = min(crossings)
        agents = last_ok.agents + f * (point.agents - last_ok.agents)
        tps = last_ok.tps_per_gpu + f * (point.tps_per_gpu - last_ok.tps_per_gpu)
        speed = last_ok.speed + f * (point.speed - last_ok.speed)
        return Operating(agents, agents / gpus, tps, speed, Bound.within, limit,
                         f"interpolated between {last_ok.agents} and {point.agents} agents ({limit} limit)")
    return Operating(last_ok.agents, last_ok.agents / gpus, last_ok.tps_per_gpu, last_ok.speed, Bound.at_least, None,
                     f"still met at {last_ok.agents} agents, the largest valid count measured: a lower bound, not "
                     "extrapolated")
