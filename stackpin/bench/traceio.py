"""Reading traces: our own JSONL and AIPerf/Mooncake traces, one located error per bad line.

Two shapes are read. Single-turn Mooncake traces (`timestamp`, `input_length` = the whole prompt,
`hash_ids`) become one-turn sessions named after their line. Multi-turn AIPerf traces (`session_id`,
`delay`, `input_length` = the turn's new tokens, `hash_ids` = the blocks of those new tokens) keep
their sessions; a session's turns must be consecutive, as AIPerf and stackpin replay them. `hash_ids`
are held to the rules AIPerf 0.13's prompt synthesis enforces (aiperf/dataset/generator/prompt.py,
`_build_token_sequence`): at most ceil(input_length / 512) ids (the last may be a partial block; fewer
ids name a prefix and the rest is fresh content), a positive input_length when there are ids, and one
size per id across the file. Entries that carry prompt text instead of lengths (`text_input`, `messages`)
cannot be replayed by length and are refused with the line that has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import stackpin.jsonio as jsonio
from stackpin.bench.trace import BLOCK_TOKENS, TraceTurn
from stackpin.errors import InputError, Location, Problem, StackpinError
from stackpin.yamlio import read_regular

if TYPE_CHECKING:
    from stackpin.bench.words import Vocabulary

_KNOWN = {"session_id", "input_length", "output_length", "delay", "hash_ids", "timestamp"}
_IGNORED = {"tools", "extra"}  # AIPerf fields that do not change lengths or timing


def _problem(path: Path, line: int, field: str, message: str) -> InputError:
    return InputError([Problem(Location(str(path), line, 1), field, message)])


# Bounds no real trace reaches (issue 18: 10**30-token prompts were accepted): a length in tokens, a delay or
# timestamp in milliseconds, a hash id.
_MAXIMUM = {"input_length": 2**31, "output_length": 2**31, "delay": 2**53, "timestamp": 2**53}
MAX_HASH_ID = 2**63
MAX_TRACE_BYTES = 1 << 30


def _int(path: Path, line: int, entry: dict[str, Any], field: str, required: bool, minimum: int = 0) -> int | None:
    value = entry.get(field)
    if value is None:
        if required:
            raise _problem(path, line, field, "missing")
        return None
    if isinstance(value, float) and value.is_integer() and field in ("delay", "timestamp"):
        value = int(value)  # AIPerf writes delays and timestamps as floats at times (4503.0)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _MAXIMUM[field]:
        raise _problem(path, line, field, f"must be an integer from {minimum} to {_MAXIMUM[field]}, got "
                       f"{json.dumps(value)[:40]}")
    return value


def read_trace(path: Path) -> list[TraceTurn]:
    """Read a trace in either shape; bad lines raise InputError naming file:line: field."""
    try:
        text = read_regular(path, MAX_TRACE_BYTES).decode("utf-8")
    except OSError as exc:
        raise StackpinError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise StackpinError(f"{path}: cannot read: {exc}") from None
    turns: list[TraceTurn] = []
    sizes: dict[int, tuple[int, int]] = {}  # hash id -> (block size, line it was first given at)
    closed: set[str] = set()
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = jsonio.loads(raw)
        except json.JSONDecodeError as exc:
            raise _problem(path, number, "", f"not JSON: {exc.msg} (column {exc.colno})") from None
        except jsonio.NestingError as exc:
            raise _problem(path, number, "", f"not a trace entry: {exc}") from None
        except ValueError as exc:  # an integer of more digits than Python converts (4,300)
            raise _problem(path, number, "", f"not a trace entry: {str(exc)[:80]}") from None
        if not isinstance(entry, dict):
            raise _problem(path, number, "", "not a JSON object")
        for field in ("text_input", "messages", "payload"):
            if field in entry:
                raise _problem(path, number, field, "prompt text cannot be replayed by length; give input_length")
        unknown = sorted(set(entry) - _KNOWN - _IGNORED)
        if unknown:
            raise _problem(path, number, unknown[0], "unknown field")
        turns.append(_turn(path, number, entry))
        _check_blocks(path, number, turns[-1], sizes)
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
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and
                                                 0 <= h < MAX_HASH_ID for h in hash_ids):
        raise _problem(path, line, "hash_ids", f"must be a list of integers from 0 to {MAX_HASH_ID - 1}")
    if sid is None and delay:
        raise _problem(path, line, "delay", "a delay needs a session_id (single-turn traces use timestamp)")
    return TraceTurn(session_id=str(sid) if sid is not None else f"line{line}", input_length=input_length or 0,
                     output_length=output_length or 1, delay=delay, hash_ids=tuple(hash_ids), timestamp=timestamp)


def block_sizes(input_length: int, hash_ids: tuple[int, ...] | list[int]) -> list[int]:
    """Tokens each id of a turn names, as AIPerf lays them out: whole blocks, except that when the ids
    overshoot input_length the last one holds the remainder (it may be outside 1..512: an error)."""
    count = len(hash_ids)
    if count * BLOCK_TOKENS <= input_length:  # exact tile, or a named prefix and a fresh tail
        return [BLOCK_TOKENS] * count
    return [BLOCK_TOKENS] * (count - 1) + [input_length - (count - 1) * BLOCK_TOKENS]


def _check_blocks(path: Path, line: int, turn: TraceTurn, sizes: dict[int, tuple[int, int]]) -> None:
    if not turn.hash_ids:
        return
    if turn.input_length <= 0:
        raise _problem(path, line, "input_length", "must be > 0 when hash_ids are given")
    most = -(-turn.input_length // BLOCK_TOKENS)
    if len(turn.hash_ids) > most:
        raise _problem(path, line, "hash_ids", f"{len(turn.hash_ids)} ids for input_length {turn.input_length}: "
                       f"at most ceil({turn.input_length}/{BLOCK_TOKENS}) = {most} (hash_ids name this turn's "
                       "new tokens, not the whole prompt)")
    for block, size in zip(turn.hash_ids, block_sizes(turn.input_length, turn.hash_ids), strict=True):
        first = sizes.setdefault(block, (size, line))
        if first[0] != size:
            raise _problem(path, line, "hash_ids", f"id {block} names {size} tokens here but {first[0]} at line "
                           f"{first[1]}: an id names one block of one size")


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

    return "sha256:" + hashlib.sha256(read_regular(path, MAX_TRACE_BYTES)).hexdigest()


def prompt_text(hash_ids: tuple[int, ...] | list[int], length: int, salt: str = "", unnamed: str = "",
                vocabulary: Vocabulary | None = None) -> str:
    """The `length` new words of a turn whose 512-word blocks are named by `hash_ids`: block `h` at word
    `i` is `<salt>b<h>_<i>`, so the same id gives the same words wherever it appears (a shared system
    prompt is the same bytes in every session) and a server's prefix cache sees the reuse the trace
    records; one word is one token to the simulator (stackpin sim). Blocks the ids leave unnamed (a
    trace without ids, or ids naming only a prefix) are fresh content, `<salt>b<unnamed>.<block>_<i>`:
    give each turn its own `unnamed` so they stay fresh."""
    words: list[str] = []
    for block in range(-(-length // BLOCK_TOKENS)):
        name = hash_ids[block] if block < len(hash_ids) else f"{unnamed}.{block}"
        size = min(BLOCK_TOKENS, length - block * BLOCK_TOKENS)
        if vocabulary is not None:  # the served tokenizer's single-token words (bench/words.py)
            words += vocabulary.block(salt, str(name))[:size]
        else:
            words += [f"{salt}b{name}_{offset}" for offset in range(size)]
    # A tokenizer's words are one token each after a space, the first word included.
    return (" " if vocabulary is not None else "") + " ".join(words)
