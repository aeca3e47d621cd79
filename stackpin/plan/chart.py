"""`--chart`: racks needed for N agents against the per-agent speed target, one line per stack, and the
plan's own answer on it.

Each line covers only the speeds where its curve is crossed between measured points; past the measured
range nothing is drawn. On the target's line each stack's answer is marked and written (racks and GPUs,
`<=` where it is a bound); each valid measured point is a dot where its agents would put the racks, an
invalid one a hollow X there, labelled; a stack with no line still has its points and its answer, and
its legend entry says why there is no line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stackpin.bench.result import BenchResult, Slo
from stackpin.plan.capacity import Scenario, Workload, scenario
from stackpin.plan.curve import Bound, Operating, curve_of
from stackpin.plan.figure import (
    CROSSING,
    INVALID,
    MET,
    REFERENCE,
    Labeller,
    below,
    caveats,
    curve_styles,
    invalid_points,
    new_figure,
    png_bytes,
    slo_edge,
    wrapped,
)
from stackpin.plan.racks import capacity_for

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STEPS = 60
AT_MOST = "v"  # the answer where it is a bound: at most this many racks
PLOTS_HEIGHT = 5.0  # inches above the legend
LEGEND_WIDTH = 120  # characters an entry's line holds


def speed_targets(results: Sequence[BenchResult], percentile: str) -> list[float]:
    speeds = [p.speed for r in results for p in curve_of(r, percentile)]
    if not speeds:
        return []
    low, high = min(speeds), max(speeds)
    return [low + (high - low) * i / STEPS for i in range(STEPS + 1)]


def plan_chart(results: Sequence[BenchResult], labels: Sequence[str], agents: int, slo: Slo) -> bytes:
    return png_bytes(plan_figure(results, labels, agents, slo))


def _answer(s: Scenario) -> str:
    """The plan's answer for one stack, as its table gives it."""
    op, cap = s.operating, s.capacity
    if op.bound is Bound.unmet or cap.racks is None or cap.gpus is None:
        return f"unmet ({op.note})"
    most = "<= " if op.bound is Bound.at_least else ""
    unit = "nodes" if cap.rack_kind == "node" else "racks"
    return f"{most}{cap.racks:,} {unit}, {most}{cap.gpus:,} GPUs"


def _why_bound(s: Scenario, past_invalid: Sequence[int]) -> str:
    if past_invalid:
        return f"a bound: the SLO is crossed past invalid {', '.join(map(str, past_invalid))} agents"
    if s.operating.bound is Bound.at_least:
        return "a bound: the SLO still held at the largest valid count"
    return ""


