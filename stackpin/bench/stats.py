"""From requests to a result's numbers: distributions, one concurrency point, the SLO and the score.

Definitions (the docs repeat them): TTFT is the first content event's time after the request was
sent; a request's ITL is (last token - first token) / (output tokens - 1), as AIPerf defines it; an
agent's tok/s is its output tokens over its time generating (TTFT excluded), over its requests that
did not fail; throughput is every agent's output tokens over the point's wall time. A point holds
the SLO when no request failed, every agent held `tps` and the TTFT percentile is within `ttft_s`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stackpin.bench.gaps import gap_dist
from stackpin.bench.result import BenchResult, Dist, Point, Request, Score, Slo


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); `ordered` sorted, not empty."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def dist(values: Iterable[float]) -> Dist:
    ordered = sorted(values)
    if not ordered:
        return Dist(count=0, mean=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)
    return Dist(count=len(ordered), mean=sum(ordered) / len(ordered), p50=percentile(ordered, 0.5),
                p90=percentile(ordered, 0.9), p99=percentile(ordered, 0.99), max=ordered[-1])


def agent_rates(requests: Iterable[Request]) -> dict[int, float]:
    """Agent -> output tok/s while generating, over its requests that did not fail."""
    tokens: dict[int, int] = defaultdict(int)
    seconds: dict[int, float] = defaultdict(float)
    for r in requests:
        if r.error or r.ttft_s is None or r.end_s is None or r.output_tokens < 1:
            continue
        tokens[r.agent] += r.output_tokens
        seconds[r.agent] += r.end_s - r.start_s - r.ttft_s
    return {a: tokens[a] / seconds[a] for a in sorted(tokens) if seconds[a] > 0}


# A point is a measurement only when the client kept up: its busiest process under this share of a CPU
# (over it, the client is the bottleneck and the numbers are its limit), and its event loop late by less
# than this in the stack's time (every TTFT and token timestamp can be that late).
BUSY_LIMIT = 0.9
LAG_LIMIT_S = 0.01
# ... and the host, not the stack, set its first tokens when stackpin's simulator ran late per engine step
# by this share of the point's median TTFT (each first token is that late): at 10% a TTFT can no longer tell
# a 5-10% change from the host's. docs/bench.md#validity has the figures it was set from (a 2-core host
# loaded far past its cores made the simulator 3.8-8.5 ms late per step against 25-32 ms TTFTs, every point
# inside --lag-limit; quiet, 0.64-0.68 ms).
HOST_SHARE_LIMIT = 0.1


def invalid_reason(busy: float | None, lag_s: float | None, lag_limit_s: float = LAG_LIMIT_S,
                   busy_limit: float = BUSY_LIMIT, server_late_s: float | None = None, ttft_p50_s: float | None = None,
                   host_share_limit: float | None = None) -> str | None:
    """Why a point with this client busy fraction, loop lag p99 and simulator lateness (both in the stack's
    time, held to the same limit: either makes every timestamp that late) is not a measurement: every cause
    that reached its limit, the one furthest past it first, each with what to change; None when valid.
    With `host_share_limit`, the simulator's lateness per step is also held to that share of the point's
    median TTFT: the bed could not keep the stack's time. (The client's lateness is the decision's to weigh:
    bench.compare bounds every figure timed from timestamps by it.)"""
    causes: list[tuple[float, str]] = []
    if busy is not None and busy >= busy_limit:
        causes.append((busy / busy_limit, f"client saturated: its busiest process used {busy:.0%} of a CPU (limit "
                       f"{busy_limit:.0%}; more --workers or fewer agents)"))
    if lag_s is not None and lag_s >= lag_limit_s:
        causes.append((lag_s / lag_limit_s if lag_limit_s else math.inf,
                       f"client timestamps late: event-loop lag p99 {lag_s * 1000:.1f} ms of the stack's time "
                       f"(limit {lag_limit_s * 1000:g} ms; a quieter host, more --workers, or a simulator's lower "
                       "--speed)"))
    if server_late_s is not None and server_late_s >= lag_limit_s:
        causes.append((server_late_s / lag_limit_s if lag_limit_s else math.inf,
                       f"simulator behind its clock: {_ms(server_late_s)} per step of the stack's time (limit "
                       f"{lag_limit_s * 1000:g} ms; a quieter host, or its lower --speed)"))
    elif server_late_s and host_share_limit is not None and ttft_p50_s and \
            server_late_s >= host_share_limit * ttft_p50_s:
        share = server_late_s / ttft_p50_s
        causes.append((share / host_share_limit,
                       f"the host set its TTFTs: the simulator ran {_ms(server_late_s)} late per step on average, "
                       f"{share:.0%} of the median TTFT ({_ms(ttft_p50_s)}; limit {host_share_limit:.0%}: a quieter "
                       "host, or its lower --speed)"))
    causes.sort(key=lambda c: -c[0])
    return "; ".join(text for _, text in causes) or None


def _ms(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


def measured(points: Iterable[Point]) -> list[Point]:
    """The points that are measurements (not marked invalid)."""
    return [p for p in points if p.invalid is None]


def build_point(agents: int, duration_s: float, requests: Sequence[Request], gpus: int, slo: Slo | None,
                searched: bool = False, busy: float | None = None, lag_s: float | None = None,
                lag_limit_s: float = LAG_LIMIT_S, busy_limit: float = BUSY_LIMIT,
                server_late_s: float | None = None, host_share_limit: float | None = None) -> Point:
    ok = [r for r in requests if not r.error]
    rates = agent_rates(requests)
    output = sum(r.output_tokens for r in requests)
    prompt = sum(r.prompt_tokens for r in requests)
    output_tps = output / duration_s if duration_s > 0 else 0.0
    ttft = dist(r.ttft_s for r in ok if r.ttft_s is not None)
    point = Point(
        agents=agents, duration_s=duration_s, requests=len(requests), errors=len(requests) - len(ok),
        ttft_s=ttft,
        itl_s=dist(r.itl_mean_s for r in ok if r.itl_mean_s is not None),
        token_gap_s=gap_dist(r.token_gaps for r in ok),
        agent_tps=dist(rates.values()), agent_tps_samples=tuple(rates.values()),
        output_tps=output_tps, output_tps_per_gpu=output_tps / gpus,
        cache_hit_rate=sum(r.cached_tokens for r in requests) / prompt if prompt else None,
        searched=searched, request_log=tuple(requests), client_busy=busy, loop_lag_p99_s=lag_s,
        server_late_s=server_late_s, invalid=invalid_reason(busy, lag_s, lag_limit_s, busy_limit, server_late_s,
                                                            ttft.p50 if ttft.count else None, host_share_limit))
    return point.model_copy(update={"slo_met": holds(point, slo)}) if slo and point.invalid is None else point


# A prompt whose server count is off the trace's by more than this was not the trace's load: the server's
# tokenizer is not the one the prompt was built for. The margin covers a chat template's few tokens a
# message (a long session sends dozens of messages) and nothing a tokenizer mismatch gives (several
# tokens a word).
PROMPT_TOLERANCE = 0.05


def prompts_off(requests: Iterable[Request]) -> tuple[int, int]:
    """(requests whose server prompt count is off the trace's by more than PROMPT_TOLERANCE, requests
    both counted)."""
    off = counted = 0
    for r in requests:
        if r.sent_tokens and r.prompt_tokens and not r.error:
            counted += 1
            off += abs(r.prompt_tokens - r.sent_tokens) > PROMPT_TOLERANCE * r.sent_tokens
    return off, counted


def holds(point: Point, slo: Slo) -> bool:
    if point.errors or not point.agent_tps_samples or point.ttft_s.count == 0:
        return False
    return min(point.agent_tps_samples) >= slo.tps and getattr(point.ttft_s, slo.percentile) <= slo.ttft_s


@dataclass(frozen=True)
class Edge:
    """Where a curve meets the SLO among its valid points: the largest count that held below the first
    valid count that failed (`held`; None when the first valid point failed) and that failing count
    (`failed`; None when every valid point held: the curve never crossed, the score is a lower bound).
    A count between the two (an invalid point, or one not measured) is neither: the SLO's edge lies in
    [held, failed), known exactly only where they are adjacent."""

    held: Point | None
    failed: Point | None

    @property
    def bound(self) -> bool:
        """The score is not a measured value: never crossed, or crossed with unmeasured counts between."""
        low = self.held.agents if self.held else 0
        return self.failed is None or self.failed.agents > low + 1


def slo_edge(points: Sequence[Point], slo: Slo) -> Edge | None:
    """The SLO's edge on the valid points (the curve taken as monotone: the first failure ends it); None
    when no point is valid."""
    ordered = sorted(measured(points), key=lambda p: p.agents)
    if not ordered:
        return None
    held: Point | None = None
    for point in ordered:
        if not holds(point, slo):
            return Edge(held, point)
        held = point
    return Edge(held, None)


def score(points: Sequence[Point], slo: Slo) -> Score:
    """The largest agent count that held the SLO (below the smallest one that did not: the curve is
    taken as monotone), single-agent speed, and throughput per GPU at the largest count."""
    edge = slo_edge(points, slo)
    best = edge.held if edge else None
    single = next((p for p in measured(points) if p.agents == 1), None)
    return Score(max_agents=best.agents if best else 0,
                 single_agent_tps=single.agent_tps.mean if single and single.agent_tps.count else 0.0,
                 output_tps_per_gpu_at_slo=best.output_tps_per_gpu if best else None)


def next_search(points: Sequence[Point], slo: Slo, resolution: float = 0.0) -> int | None:
    """The agent count to measure next when bisecting between the largest count that held the SLO
    and the smallest above it that did not; None when they are adjacent, or within `resolution` (a
    fraction of the count that held) of each other: the search is done. Invalid points are not evidence
    either way."""
    ordered = sorted(measured(points), key=lambda p: p.agents)
    low = 0
    for point in ordered:
        if not holds(point, slo):
            middle = (low + point.agents) // 2
            if low and point.agents - low <= resolution * low:
                return None
            return middle if middle > low and middle != point.agents else None
        low = point.agents
    return None


def _close(a: object, b: object) -> bool:
    """Equal, floats within rounding (a result's numbers went through JSON and back)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


HEADLINE = ("requests", "errors", "ttft_s", "itl_s", "token_gap_s", "agent_tps", "agent_tps_samples", "output_tps",
            "output_tps_per_gpu", "cache_hit_rate", "slo_met", "invalid")


def inconsistency(result: BenchResult) -> tuple[str, str] | None:
    """(field, what is wrong) when a figure is not what the request log it summarises gives (recomputed
    as `build_point` and `score` computed it), or None: an edited number is caught on read."""
    slo, gpus = result.controls.slo, result.stack.gpus
    for i, point in enumerate(result.points):
        if not point.request_log:
            continue
        again = build_point(point.agents, point.duration_s, point.request_log, gpus, slo, point.searched,
                            point.client_busy, point.loop_lag_p99_s, result.client.lag_limit_s,
                            result.client.busy_limit, point.server_late_s, result.client.host_share_limit)
        for name in HEADLINE:
            have, want = getattr(point, name), getattr(again, name)
            if name == "invalid":  # whether it is valid is recomputed; the words of why are an earlier release's
                have, want = have is not None, want is not None
            if isinstance(have, Dist) and isinstance(want, Dist):
                have, want = have.model_dump(), want.model_dump()
            if not _close(have, want):
                return f"points.{i}.{name}", f"is {have!r}, not what its request log gives ({want!r}; edited by hand?)"
    if result.score is not None and slo is not None and all(p.request_log for p in result.points) and result.points:
        want_score = score(result.points, slo)
        if not _close(result.score.model_dump(), want_score.model_dump()):
            return "score", f"is not what the points give ({want_score.model_dump()}; edited by hand?)"
    return None
