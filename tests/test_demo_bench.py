"""stackpin.demo.bench: the measured column of the demo's figure table is read the way the step model
reads its curve (issue 20: like with like): inside each point's steady window, the mean agent's speed
and the window's throughput per GPU where that speed crosses the figure's; the largest batch the
engines run where it never does; a bound, said in words, where the run stopped short of both."""

from __future__ import annotations

from stackpin.bench.result import BenchResult, ClientInfo, Request, StackRef
from stackpin.bench.stats import build_point
from stackpin.demo.bench import DURATION_S, _measured, cap
from tests.benchdata import controls, exact


def _steady(name: str, gpus: int, rows: list[tuple[int, int]]) -> BenchResult:
    """A result whose every agent generates at exactly `speed` tok/s for the whole point."""
    points = []
    for agents, speed in rows:
        requests = [Request(agent=a, session=f"s{a}", turn=0, start_s=0.0, ttft_s=0.0, end_s=DURATION_S,
                            output_tokens=int(speed * DURATION_S) + 1) for a in range(agents)]
        points.append(build_point(agents, DURATION_S, requests, gpus, None))
    base = exact(name, [(1, 1, 1, 1)])
    return base.model_copy(update={
        "stack": StackRef(digest="sha256:" + "0" * 64, name=name, platform=base.stack.platform, gpus=gpus),
        "controls": controls(agents=tuple(a for a, _ in rows)), "points": tuple(points),
        "client": ClientInfo(workers=1, cpu_seconds=1.0, saturated=False)})


def test_figures_are_read_as_the_model_reads_its_curve() -> None:
    assert (cap("gb300-launch"), cap("gb300-tuned"), cap("vera-rubin-tuned")) == (448, 64, 64)
    loaded = {
        # Crosses 80 tok/s halfway between 64 and 128 agents.
        "gb300-launch": _steady("gb300-launch", 36, [(1, 600), (64, 100), (128, 60)]),
        # Never falls to 80, but ran past the 64 its engine decodes at once: the plateau is measured.
        "gb300-tuned": _steady("gb300-tuned", 4, [(1, 840), (48, 120), (96, 95)]),
        # Never falls to 80 and stopped at 32 of its 64: only a lower bound.
        "vera-rubin-tuned": _steady("vera-rubin-tuned", 4, [(1, 1260), (32, 300)]),
    }
    measured, words = _measured(loaded)
    single = measured["GB300 tuned / launch, single agent"]
    assert (round(single.value, 6), single.bound) == (1.4, "")
    launch_at_80 = (64 * 100 / 36 + 128 * 60 / 36) / 2
    ratio = measured["GB300 tuned / launch, throughput per GPU at 80 tok/s per agent"]
    assert (round(ratio.value, 6), ratio.bound) == (round(96 * 95 / 4 / launch_at_80, 6), "")
    # Vera Rubin's lower bound over tuned's exact value: a lower bound, and said in words.
    rubin = measured["Vera Rubin / GB300 tuned, throughput per GPU at 80 tok/s per agent"]
    assert (round(rubin.value, 6), rubin.bound) == (round(32 * 300 / 4 / (96 * 95 / 4), 6), ">=")
    assert any("vera-rubin-tuned still held 80 tok/s per agent at 32 agents" in w and "up to 64" in w for w in words)
    assert not any("gb300-tuned still held" in w for w in words)


def test_a_bound_over_a_bound_is_left_out() -> None:
    loaded = {"gb300-launch": _steady("gb300-launch", 36, [(1, 600), (64, 100)]),
              "gb300-tuned": _steady("gb300-tuned", 4, [(1, 840), (32, 150)])}
    measured, words = _measured(loaded)
    assert "GB300 tuned / launch, throughput per GPU at 80 tok/s per agent" not in measured
    assert len(words) == 2
