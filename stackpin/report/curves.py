"""`stackpin bench plot`: throughput per GPU against per-agent speed, one line per result, the SLO marked.

Per-agent speed is the slowest agent's (what an SLO every agent must hold is judged on), so the x axis
is the one `stackpin plan` interpolates on; each point is labelled with its agent count.
"""

from __future__ import annotations

from collections.abc import Sequence

from stackpin.bench.result import BenchResult
from stackpin.plan.curve import CurvePoint, curve_of
from stackpin.plan.figure import new_figure, png_bytes


def result_label(result: BenchResult) -> str:
    sim = f", simulated: {result.simulation.model}" if result.simulation else ""
    return f"{result.stack.name} ({result.stack.platform}{sim})"


def curve_chart(results: Sequence[tuple[str, BenchResult]], slo_tps: float | None, percentile: str = "p90",
                title: str = "Throughput per GPU against per-agent speed", ttft_s: float | None = None) -> bytes:
    """PNG bytes; `results` are (label, result). Left: throughput per GPU against the slowest agent's speed,
    each point labelled with its agent count, filled where it held the SLO, hollow where it missed. Right:
    TTFT at the SLO's percentile against agents per GPU, the TTFT limit drawn. Same inputs, same bytes."""
    from stackpin.plan.figure import caveats, stack_color

    figure = new_figure(12.0, 5.0)
    ax, tx = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    taken: set[str] = set()
    for label, result in results:
        curve = curve_of(result, percentile)  # sorted by agent count: no zig-zag from the search's order
        color = stack_color(result.stack.name, taken)
        taken.add(color)
        xs, ys = [p.speed for p in curve], [p.tps_per_gpu for p in curve]
        ax.plot(xs, ys, color=color, linewidth=2, label=label)
        for p in curve:
            met = _met(p, slo_tps, ttft_s)
            ax.plot([p.speed], [p.tps_per_gpu], marker="o", color=color, markerfacecolor=color if met else "white")
            ax.annotate(str(p.agents), (p.speed, p.tps_per_gpu), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=color)
        per_gpu = [p.agents / result.stack.gpus for p in curve]
        tx.plot(per_gpu, [p.ttft_s for p in curve], marker="o", color=color, linewidth=2, label=result.stack.name)
    if slo_tps is not None:
        ax.axvline(slo_tps, color="black", linestyle="--", linewidth=1, label=f"SLO {slo_tps:g} tok/s per agent")
    if ttft_s is not None:
        tx.axhline(ttft_s, color="black", linestyle="--", linewidth=1, label=f"TTFT limit {ttft_s:g} s")
    ax.set_xlabel("per-agent output speed, slowest agent (tok/s)")
    ax.set_ylabel("output throughput per GPU (tok/s)")
    ax.set_title(title + "\n(filled: SLO met; hollow: missed)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    tx.set_xlabel("agents per GPU")
    tx.set_ylabel(f"TTFT {percentile} (s)")
    tx.set_title("TTFT against load", fontsize=10)
    tx.grid(True, alpha=0.3)
    tx.legend(loc="upper left", fontsize=8)
    figure.supxlabel(caveats([r for _, r in results]), fontsize=8)
    return png_bytes(figure)


def _met(point: CurvePoint, slo_tps: float | None, ttft_s: float | None) -> bool:
    return (point.errors == 0 and (slo_tps is None or point.speed >= slo_tps)
            and (ttft_s is None or point.ttft_s <= ttft_s))


def slo_speed(results: Sequence[BenchResult]) -> float | None:
    """The SLO speed the results were benched under, when they agree on one."""
    speeds = {r.controls.slo.tps for r in results if r.controls.slo is not None}
    return speeds.pop() if len(speeds) == 1 else None


def slo_ttft(results: Sequence[BenchResult]) -> float | None:
    """The TTFT limit the results were benched under, when they agree on one."""
    limits = {r.controls.slo.ttft_s for r in results if r.controls.slo is not None}
    return limits.pop() if len(limits) == 1 else None
