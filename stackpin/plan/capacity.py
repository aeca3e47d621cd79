"""`stackpin plan`'s library twin: per stack, the operating point under a target and what N agents need.

GPUs are N over agents per GPU; racks count whole stack instances (a stack is deployed whole) packed
into whole racks of the catalog's platform; power is whole racks times the catalog's rack power,
where it knows one. Waits are output tokens over the per-agent speed at the operating point.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stackpin.bench.result import BenchResult, Slo
from stackpin.errors import StackpinError
from stackpin.plan.aic import LOCKDIR, AicColumn, aic_column, available
from stackpin.plan.controls import differing_controls
from stackpin.plan.curve import Bound, Operating, curve_of, invalid_counts, operating_point
from stackpin.plan.racks import Capacity, capacity_for


@dataclass(frozen=True)
class Waits:
    turn_s: float | None  # a typical turn's output tokens / per-agent speed
    trajectory_s: float | None  # a typical whole trajectory's output tokens / per-agent speed
    at_most: bool = False  # a bound row: waits at the target speed, the slowest an agent may run there


@dataclass(frozen=True)
class Scenario:
    source: str  # the result file, or "gain 1.3x"
    operating: Operating
    capacity: Capacity
    waits: Waits


@dataclass(frozen=True)
class StackPlan:
    file: str
    stack: str
    digest: str
    platform: str
    stack_gpus: int
    simulated: str | None  # the simulator's step-time model; None when measured on hardware
    current: Scenario
    mature: Scenario | None = None
    rack_delta: int | None = None  # mature racks - current racks
    aiconfigurator: AicColumn | None = None  # the `sim` extra's static estimate; None where it is not installed
    mature_aiconfigurator: AicColumn | None = None  # the same for a --mature result's stack


@dataclass(frozen=True)
class Workload:
    turn_tokens: float | None  # median output tokens of a request
    trajectory_tokens: float | None  # median output tokens of a whole session
    source: str


@dataclass(frozen=True)
class Plan:
    agents: int
    slo: Slo
    workload: Workload
    stacks: tuple[StackPlan, ...]
    forced: tuple[str, ...] = ()  # controls that differ, compared anyway with --force
    notes: tuple[str, ...] = field(default=())

    def dump(self) -> dict[str, Any]:
        data = asdict(self)
        data["slo"] = self.slo.model_dump(mode="json")
        plain: dict[str, Any] = _plain(data)
        return plain


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value.value if isinstance(value, Bound) else value


def workload_of(results: Sequence[BenchResult], turn_tokens: float | None = None,
                trajectory_tokens: float | None = None) -> Workload:
    """Typical output tokens per turn and per session from the results' request logs (all results pooled:
    they replayed the same trace), unless given."""
    turns = [r.output_tokens for res in results for p in res.points for r in p.request_log if r.error is None]
    sessions: dict[tuple[int, int, str], int] = {}
    for i, res in enumerate(results):
        for p in res.points:
            for r in p.request_log:
                if r.error is None:
                    key = (i, p.agents, f"{r.agent}/{r.session}")
                    sessions[key] = sessions.get(key, 0) + r.output_tokens
    turn = turn_tokens if turn_tokens is not None else (statistics.median(turns) if turns else None)
    trajectory = trajectory_tokens if trajectory_tokens is not None else (
        statistics.median(sessions.values()) if sessions else None)
    given = turn_tokens is not None or trajectory_tokens is not None
    source = "given" if given else (f"median of {len(turns)} requests, {len(sessions)} sessions in the results' "
                                    "request logs" if turns else "no request log in the results: waits unknown")
    return Workload(turn, trajectory, source)


def _waits(op: Operating, workload: Workload, slo: Slo) -> Waits:
    if op.bound is Bound.unmet or op.speed <= 0:
        return Waits(None, None)
    # A bound row's agents per GPU are at least the largest measured count's; packed to the plan's racks they
    # run slower than that point's speed, down to the target: wait at the target, at most.
    bound = op.bound is Bound.at_least
    speed = slo.tps if bound else op.speed
    return Waits(workload.turn_tokens / speed if workload.turn_tokens is not None else None,
                 workload.trajectory_tokens / speed if workload.trajectory_tokens is not None else None, bound)


def scenario(result: BenchResult, slo: Slo, agents: int, workload: Workload, source: str,
             gain: float = 1.0) -> Scenario:
    op = operating_point(curve_of(result, slo.percentile), slo, result.stack.gpus, invalid_counts(result))
    if gain != 1.0 and op.bound is not Bound.unmet:
        # A stated software gain: the same per-agent speed, `gain` times the agents and throughput per GPU.
        op = Operating(op.agents * gain, op.agents_per_gpu * gain, op.tps_per_gpu * gain, op.speed, op.bound,
                       op.limited_by, f"{op.note}; times the stated gain {gain:g}")
    return Scenario(source, op, capacity_for(op, agents, result), _waits(op, workload, slo))


def _pair(mature: Sequence[tuple[Path, BenchResult]], results: Sequence[tuple[Path, BenchResult]]
          ) -> dict[int, tuple[Path, BenchResult]]:
    """Each --mature result goes with the one current result on its platform."""
    paired: dict[int, tuple[Path, BenchResult]] = {}
    for path, res in mature:
        same = [i for i, (_, r) in enumerate(results) if r.stack.platform == res.stack.platform]
        if len(same) != 1:
            what = "no" if not same else f"{len(same)}"
            raise StackpinError(f"--mature {path}: {what} current results on platform {res.stack.platform}; "
                                "give exactly one current result per mature one's platform")
        if same[0] in paired:
            raise StackpinError(f"--mature {path}: a second mature result for platform {res.stack.platform}")
        paired[same[0]] = (path, res)
    return paired


def make_plan(results: Sequence[tuple[Path, BenchResult]], agents: int, slo: Slo, *,
              mature: Sequence[tuple[Path, BenchResult]] = (), gain: float | None = None, force: bool = False,
              turn_tokens: float | None = None, trajectory_tokens: float | None = None,
              lockdir: Path = LOCKDIR) -> Plan:
    """`lockdir`: where the aiconfigurator column looks up each result's lock."""
    if not results:
        raise StackpinError("plan needs at least one bench result")
    if agents <= 0:
        raise StackpinError(f"--agents {agents}: must be positive")
    if gain is not None and gain <= 0:
        raise StackpinError(f"--gain {gain:g}: must be positive")
    differ = differing_controls([*results, *mature])
    if differ and not force:
        raise StackpinError(f"results measured under different controls: {differ[0]}"
                            + (f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""),
                            "such results are not comparable; --force plans them side by side anyway")
    paired = _pair(mature, results)
    workload = workload_of([r for _, r in [*results, *mature]], turn_tokens, trajectory_tokens)
    stacks = []
    with_aic = available()
    for i, (path, res) in enumerate(results):
        current = scenario(res, slo, agents, workload, str(path))
        later = None
        if i in paired:
            later = scenario(paired[i][1], slo, agents, workload, str(paired[i][0]))
        elif gain is not None:
            later = scenario(res, slo, agents, workload, f"gain {gain:g}x", gain)
        delta = (later.capacity.racks - current.capacity.racks
                 if later and later.capacity.racks is not None and current.capacity.racks is not None else None)
        stacks.append(StackPlan(str(path), res.stack.name, res.stack.digest, res.stack.platform, res.stack.gpus,
                                res.simulation.model if res.simulation else None, current, later, delta,
                                aic_column(res, slo, agents, lockdir) if with_aic else None,
                                aic_column(paired[i][1], slo, agents, lockdir) if with_aic and i in paired else None))
    notes = [] if with_aic else ["aiconfigurator's static estimate is not shown: the `sim` extra "
                                 "(aiconfigurator-core) is not installed"]
    for model in sorted({s.simulated for s in stacks if s.simulated}):
        notes.append(f"results marked simulated ({model}): what-if figures, not measurements of hardware")
    notes += sorted({line for _, r in [*results, *mature] if r.simulation for line in r.simulation.substitutions})
    for path, r in [*results, *mature]:
        if r.client.saturated:
            notes.append(f"{path}: the client was saturated while measuring: its throughput is a floor")
        if r.interrupted:
            notes.append(f"{path}: the run was interrupted: its curve ends where it stopped")
        invalid = sorted(p.agents for p in r.points if p.invalid)
        if invalid:
            notes.append(f"{path}: {len(invalid)} point(s) invalid, left out (the client could not keep up): "
                         f"{', '.join(map(str, invalid))} agents")
    return Plan(agents, slo, workload, tuple(stacks), tuple(differ), tuple(notes))
