"""Agent traces in the Mooncake / AIPerf JSONL trace format.

One JSON object a line, one line a turn; the turns of a session are consecutive lines in order.
Field meanings follow AIPerf's Mooncake trace replay (its multi-turn "deltas without responses" mode):
`input_length` is the turn's *new* tokens, the delta on top of the context the session already holds;
the client accumulates that context itself (previous turns' prompts and the answers as they came
back). `hash_ids` names the 512-token blocks of the delta alone, in order: ceil(input_length / 512) ids
with the last block partial, or fewer when only a prefix of the delta is named (the rest is fresh
content). A block id means the same content wherever it appears, so an id repeated from an earlier
turn or session (a shared system prompt) is content shared with it. For single-turn Mooncake traces
the delta is the whole prompt, so both readings agree. `delay` is the tool time in milliseconds
between the previous turn's answer and this turn.
"""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveInt

from stackpin.models import Model

BLOCK_TOKENS = 512
"""Tokens per `hash_ids` block (AIPerf's and Mooncake's default block size)."""


class TraceTurn(Model):
    """One request of an agent session."""

    session_id: str = Field(min_length=1)
    input_length: NonNegativeInt = Field(description="New prompt tokens this turn (the context grows by it).")
    output_length: PositiveInt = Field(description="Tokens the answer has (max_tokens, ignore_eos).")
    delay: NonNegativeInt = Field(0, description="Milliseconds of tool time before this turn is sent.")
    hash_ids: tuple[int, ...] = Field(default=(), description="512-token blocks of this turn's input_length tokens.")
    timestamp: NonNegativeInt | None = Field(None, description="Arrival in ms (single-turn Mooncake traces).")
