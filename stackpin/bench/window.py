"""A point's steady state: what its agents did inside a window that leaves out the cold start and the
drain, so a measured run is held to the step model's steady-state curve like with like.

A point starts every agent at once on a cold cache (a burst of prefill) and, after `--duration`,
finishes the answers in flight with fewer and fewer agents: its whole-run averages (bench run's
table) are those of a load that was not the steady one. Inside [skip x duration, duration], each
request's tokens are taken as spread evenly between its first token and its end.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from stackpin.bench.result import Point, Request

SKIP = 0.25  # the share of the point's duration left out at its start


@dataclass(frozen=True)
class Steady:
    output_tps: float  # all agents' output tokens per second inside the window
    agent_tps: float  # mean over agents of each one's tokens per second while generating, inside it


def steady(point: Point, duration_s: float, skip: float = SKIP) -> Steady:
    """The point's output tok/s and mean per-agent tok/s inside [skip x duration, duration] of its start
    (`duration_s`: the run's --duration, in the stack's time); zeros when nothing generated in it."""
    if not point.request_log:
        return Steady(0.0, 0.0)
    t0 = min(r.start_s for r in point.request_log)
    lo, hi = t0 + skip * duration_s, t0 + duration_s
    total = 0.0
    tokens: dict[int, float] = defaultdict(float)
    seconds: dict[int, float] = defaultdict(float)
    for r in point.request_log:
        if r.error or r.ttft_s is None or r.end_s is None:
            continue
        first, end = r.start_s + r.ttft_s, r.end_s
        total += 1 if lo <= first <= hi else 0
        if r.output_tokens > 1 and end > first:
            overlap = max(0.0, min(end, hi) - max(first, lo))
            share = (r.output_tokens - 1) * overlap / (end - first)
            total += share
            tokens[r.agent] += share
            seconds[r.agent] += overlap
    rates = [tokens[a] / seconds[a] for a in seconds if seconds[a] > 0]
    return Steady(total / (hi - lo) if hi > lo else 0.0, sum(rates) / len(rates) if rates else 0.0)


def steady_requests(point: Point, skip: float = SKIP) -> list[Request]:
    """The point's requests that are evidence of its steady state: completed without error, with a first
    token and an answer, the first token past the first `skip` of the point's span (first request sent to
    last answer done: its cold start left out)."""
    if not point.request_log:
        return []
    t0 = min(r.start_s for r in point.request_log)
    t1 = max(r.end_s if r.end_s is not None else r.start_s for r in point.request_log)
    lo = t0 + skip * (t1 - t0)
    return [r for r in point.request_log if not r.error and r.ttft_s is not None and r.end_s is not None
            and r.output_tokens > 0 and r.start_s + r.ttft_s >= lo]
