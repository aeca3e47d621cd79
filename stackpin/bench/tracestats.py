"""`stackpin trace stats`: the distribution a trace replays, in the terms AgentPerf publishes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from stackpin.bench.trace import BLOCK_TOKENS, TraceTurn
from stackpin.bench.traceio import prompt_lengths


@dataclass(frozen=True)
class Summary:
    mean: float
    median: float
    p95: float
    max: int


@dataclass(frozen=True)
class TraceStats:
    requests: int
    sessions: int
    isl: Summary  # whole prompt per request (the context the server receives)
    new_tokens: Summary  # input_length: the tokens each turn adds
    osl: Summary
    turns: Summary  # turns per session
    delay_ms: Summary
    reuse_ratio: float  # prompt tokens a prefix cache already holds / all prompt tokens (see reuse_ratio)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _percentile(ordered: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on a sorted list."""
    if len(ordered) == 1:
        return float(ordered[0])
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: list[int]) -> Summary:
    ordered = sorted(values)
    return Summary(mean=round(sum(ordered) / len(ordered), 1), median=round(_percentile(ordered, 0.5), 1),
                   p95=round(_percentile(ordered, 0.95), 1), max=ordered[-1])


REUSE_MEANING = ("prompt tokens a prefix cache of 512-token blocks already holds (the session's previous prompt, "
                 "plus new blocks whose hash id was sent before) / all prompt tokens")


def reuse_ratio(turns: list[TraceTurn]) -> float:
    """What an unbounded prefix cache that keeps prompts would hit, in whole 512-token blocks: of each
    turn's accumulated prompt, the session's previous prompt (sent before, and this prompt's prefix),
    plus the turn's own full blocks whose id an earlier request already sent (a shared system prompt).
    Answers are not counted: the simulator, like a cache filled only by prefills, holds prompts."""
    seen: set[int] = set()
    reused = total = 0
    previous: tuple[TraceTurn, int] | None = None
    for turn, length in zip(turns, prompt_lengths(turns), strict=True):
        history = previous[1] if previous is not None and previous[0].session_id == turn.session_id else 0
        total += length
        hits = history // BLOCK_TOKENS * BLOCK_TOKENS
        full = min(len(turn.hash_ids), turn.input_length // BLOCK_TOKENS)
        hits += BLOCK_TOKENS * sum(1 for block in turn.hash_ids[:full] if block in seen)
        reused += min(hits, length)
        seen.update(turn.hash_ids)
        previous = (turn, length)
    return round(reused / total, 4) if total else 0.0


def trace_stats(turns: list[TraceTurn]) -> TraceStats:
    per_session: dict[str, int] = {}
    for turn in turns:
        per_session[turn.session_id] = per_session.get(turn.session_id, 0) + 1
    later = [t.delay for t, p in zip(turns[1:], turns, strict=False) if t.session_id == p.session_id] or [0]
    return TraceStats(requests=len(turns), sessions=len(per_session), isl=summarize(prompt_lengths(turns)),
                      new_tokens=summarize([t.input_length for t in turns]),
                      osl=summarize([t.output_length for t in turns]), turns=summarize(list(per_session.values())),
                      delay_ms=summarize(later), reuse_ratio=reuse_ratio(turns))
