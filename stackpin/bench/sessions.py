"""A trace as the replay client uses it: sessions of turns, and the grown prompt of each turn.

The context a session sends grows turn by turn, as AIPerf's multi-turn replay grows it: the previous
turns' user words and the previous answers' text exactly as they came back, then the new turn's
`input_length` words. Those new words are built from the turn's own `hash_ids` (one word one token,
512 words a block: `b<hash_id>_<i>`, see traceio.prompt_text), so a simulator counts prompt tokens
without a tokenizer, a block id shared across sessions is the same bytes, and the bytes of a
session's prefix are identical from one turn to the next, as an agent's are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stackpin.bench.trace import TraceTurn

if TYPE_CHECKING:
    from stackpin.bench.words import Vocabulary


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[TraceTurn, ...]


@dataclass(frozen=True)
class Trace:
    path: Path
    digest: str  # sha256 of the file's bytes
    sessions: tuple[Session, ...]


def read_trace(path: Path) -> Trace:
    """Read a trace (our JSONL or an AIPerf/Mooncake one, see traceio) as sessions; a bad line is a
    located error (file:line: field)."""
    from stackpin.bench.traceio import read_trace as read_turns

    turns = read_turns(path)
    sessions: list[Session] = []
    current: list[TraceTurn] = []
    for turn in turns:
        if current and turn.session_id != current[0].session_id:
            sessions.append(Session(current[0].session_id, tuple(current)))
            current = []
        current.append(turn)
    sessions.append(Session(current[0].session_id, tuple(current)))
    return Trace(path, "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest(), tuple(sessions))


@dataclass
class Context:
    """One replay of a session: its messages so far. `salt` makes a second replay of the same session
    (another agent count, another round) use other words, so it does not hit the first one's cache."""

    salt: str = ""
    session: str = ""  # names the blocks a trace without hash_ids leaves unnamed
    messages: list[dict[str, str]] = field(default_factory=list)
    tokens: int = 0  # tokens sent so far as the trace sizes them: user words + answers' tokens
    vocabulary: Vocabulary | None = None  # the served tokenizer's words (bench/words.py), or stackpin's

    def next_messages(self, turn: TraceTurn) -> list[dict[str, str]]:
        """The messages to send for `turn`: the context so far plus the turn's new words."""
        from stackpin.bench.traceio import prompt_text

        count = max(1, turn.input_length)
        # Blocks the ids leave unnamed are fresh: named by session and turn, so no other turn has them.
        unnamed = f"{''.join(self.session.split())}.{len(self.messages) // 2}"
        self.messages.append({"role": "user", "content": prompt_text(turn.hash_ids, count, self.salt, unnamed,
                                                                     self.vocabulary)})
        self.tokens += count
        return self.messages

    def add_answer(self, text: str, tokens: int | None = None) -> None:
        """The answer joins the context; `tokens` is the server's count of it (usage), else its words."""
        self.messages.append({"role": "assistant", "content": text})
        self.tokens += tokens if tokens is not None else len(text.split())


def default_sessions_per_agent(trace: Trace, agents: int) -> int:
    """Enough sessions per agent for `agents` agents to cover the trace once."""
    return max(1, -(-len(trace.sessions) // agents))


def agent_sessions(trace: Trace, agent: int, agents: int, per_agent: int | None) -> Iterator[tuple[int, Session]]:
    """The sessions agent `agent` of `agents` replays in order, with their round: sessions agent,
    agent + agents, ... of the trace, wrapping around (round 1, 2, ...) when the trace runs out.
    `per_agent` None: without end (a duration limit stops the agent)."""
    count = len(trace.sessions)
    k = 0
    while per_agent is None or k < per_agent:
        index = agent + k * agents
        yield index // count, trace.sessions[index % count]
        k += 1
