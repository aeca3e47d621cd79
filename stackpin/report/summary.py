"""What a chart or the report keeps of a bench result: its curve, its invalid points and their causes, its
stack and SLO; not its request logs.

A result file is read and verified whole (stackpin.bench.resultfile.read_result checks every figure
against the request log it summarises, so an edited number never reaches the page), summarised, and
dropped before the next one is read: a history of 1,000 results costs the memory of one result plus
1,000 summaries of a few kilobytes, not 1,000 results (about 14 MiB of request logs each).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stackpin.bench.result import BenchResult, Simulation, Slo, StackRef
from stackpin.plan.curve import CurvePoint, curve_of
from stackpin.plan.figure import InvalidPoint, invalid_points

PERCENTILES = ("p50", "p90", "p99")


@dataclass(frozen=True)
class ResultSummary:
    stack: StackRef
    simulation: Simulation | None
    slo: Slo | None  # what it was benched under (controls.slo)
    saturated: bool
    interrupted: bool
    points: int  # every point in the file, valid or not
    curves: Mapping[str, tuple[CurvePoint, ...]]  # percentile -> curve_of: the valid points that served requests
    invalid: tuple[InvalidPoint, ...]

    @property
    def valid(self) -> int:
        """Points that are measurements: the ones counted, compared and planned on."""
        return self.points - len(self.invalid)

    def curve(self, percentile: str) -> list[CurvePoint]:
        return list(self.curves[percentile])


def summarise(result: BenchResult) -> ResultSummary:
    return ResultSummary(stack=result.stack, simulation=result.simulation, slo=result.controls.slo,
                         saturated=result.client.saturated, interrupted=result.interrupted,
                         points=len(result.points), curves={q: tuple(curve_of(result, q)) for q in PERCENTILES},
                         invalid=invalid_points(result))


def read_summary(path: Path) -> ResultSummary:
    """The file read and verified in full (read_result), summarised; the result itself is let go here."""
    from stackpin.bench.resultfile import read_result

    return summarise(read_result(path))
