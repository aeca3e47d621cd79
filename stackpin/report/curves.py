"""`stackpin bench plot` and the report's chart: throughput per GPU against per-agent speed, one line per
result, and TTFT against agents per GPU beside it.

Per-agent speed is the slowest agent's (what an SLO every agent must hold is judged on), so the x axis
is the one `stackpin plan` interpolates on. Each valid point is labelled with its agent count, filled
where it held the SLO, hollow where it missed; an invalid point (not a measurement) is a hollow X where
it was measured, off the line, labelled "N invalid"; the SLO edge of each curve (the last valid point
that met it, the first that missed) is ringed, the crossing between them marked, and a curve that never
crossed says ">= N agents". The legend sits below the plots, never on them; past MAX_CURVES results the
newest are drawn and the chart says how many are not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from stackpin.bench.result import Slo
from stackpin.plan.curve import Bound, CurvePoint
from stackpin.report.summary import ResultSummary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Percentile = Literal["p50", "p90", "p99"]
MAX_CURVES = 8  # curves drawn on one chart: past this, lines and labels stop being legible
LEGEND_COLUMNS = 2
LEGEND_WIDTH = 80  # characters an entry's line holds: two columns fit the figure's width
PLOTS_HEIGHT = 4.6  # inches above the legend


def result_label(result: ResultSummary) -> str:
    sim = f", simulated: {result.simulation.model}" if result.simulation else ""
    return f"{result.stack.name} ({result.stack.platform}{sim})"


def curve_chart(results: Sequence[tuple[str, ResultSummary]], slo_tps: float | None, percentile: Percentile = "p90",
                title: str = "Throughput per GPU against per-agent speed", ttft_s: float | None = None) -> bytes:
    """PNG bytes of curve_figure. Same inputs, same bytes."""
    from stackpin.plan.figure import png_bytes

    return png_bytes(curve_figure(results, slo_tps, percentile, title, ttft_s))


def curve_figure(results: Sequence[tuple[str, ResultSummary]], slo_tps: float | None, percentile: Percentile = "p90",
                 title: str = "Throughput per GPU against per-agent speed", ttft_s: float | None = None) -> Figure:
    """`results` are (label, summary), oldest first: the last MAX_CURVES are drawn. Left: throughput per
    GPU against the slowest agent's speed. Right: TTFT at `percentile` against agents per GPU, the TTFT
    limit drawn."""
    from stackpin.extras import require

    require("plot")  # a missing extra is named, before matplotlib is imported
    from matplotlib.lines import Line2D

    from stackpin.plan.figure import (
        CROSSING,
        INVALID,
        MET,
        REFERENCE,
        RING_SIZE,
        Labeller,
        below,
        caveats,
        curve_styles,
        key_handles,
        new_figure,
        slo_edge,
        wrapped,
    )

    drawn = list(results)[-MAX_CURVES:]
    hidden = len(results) - len(drawn)
    slo = Slo(tps=slo_tps, ttft_s=ttft_s or math.inf, percentile=percentile) if slo_tps is not None else None
    handles: list[object] = []
    figure = new_figure(12.0, PLOTS_HEIGHT)
    ax, tx = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    labels = Labeller(figure)
    styles = curve_styles([summary.stack.name for _, summary in drawn])
    for (label, summary), (color, style) in zip(drawn, styles, strict=True):
        curve = summary.curve(percentile)
        gpus = summary.stack.gpus
        said = label if not summary.invalid else f"{label}: {summary.valid} of {summary.points} points valid"
        if len(curve) == 1:
            said += " (one valid point: no line)"
        elif not curve:
            said += " (no valid point)"
        handles.append(Line2D([], [], color=color, linestyle=style, linewidth=2, marker=MET,
                              label=wrapped(said, LEGEND_WIDTH)))
        for axes, xs, ys in ((ax, [p.speed for p in curve], [p.tps_per_gpu for p in curve]),
                             (tx, [p.agents / gpus for p in curve], [p.ttft_s for p in curve])):
            axes.plot(xs, ys, color=color, linestyle=style, linewidth=2)
            labels.line(axes, xs, ys)
        edge = slo_edge(curve, [p.agents for p in summary.invalid], slo, gpus) if slo else None
        for p in curve:
            met = _met(p, slo_tps, ttft_s)
            face = color if met else "white"
            for axes, x, y in ((ax, p.speed, p.tps_per_gpu), (tx, p.agents / gpus, p.ttft_s)):
                axes.plot([x], [y], marker=MET, color=color, markerfacecolor=face, linestyle="none", zorder=3)
                labels.marker(axes, x, y)
            if len(curve) == 1:
                labels.label(ax, p.speed, p.tps_per_gpu, f"{p.agents}: the only valid point", color, priority=0)
            else:
                labels.label(ax, p.speed, p.tps_per_gpu, str(p.agents), color)
        for bad in summary.invalid:
            for axes, x, y in ((ax, bad.speed, bad.tps_per_gpu), (tx, bad.agents / gpus, bad.ttft_s[percentile])):
                axes.plot([x], [y], marker=INVALID, markersize=8, color=color, markerfacecolor="white",
                          linestyle="none", zorder=3)
                labels.marker(axes, x, y, 8)
                labels.label(axes, x, y, f"{bad.agents} invalid", color, priority=0)
        if edge is None:
            continue
        for ringed in (edge.last_met, edge.first_missed):
            if ringed is not None:
                ax.plot([ringed.speed], [ringed.tps_per_gpu], marker=MET, markersize=RING_SIZE, markerfacecolor="none",
                        markeredgecolor=REFERENCE, markeredgewidth=0.8, linestyle="none", zorder=2)
                labels.marker(ax, ringed.speed, ringed.tps_per_gpu, RING_SIZE)
        op = edge.operating
        if edge.last_met is None:
            if edge.first_missed is not None:
                labels.label(ax, edge.first_missed.speed, edge.first_missed.tps_per_gpu, edge.text, color, priority=0)
        elif edge.bound:
            labels.label(ax, edge.last_met.speed, edge.last_met.tps_per_gpu, edge.text, color, priority=0)
        elif op.bound is Bound.within:
            ax.plot([op.speed], [op.tps_per_gpu], marker=CROSSING, color=color, markerfacecolor="white",
                    linestyle="none", zorder=4)
            labels.marker(ax, op.speed, op.tps_per_gpu)
            labels.label(ax, op.speed, op.tps_per_gpu, edge.text, color, priority=0)
    if slo_tps is not None:
        ax.axvline(slo_tps, color=REFERENCE, linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color=REFERENCE, linestyle="--", linewidth=1,
                              label=f"SLO {slo_tps:g} tok/s per agent (left)"))
    if ttft_s is not None:
        tx.axhline(ttft_s, color=REFERENCE, linestyle=":", linewidth=1)
        handles.append(Line2D([], [], color=REFERENCE, linestyle=":", linewidth=1,
                              label=f"TTFT limit {ttft_s:g} s (right)"))
    handles += key_handles(edge=slo is not None)
    ax.set_xlabel("per-agent output speed, slowest agent (tok/s)")
    ax.set_ylabel("output throughput per GPU (tok/s)")
    shown = f"\nthe newest {len(drawn)} of {len(results)} results drawn; {hidden} older not drawn" if hidden else ""
    ax.set_title(title + shown, fontsize=10)
    tx.set_xlabel("agents per GPU")
    tx.set_ylabel(f"TTFT {percentile} (s)")
    tx.set_title("TTFT against load", fontsize=10)
    for axes in (ax, tx):
        axes.grid(True, alpha=0.3)
        axes.margins(0.1, 0.12)  # room inside the axes for the labels of the outermost points
    note = figure.suptitle(caveats([s for _, s in drawn]), fontsize=9)
    below(figure, handles, LEGEND_COLUMNS, PLOTS_HEIGHT)
    for axes in (ax, tx):  # limits fixed before labels are placed in their pixels
        axes.set_xlim(axes.get_xlim())
        axes.set_ylim(axes.get_ylim())
    if slo_tps is not None:
        labels.line(ax, [slo_tps, slo_tps], list(ax.get_ylim()))
    if ttft_s is not None:
        labels.line(tx, list(tx.get_xlim()), [ttft_s, ttft_s])
    labels.place()
    if labels.dropped:
        note.set_text(f"{note.get_text()}; {labels.dropped} point label(s) left out for room")
    return figure


def _met(point: CurvePoint, slo_tps: float | None, ttft_s: float | None) -> bool:
    return (point.errors == 0 and (slo_tps is None or point.speed >= slo_tps)
            and (ttft_s is None or point.ttft_s <= ttft_s))


def slo_speed(results: Sequence[ResultSummary]) -> float | None:
    """The SLO speed the results were benched under, when they agree on one."""
    speeds = {r.slo.tps for r in results if r.slo is not None}
    return speeds.pop() if len(speeds) == 1 else None


def slo_ttft(results: Sequence[ResultSummary]) -> float | None:
    """The TTFT limit the results were benched under, when they agree on one."""
    limits = {r.slo.ttft_s for r in results if r.slo is not None}
    return limits.pop() if len(limits) == 1 else None
