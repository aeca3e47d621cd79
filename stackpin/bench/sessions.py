"""A trace as the replay client uses it: sessions of turns, and the grown prompt of each turn.

The prompt of a turn is words built from the trace's `hash_ids` (one word one token, 512 words a
block: `b<hash_id>_<i>`), so a simulator counts prompt tokens without a tokenizer and its prefix
cache keys on the same blocks the trace names. The context a session sends grows turn by turn: the
previous turns' user words and the previous answers' text exactly as they came back, then the new
turn's `input_length` words. The bytes of a session's prefix are therefore identical from one turn
to the next, as an agent's are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stackpin.bench.trace import BLOCK_TOKENS, TraceTurn


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
    tokens: int = 0  # words sent so far (user words + answers' words as the server counts them)

    def words(self, turn: TraceTurn, start: int, count: int) -> str:
        ids = turn.hash_ids
        out = []
        for position in range(start, start + count):
            block, offset = divmod(position, BLOCK_TOKENS)
            # A trace without hash_ids (or too few) still gets stable words, distinct per session.
            name = ids[block] if block < len(ids) else f"{''.join(self.session.split())}.{block}"
            out.append(f"{self.salt}b{name}_{offset}")
        return " ".join(out)

    def next_messages(self, turn: TraceTurn) -> list[dict[str, str]]:
        """The messages to send for `turn`: the context so far plus the turn's new words."""
        count = max(1, turn.input_length)
        text = self.words(turn, self.tokens, count)
        self.messages.append({"role": "user", "content": text})
        self.tokens += count
        return self.messages

    def add_answer(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})
        self.tokens += len(text.split())


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
