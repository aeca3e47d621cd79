"""What N agents need at an operating point: GPUs, whole stack instances, whole racks of the catalog's
platform and their power. Shared by `stackpin plan`'s measured rows (capacity.py) and its aiconfigurator
column (aic.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from stackpin.bench.result import BenchResult
from stackpin.catalog import load_catalog
from stackpin.errors import StackpinError
from stackpin.plan.curve import Bound, Operating

_EPS = 1e-9  # 100.0000000001 GPUs is 100 GPUs, not 101


@dataclass(frozen=True)
class Capacity:
    gpus: int | None  # N / agents per GPU, rounded up; None when the target is unmet
    instances: int | None  # whole stack deployments
    racks: int | None  # whole racks (or nodes, per rack_kind)
    rack_kind: str  # "rack" or "node", as the catalog's platform is
    rack_gpus: int
    rack_power_kw: float | None  # None: the catalog knows no public figure
    power_kw: float | None
    agents_per_mw: float | None  # the plan's agents per MW of its racks' power


def capacity_for(op: Operating, agents: int, result: BenchResult, stack_gpus: int | None = None) -> Capacity:
    """Capacity for `agents` at `op`, whose agents count per stack instance of `stack_gpus` GPUs (default the
    result's: the GPUs it measured, a share of the stack when the simulator served one)."""
    platform = load_catalog().platforms.get(result.stack.platform)
    if platform is None:
        raise StackpinError(f"stack {result.stack.name}: platform {result.stack.platform} is not in the catalog")
    unit, power = platform.total_gpus, platform.power_kw
    if op.bound is Bound.unmet or op.agents <= 0:
        return Capacity(None, None, None, platform.kind, unit, power, None, None)
    gpus = math.ceil(agents / op.agents_per_gpu - _EPS)
    instances = math.ceil(agents / op.agents - _EPS)
    racks = math.ceil(instances * (stack_gpus or result.stack.gpus) / unit - _EPS)
    # Agents per MW of the plan: its agents over its whole racks' power (a last rack part-filled counts whole).
    per_mw = agents / (racks * power / 1000) if power and racks else None
    return Capacity(gpus, instances, racks, platform.kind, unit, power, racks * power if power else None, per_mw)
