"""`--chart`: racks needed for N agents against the per-agent speed target, one line per stack.

Each line covers only the speeds where its curve is crossed between measured points; past the
measured range nothing is drawn (the table says "at least" there).
"""

from __future__ import annotations

from collections.abc import Sequence

from stackpin.bench.result import BenchResult, Slo
from stackpin.plan.capacity import Workload, scenario
from stackpin.plan.curve import Bound, curve_of
from stackpin.plan.figure import caveats, new_figure, png_bytes, stack_color

STEPS = 60


def speed_targets(results: Sequence[BenchResult], percentile: str) -> list[float]:
    speeds = [p.speed for r in results for p in curve_of(r, percentile)]
    if not speeds:
        return []
    low, high = min(speeds), max(speeds)
    return [low + (high - low) * i / STEPS for i in range(STEPS + 1)]


def plan_chart(results: Sequence[BenchResult], labels: Sequence[str], agents: int, slo: Slo) -> bytes:
    figure = new_figure()
    ax = figure.add_subplot()
    workload = Workload(None, None, "")
    targets = speed_targets(results, slo.percentile)
    drawn = False
    taken: set[str] = set()
    for result, label in zip(results, labels, strict=True):
        xs, ys = [], []
        for tps in targets:
            s = scenario(result, Slo(tps=tps, ttft_s=slo.ttft_s, percentile=slo.percentile), agents, workload, "")
            if s.operating.bound is Bound.within and s.capacity.racks is not None:
                xs.append(tps)
                ys.append(s.capacity.racks)
        color = stack_color(result.stack.name, taken)
        taken.add(color)
        ax.step(xs, ys, where="post", label=label, color=color, linewidth=2)
        drawn |= bool(ys)
    ax.axvline(slo.tps, color="black", linestyle="--", linewidth=1, label=f"target {slo.tps:g} tok/s per agent")
    ax.set_xlabel("per-agent output speed target (tok/s)")
    ax.set_ylabel(f"racks for {agents:,} agents")
    ax.set_title(f"Racks needed for {agents:,} agents (TTFT {slo.percentile} <= {slo.ttft_s:g} s)")
    if drawn:  # a log axis needs a line on it: results with no measured crossing draw none
        ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no measured curve crosses a speed target", transform=ax.transAxes, ha="center")
    ax.grid(True, which="both", alpha=0.3)
    figure.supxlabel(caveats(list(results)), fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
    return png_bytes(figure)
