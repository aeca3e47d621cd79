"""A surviving candidate on the step model: where its predicted steady-state curve (stackpin.sim.curve) meets
the SLO, read as `stackpin plan` reads a measured curve (stackpin.plan.curve.operating_point): the largest
concurrency at which every agent still gets the target speed and TTFT (stackpin.sim.ttft) is within the
limit, interpolated between the two batch sizes around the crossing. Every figure is a prediction of the
named model, never a measurement; the draft acceptance it predicts with is the model's (published for the
model and method in sim/roofline.yaml, else its estimate) or, where `search --acceptance RESULT.json` gave
one measured with the same method and draft count, the measured per-position rates; each prediction says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackpin.bench.result import Slo
from stackpin.errors import StackpinError
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
    acceptance: str = ""  # which draft acceptance it was predicted with ("": no drafts)


@dataclass(frozen=True)
class Measured:
    """Draft acceptance a bench run measured (`search --acceptance RESULT.json`): it replaces the model's for
    candidates drafting with the same method and as many tokens a step."""

    source: str  # the result file
    method: str
    drafts: int  # the draft count it was measured at: positions the endpoint counted
    rates: tuple[float, ...]  # conditional acceptance per position
    mean_length: float
    drafting: str | None  # the measured stack's drafting settings (method, draft model, sampling)

    def text(self) -> str:
        return f"{self.method} k={self.drafts}, mean length {self.mean_length:.2f}"


def measured_from(path: Path) -> Measured:
    """The acceptance a bench result file measured; one line (exit 2) when it has none to give."""
    from stackpin.bench.acceptance import acceptance_of
    from stackpin.bench.resultfile import read_result

    found = acceptance_of(read_result(path))
    if found is None:
        raise StackpinError(f"{path}: the result carries no measured draft acceptance",
                            "bench a stack that drafts, on an endpoint that counts acceptance (docs/bench.md)")
    if found.method is None or not found.accepted_per_position:
        raise StackpinError(f"{path}: the result's acceptance names no speculative method or counts no "
                            "position (the endpoint counts only the total)", "give a result with per-position counts")
    rates = found.rates
    if len(rates) < len(found.accepted_per_position):
        raise StackpinError(f"{path}: no draft reached position {len(rates) + 1} of "
                            f"{len(found.accepted_per_position)}: too little measured to take per-position rates from")
    return Measured(str(path), found.method, len(found.accepted_per_position), rates, found.mean_length,
                    found.drafting)


def acceptance_for(stack: SimStack, measured: Measured | None) -> tuple[tuple[float, ...] | None, str]:
    """(the rates to predict `stack` with, None for the model's; which acceptance that is, in words)."""
    from stackpin.sim.roofline import published

    pool = stack.decode
    if not pool.spec_method or not pool.spec_k:
        return None, ""
    if measured is not None and measured.method == pool.spec_method and measured.drafts == pool.spec_k:
        return measured.rates, f"measured from {measured.source} ({measured.text()})"
    model = "model's published" if published(stack, pool.spec_method) is not None else "model's estimate"
    if measured is not None:
        model += f" (measured is {measured.method} k={measured.drafts})"
    return None, model


def stack_key(stack: SimStack) -> str:
    """What the step model reads of a stack, without its name: two candidates with one key predict alike."""
    from dataclasses import replace

    return repr(replace(stack, name="", digest=""))


def predict_stack(stack: SimStack, slo: Slo, workload: Workload, model: str = "roofline",
                  params: dict[str, Any] | None = None, measured: Measured | None = None) -> Prediction:
    rates, said = acceptance_for(stack, measured)
    points = curve(stack, workload, params, model, acceptance=rates)
    ttfts = ttft_curve(stack, points, workload, params, model, acceptance=rates)
    read = [CurvePoint(p.agents, p.agent_tps, t, p.output_tps_per_gpu) for p, t in zip(points, ttfts, strict=True)]
    op = operating_point(read, slo, stack.gpus)
    single = points[0].agent_tps
    if op.bound == Bound.unmet:
        return Prediction(model, False, 0.0, 0.0, ttfts[0], 0.0, stack.gpus, op.note, single, said)
    ttft = _ttft_at(read, op.agents)
    limited = "max-num-seqs" if op.bound == Bound.at_least else (op.limited_by or "tps")
    return Prediction(model, True, op.tps_per_gpu, op.speed, ttft, op.agents, stack.gpus, limited, single, said)


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
            params: dict[str, Any] | None = None, measured: Measured | None = None) -> Prediction:
    return predict_stack(profile_stack(profile, name), slo, workload, model, params, measured)
