"""Gaps between a stream's token events, as a sparse histogram a request carries and a point pools.

Per-request ITL (AIPerf's: (last token - first token) / (tokens - 1)) is a mean per request; a server's
and AIPerf's inter-token histograms count every gap. A request's gaps go into log buckets 4% wide from 1
us, so a result stays small and every figure of the pooled distribution can be recomputed from the
request log on read; a percentile is its bucket's geometric middle, within 2% of the gap measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from stackpin.bench.result import Dist

BASE = 1.04
FLOOR_S = 1e-6


def gap_bucket(seconds: float) -> int:
    """0 for a gap under 1 us; else b, holding gaps in [1 us x 1.04^(b-1), 1 us x 1.04^b)."""
    if seconds < FLOOR_S:
        return 0
    return 1 + math.floor(math.log(seconds / FLOOR_S) / math.log(BASE))


def bucket_seconds(bucket: int) -> float:
    return 0.0 if bucket == 0 else FLOOR_S * BASE ** (bucket - 0.5)


def rescaled(histogram: dict[int, int], factor: float) -> tuple[tuple[int, int], ...]:
    """The histogram of the gaps times `factor` (a simulator's --speed scaled back out), sorted."""
    out: dict[int, int] = {}
    for bucket, count in histogram.items():
        b = gap_bucket(bucket_seconds(bucket) * factor) if factor != 1 else bucket
        out[b] = out.get(b, 0) + count
    return tuple(sorted(out.items()))


def gap_dist(histograms: Iterable[Iterable[tuple[int, int]]]) -> Dist | None:
    """The pooled distribution of every gap, or None when no request recorded any."""
    pooled: dict[int, int] = {}
    for histogram in histograms:
        for bucket, count in histogram:
            pooled[bucket] = pooled.get(bucket, 0) + count
    total = sum(pooled.values())
    if not total:
        return None
    ordered = sorted(pooled.items())

    def at(q: float) -> float:
        rank = q * (total - 1)
        seen = 0
        for bucket, count in ordered:
            seen += count
            if seen > rank:
                return bucket_seconds(bucket)
        return bucket_seconds(ordered[-1][0])

    return Dist(count=total, mean=sum(bucket_seconds(b) * c for b, c in ordered) / total, p50=at(0.5), p90=at(0.9),
                p99=at(0.99), max=bucket_seconds(ordered[-1][0]))
