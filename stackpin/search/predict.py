"""A surviving candidate on the step model: where its predicted steady-state curve (stackpin.sim.curve) meets
the SLO, read as `stackpin plan` reads a measured curve (stackpin.plan.curve.operating_point): the largest
concurrency at which every agent still gets the target speed and TTFT (stackpin.sim.ttft) is within the
limit, interpolated between the two batch sizes around the crossing. Every figure is a prediction of the
named model, never a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stackpin.bench.result import Slo
from stackpin.plan.curve import Bound, CurvePoint, operating_point
from stackpin.profile.model import StackProfile
from stackpin.sim.curve import Workload, curve
from stackpin.sim.stack import SimStack, profile_stack
from stackpin.sim.ttft import ttft_curve


@dataclass(frozen=True)
class Prediction:
    """A stack's predicted operating point at the SLO (model: the step model that predicted it)."""

    model: str
    meets: bool
    tps_per_gpu: float  # output tok/s per GPU at the operating point (0 when unmet)
    agent_tps: float  # per-agent output tok/s there
    ttft_s: float  # TTFT of the mean prompt there (inf: the prefill queue never drains)
    agents: float  # concurrent agents on the whole stack there
    gpus: int
    limited_by: str  # tps | ttft | max-num-seqs | why it is unmet
    single_agent_tps: float  # one agent alone (the curve's first point)


def stack_key(stack: SimStack) -> str:
    """What the step model reads of a stack, without its name: two candidates with one key predict alike."""
    from dataclasses import replace

    return repr(replace(stack, name="", digest=""))


def predict_stack(stack: SimStack, slo: Slo, workload: Workload, model: str = "roofline",
                  params: dict[str, Any] | None = None) -> Prediction:
    points = curve(stack, workload, params, model)
    ttfts = ttft_curve(stack, points, workload, params, model)
    measured = [CurvePoint(p.agents, p.agent_tps, t, p.output_tps_per_gpu) for p, t in zip(points, ttfts, strict=True)]
    op = operating_point(measured, slo, stack.gpus)
    single = points[0].agent_tps
    if op.bound == Bound.unmet:
        return Prediction(model, False, 0.0, 0.0, ttfts[0], 0.0, stack.gpus, op.note, single)
    ttft = _ttft_at(measured, op.agents)
    limited = "max-num-seqs" if op.bound == Bound.at_least else (op.limited_by or "tps")
    return Prediction(model, True, op.tps_per_gpu, op.speed, ttft, op.agents, stack.gpus, limited, single)


def _ttft_at(points: list[CurvePoint], agents: float) -> float:
    """TTFT at a (possibly interpolated) agent count, linear between the two points around it."""
    for lo, hi in zip(points, points[1:], strict=False):
        if lo.agents <= agents <= hi.agents:
            if math.isinf(hi.ttft_s):
                return lo.ttft_s
            f = (agents - lo.agents) / (hi.agents - lo.agents)
            return lo.ttft_s + f * (hi.ttft_s - lo.ttft_s)
    return points[-1].ttft_s if agents >= points[-1].agents else points[0].ttft_s


def predict(profile: StackProfile, name: str, slo: Slo, workload: Workload, model: str = "roofline",
            params: dict[str, Any] | None = None) -> Prediction:
    return predict_stack(profile_stack(profile, name), slo, workload, model, params)
