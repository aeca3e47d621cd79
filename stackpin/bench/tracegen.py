"""`stackpin trace gen`: AgentPerf-shaped multi-turn agent sessions, deterministic from a seed.

Each session starts from a shared system prefix plus a task, then grows every turn by the previous
answer and the new tool output (`input_length` is that delta; the whole prompt is the previous prompt
plus the previous answer plus the delta, accumulated by the client as AIPerf does). `hash_ids` name the
delta's own 512-token blocks, ceil(input_length / 512) of them, the last one partial: every block of
new content gets a new id, and the shared system prefix (whole blocks at the start of every session's
first turn) keeps ids 0.. in every session, so cross-session reuse shows as repeated ids. Only
`random.Random(seed)` is used, values are rounded to integers, and turns are written in generation
order, so the same seed and parameters give the same bytes on any machine.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.bench.trace import TraceTurn
from stackpin.errors import StackpinError

DEFAULTS_FILE = Path(__file__).with_name("agentperf.yaml")


@dataclass(frozen=True)
class LogNormal:
    """A clipped lognormal of integers: median, sigma of the log, and the clip range."""

    median: float
    sigma: float
    min: int
    max: int

    def draw(self, rng: random.Random) -> int:
        value = self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        return max(self.min, min(self.max, round(value)))


@dataclass(frozen=True)
class TraceShape:
    block_tokens: int
    max_context: int
    shared_prefix_tokens: int
    first_input: LogNormal
    turn_input: LogNormal
    output: LogNormal
    turns: LogNormal
    delay_ms: LogNormal

    def with_overrides(self, overrides: dict[str, str]) -> TraceShape:
        """`--param output.median=300`-style overrides; a bad one names itself."""
        shape = self
        for key, text in overrides.items():
            head, _, attr = key.partition(".")
            try:
                value = float(text)
            except ValueError:
                raise StackpinError(f"--param {key}={text}: not a number") from None
            current = getattr(shape, head, None) if head in {f.name for f in fields(TraceShape)} else None
            if isinstance(current, LogNormal) and attr in {f.name for f in fields(LogNormal)}:
                cast: Any = int(value) if attr in ("min", "max") else value
                new: dict[str, Any] = {head: replace(current, **{attr: cast})}
                shape = replace(shape, **new)
            elif current is not None and not attr and not isinstance(current, LogNormal):
                plain: dict[str, Any] = {head: int(value)}
                shape = replace(shape, **plain)
            else:
                raise StackpinError(f"--param {key}: unknown parameter; known: {', '.join(param_names())}")
        return shape


def param_names() -> list[str]:
    names = []
    for f in fields(TraceShape):
        if f.type in ("LogNormal", LogNormal):
            names += [f"{f.name}.{g.name}" for g in fields(LogNormal)]
        else:
            names.append(f.name)
    return names


@cache
def default_shape() -> TraceShape:
    from stackpin.yamlio import load_data

    data = load_data(DEFAULTS_FILE.read_text(encoding="utf-8"))
    dists = {k: LogNormal(**data[k]) for k in ("first_input", "turn_input", "output", "turns", "delay_ms")}
    return TraceShape(block_tokens=data["block_tokens"], max_context=data["max_context"],
                      shared_prefix_tokens=data["shared_prefix_tokens"], **dists)


def published_shape() -> dict[str, int]:
    from stackpin.yamlio import load_data

    published: dict[str, int] = load_data(DEFAULTS_FILE.read_text(encoding="utf-8"))["published"]
    return published


def generate(sessions: int, seed: int, shape: TraceShape | None = None) -> list[TraceTurn]:
    """`sessions` sessions, their turns consecutive and in order."""
    shape = shape or default_shape()
    rng = random.Random(seed)
    block = shape.block_tokens
    shared = shape.shared_prefix_tokens // block  # whole blocks every session starts with
    next_id = shared
    turns: list[TraceTurn] = []
    width = len(str(max(sessions - 1, 0)))
    for s in range(sessions):
        sid = f"s{s:0{width}d}"
        n_turns = shape.turns.draw(rng)
        context = 0  # whole-prompt tokens so far (previous prompt + previous answer)
        for t in range(n_turns):
            new = shape.first_input.draw(rng) + shared * block if t == 0 else shape.turn_input.draw(rng)
            output = shape.output.draw(rng)
            delay = 0 if t == 0 else shape.delay_ms.draw(rng)
            if context + new > shape.max_context:
                break
            context += new
            prefix = list(range(shared)) if t == 0 else []  # the system prompt: the same ids in every session
            fresh = -(-new // block) - len(prefix)  # the rest of the delta is new content, last block partial
            turns.append(TraceTurn(session_id=sid, input_length=new, output_length=output, delay=delay,
                                   hash_ids=(*prefix, *range(next_id, next_id + fresh))))
            next_id += fresh
            context += output  # the answer joins the context the next turn sends
    return turns


def render(turns: list[TraceTurn]) -> str:
    """JSONL, one turn a line, keys sorted, no spaces: the bytes the digest is taken over."""
    from stackpin.jsonio import canonical_json

    return "".join(canonical_json(turn.model_dump(exclude_none=True)).decode() + "\n" for turn in turns)
