"""Charts show the evidence (issue 34, part 4): invalid points hollow and labelled where they were measured,
bounds marked `>=`, the SLO edge marked, a stack with one valid point visible and explained, labels that
never overlap (their boxes from the figure's own renderer), a legend off the plots at 100 revisions, and
`plan.png` with the plan's own answer on it."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from stackpin.bench.result import Slo
from stackpin.plan.capacity import make_plan
from stackpin.plan.chart import plan_chart, plan_figure
from stackpin.plan.figure import INVALID, Labeller, new_figure
from stackpin.report.curves import MAX_CURVES, curve_chart, curve_figure, result_label
from stackpin.report.summary import summarise
from tests import benchdata
from tests.busyhost import busy_host, with_invalid

pytest.importorskip("matplotlib")

SLO = Slo(tps=80, ttft_s=10)


def texts(figure: Any) -> list[Any]:
    return [t for ax in figure.axes for t in ax.texts if t.get_text()]


def legend_entries(figure: Any) -> list[str]:
    """The legend's entries, unwrapped (long ones are on several lines)."""
    return [t.get_text().replace("\n  ", " ") for t in figure.legends[0].get_texts()]


def boxes_overlap(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def assert_no_label_overlaps(figure: Any) -> None:
    from matplotlib.text import Text

    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    # The text's own box (an annotation's get_window_extent adds its leader line).
    boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in texts(figure)]
    assert boxes
    for (one, a), (two, b) in itertools.combinations(boxes, 2):
        assert not boxes_overlap(a, b), f"labels overlap: {one!r} {a} and {two!r} {b}"


def assert_legend_off_the_plots(figure: Any) -> None:
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    [legend] = figure.legends
    box = legend.get_window_extent(renderer)
    for ax in figure.axes:
        assert not boxes_overlap(box, ax.get_window_extent(renderer)), "the legend covers a plot"
    assert box.y0 >= 0 and box.x0 >= 0 and box.x1 <= figure.bbox.x1, "the legend runs off the figure"


def test_invalid_points_are_hollow_xs_where_measured_and_labelled() -> None:
    results = busy_host()
    figure = curve_figure([(result_label(summarise(r)), summarise(r)) for r in results], 80, ttft_s=10)
    ax, tx = figure.axes
    for result in results:
        for point in (p for p in result.points if p.invalid):
            speed = min(point.agent_tps_samples)
            drawn = [line for line in ax.lines if line.get_marker() == INVALID
                     and tuple(line.get_xydata()[0]) == pytest.approx((speed, point.output_tps_per_gpu))]
            assert len(drawn) == 1 and drawn[0].get_markerfacecolor() == "white"  # hollow
            said = [t for t in ax.texts if t.get_text() == f"{point.agents} invalid" and
                    tuple(t.xy) == pytest.approx((speed, point.output_tps_per_gpu))]
            assert len(said) == 1
            at = (point.agents / result.stack.gpus, point.ttft_s.p90)  # and beside it, on TTFT against load
            assert [line for line in tx.lines if line.get_marker() == INVALID and
                    tuple(line.get_xydata()[0]) == pytest.approx(at)]
            assert [t for t in tx.texts
                    if t.get_text() == f"{point.agents} invalid" and tuple(t.xy) == pytest.approx(at)]
            # Off the line: the curve joins valid points only.
            curve = [line for line in ax.lines if line.get_marker() in ("None", "", None) and len(line.get_xdata()) > 1]
            assert all(speed not in list(line.get_xdata()) for line in curve)
    assert_no_label_overlaps(figure)
    assert_legend_off_the_plots(figure)


def test_a_stack_with_one_valid_point_is_drawn_and_explained() -> None:
    results = busy_host()
    figure = curve_figure([(result_label(summarise(r)), summarise(r)) for r in results], 80, ttft_s=10)
    entries = legend_entries(figure)
    tuned = next(e for e in entries if e.startswith("gb300-tuned"))
    assert "1 of 6 points valid" in tuned and "one valid point: no line" in tuned
    assert "2 of 6 points valid" in next(e for e in entries if e.startswith("gb300-launch"))
    said = [t.get_text() for t in figure.axes[0].texts]
    assert "1: the only valid point" in said
    assert ">= 1 agents: a bound (crossing past invalid 8, ..., 2048)" in said
    assert "left out" not in figure.get_suptitle()  # no label went missing for room


