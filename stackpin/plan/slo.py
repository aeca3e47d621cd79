"""The service target as the command line spells it: `tps=80,ttft=10s[,percentile=p90]`, parsed by the
same function as `stackpin bench run --slo` (stackpin.bench.binding.parse_slo), written back here."""

from __future__ import annotations

from collections.abc import Sequence

from stackpin.bench.binding import parse_slo
from stackpin.bench.result import BenchResult, Slo
from stackpin.errors import StackpinError

__all__ = ["parse_slo", "results_slo", "slo_text"]


def slo_text(slo: Slo) -> str:
    return f"tps={slo.tps:g},ttft={slo.ttft_s:g}s,percentile={slo.percentile}"


def results_slo(results: Sequence[BenchResult]) -> Slo:
    """The SLO the results were benched under (bench run's default is the profile's spec.service), when
    they all name the same one; else a one-line refusal asking for --slo."""
    found = {r.controls.slo for r in results if r.controls.slo is not None}
    if len(found) == 1 and all(r.controls.slo is not None for r in results):
        return found.pop()
    said = ", ".join(sorted(slo_text(s) for s in found)) or "none"
    raise StackpinError(f"--slo not given and the results do not share one SLO (they name: {said}): give --slo")
