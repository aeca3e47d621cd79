"""`tps=80,ttft=10s[,percentile=p90]`: the service target as the command line spells it (the same
syntax as `stackpin bench run --slo`)."""

from __future__ import annotations

import re

from stackpin.bench.result import Slo
from stackpin.errors import StackpinError

_DURATION = re.compile(r"(?P<value>[0-9]*\.?[0-9]+)(?P<unit>ms|s|m)?")
_KEYS = ("tps", "ttft", "percentile")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def parse_slo(text: str) -> Slo:
    """Parse `tps=80,ttft=10s` (ttft in ms, s or m, bare numbers are seconds; percentile=p50|p90|p99,
    default p90)."""
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in _KEYS:
            raise StackpinError(f"--slo {text}: '{part}' is not one of tps=N, ttft=Ns, percentile=p50|p90|p99")
        fields[key] = value
    if "tps" not in fields or "ttft" not in fields:
        raise StackpinError(f"--slo {text}: needs both tps= and ttft= (e.g. tps=80,ttft=10s)")
    try:
        tps = float(fields["tps"])
    except ValueError:
        raise StackpinError(f"--slo {text}: tps={fields['tps']} is not a number") from None
    match = _DURATION.fullmatch(fields["ttft"])
    if not match:
        raise StackpinError(f"--slo {text}: ttft={fields['ttft']} is not a duration (10s, 500ms)")
    ttft = float(match["value"]) * _UNIT[match["unit"]]
    percentile = fields.get("percentile", "p90")
    if percentile not in ("p50", "p90", "p99") or tps <= 0 or ttft <= 0:
        raise StackpinError(f"--slo {text}: tps and ttft must be positive and percentile one of p50, p90, p99")
    return Slo(tps=tps, ttft_s=ttft, percentile=percentile)  # type: ignore[arg-type]


def slo_text(slo: Slo) -> str:
    return f"tps={slo.tps:g},ttft={slo.ttft_s:g}s,percentile={slo.percentile}"
