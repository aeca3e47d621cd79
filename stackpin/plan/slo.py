"""The service target as the command line spells it: `tps=80,ttft=10s[,percentile=p90]`, parsed by the
same function as `stackpin bench run --slo` (stackpin.bench.binding.parse_slo), written back here."""

from __future__ import annotations

from stackpin.bench.binding import parse_slo
from stackpin.bench.result import Slo

__all__ = ["parse_slo", "slo_text"]


def slo_text(slo: Slo) -> str:
    return f"tps={slo.tps:g},ttft={slo.ttft_s:g}s,percentile={slo.percentile}"