def test_bounds_and_the_slo_edge_are_marked() -> None:
    # Launch crosses 80 tok/s between 128 (met) and 512 (missed); a curve measured only to 32 agents never crosses.
    short = benchdata.result("short", agents=(1, 8, 32))
    results = [benchdata.launch(), short, with_invalid(benchdata.tuned(), {128})]
    figure = curve_figure([(r.stack.name, summarise(r)) for r in results], 80, ttft_s=10)
    said = [t.get_text() for t in figure.axes[0].texts]
    assert any(s.startswith("SLO edge ~448 agents") for s in said), said
    assert ">= 32 agents: a bound (SLO still met at the largest valid count)" in said
    # Tuned crosses between 512 and 2048 with 128 invalid below: not past it. Past an invalid point it is a bound:
    past = with_invalid(benchdata.tuned(), {512})
    figure = curve_figure([("tuned", summarise(past))], 80, ttft_s=10)
    assert ">= 128 agents: a bound (crossing past invalid 512)" in [t.get_text() for t in figure.axes[0].texts]
    # The edge: rings around the last valid point that met and the first that missed.
    figure = curve_figure([("launch", summarise(benchdata.launch()))], 80, ttft_s=10)
    rings = [tuple(line.get_xydata()[0]) for line in figure.axes[0].lines if line.get_markersize() > 10]
    curve = summarise(benchdata.launch()).curve("p90")
    by_agents = {p.agents: (p.speed, p.tps_per_gpu) for p in curve}
    assert sorted(rings) == sorted([by_agents[128], by_agents[512]])


def test_no_two_labels_overlap_even_when_points_crowd() -> None:
    # Eight curves of near-identical stacks: their points and labels all want the same pixels.
    results = [(f"rev {i}", summarise(benchdata.result(f"stack-{i % 3}", single=596 + 4 * i, knee=60 + i)))
               for i in range(12)]
    figure = curve_figure(results, 80, ttft_s=10)
    assert_no_label_overlaps(figure)
    assert_legend_off_the_plots(figure)


def test_labeller_never_places_two_boxes_on_each_other() -> None:
    figure = new_figure(4, 3)
    ax = figure.add_subplot()
    ax.plot([0, 1], [0, 1])
    placer = Labeller(figure)
    for i in range(40):  # forty labels at nearly one point: those that fit go around it, the rest are counted
        placer.label(ax, 0.5 + i * 1e-4, 0.5, f"label {i}", "black")
    placer.place()
    assert_no_label_overlaps(figure)
    assert len(ax.texts) + placer.dropped == 40 and placer.dropped > 0


def test_at_100_revisions_the_newest_are_drawn_and_the_legend_stays_off_the_plots() -> None:
    result = summarise(benchdata.launch())
    results = [(f"rev {n}: {result_label(result)}", result) for n in range(1, 101)]
    figure = curve_figure(results, 80, ttft_s=10)
    assert f"the newest {MAX_CURVES} of 100 results drawn; {100 - MAX_CURVES} older not drawn" in \
        figure.axes[0].get_title()
    entries = legend_entries(figure)
    assert [e.split(":")[0] for e in entries if e.startswith("rev ")] == [f"rev {n}" for n in range(93, 101)]
    assert_legend_off_the_plots(figure)
    assert_no_label_overlaps(figure)
    width, height = figure.get_size_inches()
    assert width == 12 and height < 8  # the legend adds its rows, bounded by MAX_CURVES


def test_the_charts_are_deterministic() -> None:
    results = [(r.stack.name, summarise(r)) for r in busy_host()]
    assert curve_chart(results, 80, ttft_s=10) == curve_chart(results, 80, ttft_s=10)
    plain = busy_host()
    assert plan_chart(plain, ["a", "b", "c"], 10_000, SLO) == plan_chart(plain, ["a", "b", "c"], 10_000, SLO)


def test_plan_chart_shows_the_plans_own_answer(tmp_path: Path) -> None:
    results = [benchdata.launch(), benchdata.rubin(), benchdata.result("short", agents=(1, 8, 32))]
    plan = make_plan([(tmp_path / f"{i}.json", r) for i, r in enumerate(results)], 10_000, SLO)
    figure = plan_figure(results, [r.stack.name for r in results], 10_000, SLO)
    said = [t.get_text() for t in figure.axes[0].texts]
    entries = legend_entries(figure)
    for stack in plan.stacks:
        cap, op = stack.current.capacity, stack.current.operating
        most = "<= " if op.bound.value == "at-least" else ""
        answer = f"{most}{cap.racks:,} racks, {most}{cap.gpus:,} GPUs"
        assert answer in said, (answer, said)  # written beside its marker on the target's line
        assert any(e.startswith(f"{stack.stack}: {answer}") for e in entries), entries
    assert any("a bound: the SLO still held at the largest valid count" in e for e in entries)
    assert_no_label_overlaps(figure)
    assert_legend_off_the_plots(figure)


def test_plan_chart_draws_every_legend_entry_and_labels_invalid_points() -> None:
    results = busy_host()
    figure = plan_figure(results, [r.stack.name for r in results], 10_000, SLO)
    ax = figure.axes[0]
    for result in results:  # every stack has something drawn in its colour: no legend entry without a mark
        color = next(h for h in figure.legends[0].legend_handles if h.get_label().startswith(result.stack.name))
        assert any(line.get_color() == color.get_color() and len(line.get_xdata()) for line in ax.lines)
    said = [t.get_text() for t in ax.texts]
    for result in results:
        for point in (p for p in result.points if p.invalid):
            assert f"{point.agents} invalid" in said
    entries = legend_entries(figure)
    assert any("5 of 6 points invalid" in e and "no line: one valid point" in e for e in entries), entries
    assert_no_label_overlaps(figure)
    assert_legend_off_the_plots(figure)
