"""The search's chart: predicted tok/s per GPU against tok/s per agent at the SLO, every candidate that meets it
(grey), the Pareto front (a line), the base and the picks named; drawn as every stackpin chart is
(stackpin.plan.figure: Agg, deterministic PNG bytes, the colour-blind-safe palette, labels that never overlap)."""

from __future__ import annotations

from stackpin.plan.figure import PALETTE, REFERENCE, Labeller, new_figure, png_bytes
from stackpin.search.report import predicted_label
from stackpin.search.run import SearchResult


def search_chart(r: SearchResult) -> bytes:
    figure = new_figure(8.0, 5.5)
    ax = figure.add_subplot()
    met = [s.prediction for s in r.survivors if s.meets and s.prediction is not None]
    xs = [p.agent_tps for p in met if p is not None]
    ys = [p.tps_per_gpu for p in met if p is not None]
    ax.scatter(xs, ys, s=10, color=PALETTE[6], alpha=0.4, label="meets the SLO")
    front = sorted((p for i in r.front if (p := r.survivors[i].prediction) is not None), key=lambda p: p.agent_tps)
    ax.plot([p.agent_tps for p in front], [p.tps_per_gpu for p in front], "-o", color=PALETTE[0], markersize=5,
            label="Pareto front")
    ax.axvline(r.slo.tps, color=REFERENCE, linestyle="--", linewidth=1, label=f"SLO {r.slo.tps:g} tok/s per agent")
    labels = Labeller(figure)
    labels.line(ax, [p.agent_tps for p in front], [p.tps_per_gpu for p in front])
    base = r.base_scored
    if base is not None and base.prediction is not None and base.prediction.meets:
        p = base.prediction
        ax.scatter([p.agent_tps], [p.tps_per_gpu], s=60, marker="s", color=PALETTE[1], label="base", zorder=3)
        labels.marker(ax, p.agent_tps, p.tps_per_gpu)
        labels.label(ax, p.agent_tps, p.tps_per_gpu, f"base {r.base_name}", PALETTE[1], priority=0)
    for pick in r.picks:
        if (picked := pick.scored.prediction) is None:
            continue
        p = picked
        ax.scatter([p.agent_tps], [p.tps_per_gpu], s=60, marker="D", color=PALETTE[2], zorder=3)
        labels.marker(ax, p.agent_tps, p.tps_per_gpu)
        labels.label(ax, p.agent_tps, p.tps_per_gpu, f"pick {pick.rank}: TTFT {p.ttft_s:.2f} s", PALETTE[2], priority=0)
    ax.set_xlabel("tok/s per agent at the operating point")
    ax.set_ylabel("output tok/s per GPU")
    ax.set_title(f"{r.base_name}: {r.racks} rack(s), SLO tps={r.slo.tps:g}, ttft={r.slo.ttft_s:g}s\n"
                 f"{predicted_label(r.model)}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    labels.place()
    return png_bytes(figure)
