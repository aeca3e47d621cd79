"""`stackpin bench plot`: throughput per GPU against per-agent speed, one line per result, the SLO marked.

Per-agent speed is the slowest agent's (what an SLO every agent must hold is judged on), so the x axis
is the one `stackpin plan` interpolates on; each point is labelled with its agent count.
"""

from __future__ import annotations

from collections.abc import Sequence

from stackpin.bench.result import BenchResult
from stackpin.plan.curve import curve_of
from stackpin.plan.figure import PALETTE, new_figure, png_bytes


def result_label(result: BenchResult) -> str:
    sim = f", simulated: {result.simulation.model}" if result.simulation else ""
    return f"{result.stack.name} ({result.stack.platform}{sim})"


def curve_chart(results: Sequence[tuple[str, BenchResult]], slo_tps: float | None, percentile: str = "p90",
                title: str = "Throughput per GPU against per-agent speed") -> bytes:
    """PNG bytes; `results` are (label, result). Same inputs, same bytes."""
    figure = new_figure()
    ax = figure.add_subplot()
    for i, (label, result) in enumerate(results):
        curve = curve_of(result, percentile)
        color = PALETTE[i % len(PALETTE)]
        xs, ys = [p.speed for p in curve], [p.tps_per_gpu for p in curve]
        ax.plot(xs, ys, marker="o", color=color, linewidth=2, label=label)
        for p in curve:
            ax.annotate(str(p.agents), (p.speed, p.tps_per_gpu), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=color)
    if slo_tps is not None:
        ax.axvline(slo_tps, color="black", linestyle="--", linewidth=1, label=f"SLO {slo_tps:g} tok/s per agent")
    ax.set_xlabel("per-agent output speed, slowest agent (tok/s)")
    ax.set_ylabel("output throughput per GPU (tok/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    return png_bytes(figure)


def slo_speed(results: Sequence[BenchResult]) -> float | None:
    """The SLO speed the results were benched under, when they agree on one."""
    speeds = {r.controls.slo.tps for r in results if r.controls.slo is not None}
    return speeds.pop() if len(speeds) == 1 else None
