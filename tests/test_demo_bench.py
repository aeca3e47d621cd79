"""stackpin.demo.bench: the measured column of the demo's ratio table (published vs model vs measured)
is read off the bench results the way `stackpin plan` reads a curve: interpolated, a bound where a
curve is still met at its largest count, nothing where it is not reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackpin.bench.result import BenchResult, Score
from stackpin.demo.bench import _measured
from tests.benchdata import exact, write


def _scored(result: BenchResult, single: float) -> BenchResult:
    return result.model_copy(update={"score": Score(max_agents=1, single_agent_tps=single)})


@pytest.fixture
def results(tmp_path: Path) -> dict[str, Path]:
    # (agents, every agent's tok/s, TTFT p90 s, tok/s per GPU)
    curves = {
        "gb300-launch": _scored(exact("gb300-launch", [(1, 600, 0.1, 10), (64, 100, 1, 200), (128, 60, 2, 240)]), 600),
        "gb300-tuned": _scored(exact("gb300-tuned", [(1, 840, 0.1, 20), (64, 300, 1, 500), (128, 100, 2, 900)]), 840),
        "vera-rubin-tuned": _scored(exact("vera-rubin-tuned", [(1, 1260, 0.1, 30), (64, 400, 1, 1000)],
                                          platform="vera-rubin-nvl72"), 1260),
    }
    paths = {}
    for name, result in curves.items():
        paths[name] = tmp_path / f"{name}.json"
        write(result, paths[name])
    return paths


def test_ratios_are_interpolated_bounded_or_left_out(results: dict[str, Path]) -> None:
    measured = _measured(results)
    assert measured["GB300 tuned / launch, single agent"] == "1.400"
    # launch crosses 80 tok/s halfway between 64 and 128 agents (220/GPU); tuned is still above 80 at 128:
    # its figure is a lower bound (900/GPU at least), so the ratio is one too.
    assert measured["GB300 tuned / launch, throughput per GPU at 80 tok/s per agent"] == f">={900 / 220:.3f}"
    # At 260 tok/s: tuned crosses between 64 and 128 agents (300 -> 100: a fifth of the way, 580/GPU);
    # Vera Rubin holds 400 at 64, its largest count: a lower bound over an exact value.
    assert measured["Vera Rubin / GB300 tuned, throughput per GPU at 260 tok/s per agent"] == f">={1000 / 580:.3f}"
    # A bound over a bound says nothing: left out.
    assert "Vera Rubin / GB300 tuned, throughput per GPU at 80 tok/s per agent" not in measured
