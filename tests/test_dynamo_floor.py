"""The Dynamo bed's plan says where Dynamo 1.6.1's mocker cannot follow the lock: it floors a decode step at
1 ms (stackpin/sim/dynamo.yaml, from its perf_model.rs), so a stack that decodes faster (Vera Rubin, tuned:
under 1 ms per token at batch 1) is served slower than its lock, and the plan states the figures. No bed is
started here; tests/test_dynamo_bed.py measures the floor on the real mocker."""

from __future__ import annotations

import pytest

from stackpin.sim.dynamo import facts, plan
from tests.lockkit import shipped_locks

LOCKS = shipped_locks()


def _fastest_decode(name: str) -> float:
    """The fastest decode step on the mocker's grid over the pools that decode (not a prefill pool)."""
    bed = plan(LOCKS[name])
    return min(v for m in bed.mockers if m.role != "prefill" for row in m.table.decode_itl for v in row)


def test_the_floor_is_the_pinned_releases() -> None:
    assert facts()["version"] == "1.6.1" and facts()["mocker"]["decode_floor_ms"] == 1.0


def test_a_stack_under_the_floor_is_named_with_its_figures() -> None:
    bed = plan(LOCKS["vera-rubin-tuned"])
    [slow] = bed.floored
    assert slow.role == "worker" and slow.floor_ms == 1.0
    assert slow.fastest_ms == pytest.approx(_fastest_decode("vera-rubin-tuned")) and slow.fastest_ms < 1.0
    assert slow.slower[0][0] == 1 and slow.slower[0][1] == pytest.approx(1 - slow.fastest_ms)  # batch 1: the fastest
    line = slow.describe("1.6.1")
    assert line in bed.substitutions  # GET /stackpin/sim, and so every bench result of it, carries it
    assert f"{slow.fastest_ms:.3f} ms per token (batch 1)" in line and "floors a decode step at 1 ms" in line
    assert f"~{1 - slow.fastest_ms:.0%} slower per token" in line and f"batch 1 ~{1 - slow.fastest_ms:.0%}" in line


def test_a_disaggregated_stack_is_judged_by_its_decode_pool() -> None:
    bed = plan(LOCKS["vera-rubin-disagg-wide-ep"], share=2)
    assert [s.role for s in bed.floored] == ["decode"]  # its prefill pool hands every request on after one token
    assert bed.floored[0].fastest_ms == pytest.approx(_fastest_decode("vera-rubin-disagg-wide-ep"))


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_only_a_stack_under_the_floor_says_so(name: str) -> None:
    bed = plan(LOCKS[name])
    under = _fastest_decode(name) < 1.0
    assert bool(bed.floored) == under
    assert any("floors a decode step" in s for s in bed.substitutions) == under
    if name.startswith("gb"):
        assert not under  # the GB200/GB300 stacks decode slower than 1 ms a token: nothing to say


def test_speed_moves_both_the_steps_and_the_floor() -> None:
    """--speed divides the mocker's step after the floor (measured: docs/sim.md): the share lost stays."""
    assert plan(LOCKS["vera-rubin-tuned"], speed=4).floored == plan(LOCKS["vera-rubin-tuned"]).floored
