"""Reading traces: our own JSONL and AIPerf/Mooncake traces, one located error per bad line.

Two shapes are read. Single-turn Mooncake traces (`timestamp`, `input_length` = the whole prompt,
`hash_ids`) become one-turn sessions named after their line. Multi-turn AIPerf traces (`session_id`,
`delay`, `input_length`) keep their sessions; a session's turns must be consecutive, as AIPerf and
stackpin replay them. Entries that carry prompt text instead of lengths (`text_input`, `messages`)
cannot be replayed by length and are refused with the line that has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stackpin.bench.trace import BLOCK_TOKENS, TraceTurn
from stackpin.errors import InputError, Location, Problem, StackpinError

_KNOWN = {"session_id", "input_length", "output_length", "delay", "hash_ids", "timestamp"}
_IGNORED = {"tools", "extra"}  # AIPerf fields that do not change lengths or timing


def _problem(path: Path, line: int, field: str, message: str) -> InputError:
    return InputError([Problem(Location(str(path), line, 1), field, message)])


def _int(path: Path, line: int, entry: dict[str, Any], field: str, required: bool, minimum: int = 0) -> int | None:
    value = entry.get(field)
    if value is None:
        if required:
            raise _problem(path, line, field, "missing")
        return None
    if isinstance(value, float) and value.is_integer() and field in ("delay", "timestamp"):
        value = int(value)  # AIPerf writes delays and timestamps as floats at times (4503.0)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _problem(path, line, field, f"must be an integer >= {minimum}, got {json.dumps(value)[:40]}")
    return value


def read_trace(path: Path) -> list[TraceTurn]:
    """Read a trace in either shape; bad lines raise InputError naming file:line: field."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StackpinError(f"{path}: cannot read: {exc}") from None
    turns: list[TraceTurn] = []
    closed: set[str] = set()
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _problem(path, number, "", f"not JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(entry, dict):
            raise _problem(path, number, "", "not a JSON object")
        for field in ("text_input", "messages", "payload"):
            if field in entry:
                raise _problem(path, number, field, "prompt text cannot be replayed by length; give input_length")
        unknown = sorted(set(entry) - _KNOWN - _IGNORED)
        if unknown:
            raise _problem(path, number, unknown[0], "unknown field")
        turns.append(_turn(path, number, entry))
        sid = turns[-1].session_id
        if sid != current:
            if sid in closed:
                raise _problem(path, number, "session_id", f"{sid}: turns of a session must be consecutive lines")
            if current is not None:
                closed.add(current)
            current = sid
    if not turns:
        raise StackpinError(f"{path}: no trace entries")
    return turns


def _turn(path: Path, line: int, entry: dict[str, Any]) -> TraceTurn:
    sid = entry.get("session_id")
    if sid is not None and (not isinstance(sid, str | int) or isinstance(sid, bool) or str(sid) == ""):
        raise _problem(path, line, "session_id", "must be a non-empty string")
    input_length = _int(path, line, entry, "input_length", required=True)
    output_length = _int(path, line, entry, "output_length", required=True, minimum=1)
    delay = _int(path, line, entry, "delay", required=False) or 0
    timestamp = _int(path, line, entry, "timestamp", required=False)
    hash_ids = entry.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0
                                                 for h in hash_ids):
        raise _problem(path, line, "hash_ids", "must be a list of non-negative integers")
    if sid is None and delay:
        raise _problem(path, line, "delay", "a delay needs a session_id (single-turn traces use timestamp)")
    return TraceTurn(session_id=str(sid) if sid is not None else f"line{line}", input_length=input_length or 0,
                     output_length=output_length or 1, delay=delay, hash_ids=tuple(hash_ids), timestamp=timestamp)


def prompt_lengths(turns: list[TraceTurn]) -> list[int]:
    """Whole-prompt tokens of each turn: a session's first turn sends its input; each later turn sends
    the previous prompt, the previous answer and its own input (the context grows)."""
    lengths: list[int] = []
    previous: TraceTurn | None = None
    context = 0
    for turn in turns:
        if previous is None or previous.session_id != turn.session_id:
            context = 0
        elif previous is not None:
            context += previous.output_length
        context += turn.input_length
        lengths.append(context)
        previous = turn
    return lengths


def trace_digest(path: Path) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def prompt_text(hash_ids: tuple[int, ...] | list[int], length: int) -> str:
    """A prompt of `length` words whose 512-word blocks are named by `hash_ids`: block `h` at word `i`
    is `b<h>_<i>`. The same ids give the same words, so a session's prompt repeats the previous turn's
    full blocks byte for byte and a server's prefix cache sees the reuse the trace records; one word
    is one token to the simulator (stackpin sim). Without ids, words are numbered from one block."""
    ids = list(hash_ids) or [0]
    words: list[str] = []
    for position, block in enumerate(ids):
        count = min(BLOCK_TOKENS, length - position * BLOCK_TOKENS)
        if count <= 0:
            break
        words += [f"b{block}_{i}" for i in range(count)]
    # A trace whose ids cover fewer tokens than its length: the rest repeats the last block's name.
    words += [f"b{ids[-1]}_{i}" for i in range(len(words), length)]
    return " ".join(words)
