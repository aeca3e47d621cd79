"""Which results may stand side by side in one plan: the same trace, model build, precision and SLO.

Engines are what differs between a launch and a tuned stack, and agent counts are the curve itself,
so neither is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stackpin.bench.result import BenchResult

CHECKED = ("trace_digest", "model", "precision", "slo")


def differing_controls(results: Sequence[tuple[Path, BenchResult]]) -> list[str]:
    """One line per control that differs from the first result's: `field: A.json X, B.json Y`."""
    if not results:
        return []
    (first_path, first), lines = results[0], []
    for field in CHECKED:
        want = getattr(first.controls, field)
        for path, result in results[1:]:
            got = getattr(result.controls, field)
            if got != want:
                lines.append(f"{field}: {first_path} {_show(want)}, {path} {_show(got)}")
    return lines


def _show(value: object) -> str:
    if value is None:
        return "(none)"
    if hasattr(value, "model_dump"):
        return ",".join(f"{k}={v}" for k, v in value.model_dump().items())
    return str(value)
