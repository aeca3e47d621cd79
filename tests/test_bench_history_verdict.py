"""bench_history.py's linearity verdict (issue 36): no false "NOT met" from a near-zero per-revision cost,
and a listing that grows faster than the number of revisions still fails it."""

from __future__ import annotations

import runpy
from pathlib import Path

linearity = runpy.run_path(str(Path(__file__).resolve().parent.parent / "bench" / "bench_history.py"),
                           run_name="not_main")["linearity"]


def test_near_zero_costs_above_start_up_are_not_a_ratio() -> None:
    # Cached listings: 100 revisions 2 ms above start-up, 1,000 revisions 40 ms above it. The old check read
    # (40/999) / (2/99) = 2.0x "NOT met"; the time is within noise of start-up.
    met, line = linearity({1: [300.0, 310.0, 305.0], 100: [307.0, 306.0, 308.0], 1000: [345.0, 344.0, 346.0]})
    assert met and "within noise of start-up" in line and "met" in line


def test_linear_growth_is_met_with_the_ratio_side_by_side() -> None:
    met, line = linearity({1: [300.0] * 3, 100: [500.0] * 3, 1000: [2290.0] * 3})
    assert met and "per-revision 1,000 vs 100: 0.99x" in line


def test_growth_faster_than_linear_is_not_met() -> None:
    met, line = linearity({1: [300.0] * 3, 100: [500.0] * 3, 1000: [4000.0] * 3})
    assert not met and line.endswith("NOT met")


def test_a_noisy_start_up_widens_the_allowance() -> None:
    # 100 revisions cost nothing above start-up; 1,000 cost 150 ms: beyond the 30 ms floor, within a
    # start-up that itself moved by 200 ms.
    assert not linearity({1: [300.0] * 3, 100: [300.0] * 3, 1000: [450.0] * 3})[0]
    assert linearity({1: [200.0, 300.0, 400.0], 100: [300.0] * 3, 1000: [450.0] * 3})[0]