def plan_figure(results: Sequence[BenchResult], labels: Sequence[str], agents: int, slo: Slo) -> Figure:
    from stackpin.extras import require

    require("plot")  # a missing extra is named, before matplotlib is imported
    from matplotlib.lines import Line2D

    workload = Workload(None, None, "")
    targets = speed_targets(results, slo.percentile)
    styles = curve_styles([r.stack.name for r in results])
    figure = new_figure(9.0, PLOTS_HEIGHT)
    ax = figure.add_subplot()
    placer = Labeller(figure)
    handles: list[object] = []
    marked = False
    for result, label, (color, style) in zip(results, labels, styles, strict=True):
        xs, ys = [], []
        for tps in targets:
            s = scenario(result, Slo(tps=tps, ttft_s=slo.ttft_s, percentile=slo.percentile), agents, workload, "")
            if s.operating.bound is Bound.within and s.capacity.racks is not None:
                xs.append(tps)
                ys.append(s.capacity.racks)
        ax.step(xs, ys, where="post", color=color, linestyle=style, linewidth=2)
        placer.line(ax, [x for x in xs for _ in (0, 1)][1:], [y for y in ys for _ in (0, 1)][:-1])  # the steps
        curve = curve_of(result, slo.percentile)
        gpus = result.stack.gpus
        for p in curve:  # where each measured count's agents per GPU would put the racks
            racks = capacity_for(Operating(p.agents, p.agents / gpus, p.tps_per_gpu, p.speed, Bound.within, None, ""),
                                 agents, result).racks
            if racks:
                ax.plot([p.speed], [racks], marker=MET, markersize=4, color=color, linestyle="none", zorder=3)
                placer.marker(ax, p.speed, racks, 4)
                placer.label(ax, p.speed, racks, f"{p.agents}" if len(curve) > 1 else f"{p.agents}: the only "
                             "valid point", color, priority=1 if len(curve) > 1 else 0)
        bad = invalid_points(result)
        for point in bad:
            racks = capacity_for(Operating(point.agents, point.agents / gpus, point.tps_per_gpu, point.speed,
                                           Bound.within, None, ""), agents, result).racks
            if racks:
                ax.plot([point.speed], [racks], marker=INVALID, markersize=8, color=color, markerfacecolor="white",
                        linestyle="none", zorder=3)
                placer.marker(ax, point.speed, racks, 8)
                placer.label(ax, point.speed, racks, f"{point.agents} invalid", color, priority=0)
        answer = scenario(result, slo, agents, workload, "")
        edge = slo_edge(curve, [p.agents for p in bad], slo, gpus)
        said, bound = _answer(answer), _why_bound(answer, edge.past_invalid)
        racks = answer.capacity.racks
        if racks is not None:
            ax.plot([slo.tps], [racks], marker=AT_MOST if bound else CROSSING, markersize=9, color=color,
                    markeredgecolor=REFERENCE, linestyle="none", zorder=4)
            placer.marker(ax, slo.tps, racks, 9)
            placer.label(ax, slo.tps, racks, said, color, priority=0)
            marked = True
        notes = [bound] if bound else []
        if bad:
            notes.append(f"{len(bad)} of {len(result.points)} points invalid")
        if not xs:
            notes.append("no line: " + ("no valid point" if not curve else "one valid point" if len(curve) == 1 else
                                        "the curve crosses no target between valid points"))
        handles.append(Line2D([], [], color=color, linestyle=style, linewidth=2, marker=MET, markersize=4,
                              label=wrapped(f"{label}: {said}" + (f" ({'; '.join(notes)})" if notes else ""),
                                            LEGEND_WIDTH)))
    ax.axvline(slo.tps, color=REFERENCE, linestyle="--", linewidth=1)
    handles += [
        Line2D([], [], color=REFERENCE, linestyle="--", linewidth=1,
               label=f"target {slo.tps:g} tok/s per agent: the plan's answer marked on it"),
        Line2D([], [], color="black", marker=CROSSING, markersize=8, linestyle="none", label="the plan's answer"),
        Line2D([], [], color="black", marker=AT_MOST, markersize=8, linestyle="none",
               label="the plan's answer, a bound: at most this many"),
        Line2D([], [], color="black", marker=MET, markersize=4, linestyle="none",
               label="a valid measured point, at its agents per GPU"),
        Line2D([], [], color="black", marker=INVALID, markersize=8, markerfacecolor="white", linestyle="none",
               label="an invalid point (not a measurement; not planned on)"),
    ]
    unit = "nodes" if any(capacity_for(Operating(1, 1, 1, 1, Bound.within, None, ""), 1, r).rack_kind == "node"
                          for r in results) else "racks"
    ax.set_xlabel("per-agent output speed target (tok/s)")
    ax.set_ylabel(f"{unit} for {agents:,} agents")
    ax.set_title(f"{unit.capitalize()} needed for {agents:,} agents at {slo.tps:g} tok/s per agent "
                 f"(TTFT {slo.percentile} <= {slo.ttft_s:g} s)", fontsize=11)
    if placer.markers:  # a log axis needs something on it: racks span decades between 1 agent and many
        ax.set_yscale("log")
    if not marked:
        ax.text(0.5, 0.5, "no stack meets the target on its valid measured points", transform=ax.transAxes,
                ha="center")
    ax.grid(True, which="both", alpha=0.3)
    ax.margins(0.08, 0.1)
    note = figure.suptitle(caveats(list(results)), fontsize=9)
    below(figure, handles, 1, PLOTS_HEIGHT)
    ax.set_xlim(ax.get_xlim())
    ax.set_ylim(ax.get_ylim())
    placer.line(ax, [slo.tps, slo.tps], list(ax.get_ylim()))
    placer.place()
    if placer.dropped:
        note.set_text(f"{note.get_text()}; {placer.dropped} point label(s) left out for room")
    return figure
