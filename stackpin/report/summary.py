"""What a chart or the report keeps of a bench result: its curve, its invalid points and their causes, its
stack and SLO; not its request logs.

A result file is read and verified whole (stackpin.bench.resultfile.read_result checks every figure
against the request log it summarises, so an edited number never reaches the page), summarised, and
dropped before the next one is read: a history of 1,000 results costs the memory of one result plus
1,000 summaries of a few kilobytes, not 1,000 results (about 14 MiB of request logs each).

Reading and verifying a measured run's result takes about half a second, every time. A result never
changes, so the summary of bytes that verified once is kept in the user's cache (as the history keeps
the revisions it verified: stackpin/history/verified.py, `$STACKPIN_CACHE_DIR`, empty for none), keyed by
the sha256 of the file: a later report hashes the file and takes the summary from there. Any other bytes
miss and are read and verified in full, so an edited or replaced result is caught exactly as without
the cache. An entry from another stackpin, or unreadable, is ignored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import stackpin.jsonio as jsonio
from stackpin.bench.result import BenchResult, Simulation, Slo, StackRef
from stackpin.plan.curve import CurvePoint, curve_of
from stackpin.plan.figure import InvalidPoint, invalid_points
from stackpin.version import __version__

PERCENTILES = ("p50", "p90", "p99")
# Bumped when what a summary holds, or how it is computed from a result, changes: older entries are not used.
RULES = 1
MAX_ENTRY_BYTES = 1024 * 1024


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

    def data(self) -> dict[str, Any]:
        """Plain JSON data; `from_data` reads it back (TypeError, ValueError or KeyError when malformed)."""
        return {"stack": self.stack.model_dump(mode="json"),
                "simulation": self.simulation.model_dump(mode="json") if self.simulation else None,
                "slo": self.slo.model_dump(mode="json") if self.slo else None, "saturated": self.saturated,
                "interrupted": self.interrupted, "points": self.points,
                "curves": {q: [[p.agents, p.speed, p.ttft_s, p.tps_per_gpu, p.errors] for p in curve]
                           for q, curve in self.curves.items()},
                "invalid": [[p.agents, p.speed, p.tps_per_gpu, p.ttft_s, p.cause] for p in self.invalid]}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ResultSummary:
        def number(value: object) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError("not a number")
            return float(value)

        def count(value: object) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError("not a count")
            return value

        def flag(value: object) -> bool:
            if not isinstance(value, bool):
                raise TypeError("not a flag")
            return value

        if set(data["curves"]) != set(PERCENTILES):
            raise KeyError("curves")
        curves = {q: tuple(CurvePoint(count(a), number(s), number(t), number(g), count(e))
                           for a, s, t, g, e in data["curves"][q]) for q in PERCENTILES}
        invalid = []
        for a, s, g, ttft, cause in data["invalid"]:
            if not isinstance(cause, str) or set(ttft) != set(PERCENTILES):
                raise TypeError("not an invalid point")
            invalid.append(InvalidPoint(count(a), number(s), number(g), {q: number(ttft[q]) for q in PERCENTILES},
                                        cause))
        return cls(stack=StackRef.model_validate(data["stack"]),
                   simulation=None if data["simulation"] is None else Simulation.model_validate(data["simulation"]),
                   slo=None if data["slo"] is None else Slo.model_validate(data["slo"]),
                   saturated=flag(data["saturated"]), interrupted=flag(data["interrupted"]),
                   points=count(data["points"]), curves=curves, invalid=tuple(invalid))


def summarise(result: BenchResult) -> ResultSummary:
    return ResultSummary(stack=result.stack, simulation=result.simulation, slo=result.controls.slo,
                         saturated=result.client.saturated, interrupted=result.interrupted,
                         points=len(result.points), curves={q: tuple(curve_of(result, q)) for q in PERCENTILES},
                         invalid=invalid_points(result))


def _file_key(path: Path) -> str | None:
    """The sha256 of the file's bytes, streamed (a result is read whole only where it must be verified)."""
    try:
        with path.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError:
        return None  # read_result says why, in its words


def _entry(directory: Path | None, key: str | None) -> Path | None:
    return directory / "result-summaries" / f"{key}.json" if directory is not None and key is not None else None


def _cached(entry: Path | None) -> ResultSummary | None:
    from stackpin.yamlio import read_regular

    if entry is None:
        return None
    try:
        data = jsonio.loads(read_regular(entry, MAX_ENTRY_BYTES, follow=False))
        if data.get("stamp") != f"{__version__}/{RULES}":
            return None
        return ResultSummary.from_data(data["summary"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _keep(entry: Path | None, summary: ResultSummary) -> None:
    from stackpin.errors import StackpinError
    from stackpin.yamlio import write_atomic

    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(entry, json.dumps({"stamp": f"{__version__}/{RULES}", "summary": summary.data()},
                                       sort_keys=True))
    except (OSError, StackpinError):
        pass  # a cache that cannot be written costs time, never a report


def read_summary(path: Path) -> ResultSummary:
    """The file's summary: from the user's cache for bytes that verified before, else read and verified in
    full (read_result), summarised, and the result let go here."""
    from stackpin.bench.resultfile import read_result
    from stackpin.history.verified import cache_dir

    directory = cache_dir()
    key = _file_key(path) if directory is not None else None
    entry = _entry(directory, key)
    if (found := _cached(entry)) is not None:
        return found
    summary = summarise(read_result(path))
    if key is not None and _file_key(path) == key:  # what was verified is what was hashed
        _keep(entry, summary)
    return summary
