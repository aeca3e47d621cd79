"""The plan's aiconfigurator column: for the stack a result was measured on, what the simulator's
`aiconfigurator` step model (the `sim` extra) says under the same target, or why it cannot say.

The estimate is static: the steady-state curve (stackpin.sim.curve) on the default AgentPerf-shaped
workload with aiconfigurator-core's step latencies, read at the target per-agent speed like a measured
curve (plan/curve.py); TTFT is not modelled there, so only the speed target is checked. The stack comes
from the lock whose digest the result carries, looked up in the lock directory the caller names (`stackpin
plan --lockdir`, default the working directory's lockfiles/); never in stackpin's own checkout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from stackpin.bench.result import BenchResult, Slo
from stackpin.errors import StackpinError
from stackpin.plan.curve import CurvePoint, operating_point
from stackpin.sim.stack import SimStack

LOCKDIR = Path("lockfiles")  # as every command's --lockdir: relative to the working directory


@dataclass(frozen=True)
class AicColumn:
    agents_per_gpu: float | None  # None: refused or the target is unmet
    tps_per_gpu: float | None
    gpus: int | None
    racks: int | None
    bound: str | None  # within / at-least / unmet, as for a measured curve
    reason: str  # why there is no estimate, or what it is


def available() -> bool:
    from stackpin.sim.aic import installed_version, mapping

    return installed_version() == str(mapping()["version"])


@cache
def _locks_by_digest(folder: Path) -> dict[str, Path]:
    """Stack digest -> lockfile, read once a folder for the whole plan (every result and scenario asks)."""
    from stackpin.lock.lockfile import read_lock

    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.lock.yaml")) if folder.is_dir() else []:
        try:
            found.setdefault(read_lock(path).stack_digest, path)
        except StackpinError:
            continue
    return found


def _lock_stack(digest: str, lockdir: Path) -> SimStack | None:
    from stackpin.sim.stack import load_stack

    path = _locks_by_digest(lockdir.resolve()).get(digest)
    if path is None:
        return None
    try:
        return load_stack(path)
    except StackpinError:
        return None  # a stack the simulator cannot model: the column says there is no lock to model


def aic_column(result: BenchResult, slo: Slo, agents: int, lockdir: Path = LOCKDIR) -> AicColumn:
    from stackpin.plan.racks import capacity_for
    from stackpin.sim.aic import refusal
    from stackpin.sim.curve import curve

    stack = _lock_stack(result.stack.digest, lockdir)
    if stack is None:
        return AicColumn(None, None, None, None, None,
                         f"no lock with digest {result.stack.digest} in {lockdir}/ to model")
    why = refusal(stack)
    if why is not None:
        return AicColumn(None, None, None, None, None, why)
    simulated = curve(stack, model="aiconfigurator")
    points = [CurvePoint(p.agents, p.agent_tps, 0.0, p.output_tps_per_gpu) for p in simulated]
    op = operating_point(points, slo.model_copy(update={"ttft_s": float("inf")}), stack.gpus)
    # op.agents is per whole stack (the simulated curve is the stack's), not per the share a result measured.
    cap = capacity_for(op, agents, result, stack.gpus)
    return AicColumn(op.agents_per_gpu or None, op.tps_per_gpu or None, cap.gpus, cap.racks, op.bound.value,
                     "static: stackpin's steady-state curve with aiconfigurator's step latencies on the default "
                     "AgentPerf-shaped workload; speed target only (TTFT not modelled)")
