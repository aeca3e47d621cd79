"""JSON from outside files and servers, its nesting bounded before it is decoded.

Python's json and msgspec both decode arrays and objects by recursion: a file of 100,000 `[` is a
RecursionError (a traceback) or worse, whatever the byte bound on the file. `check_depth` counts the
brackets outside strings first, without recursion; `loads` is json.loads behind it.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

MAX_DEPTH = 100  # arrays and objects inside one another; the deepest JSON stackpin reads is ~10
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_STRING_B = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NOT_BRACKET_B = re.compile(rb"[^\[\]{}]+")


class NestingError(ValueError):
    """JSON nested deeper than its reader allows (a ValueError, as a decoder's own errors are)."""


def depth(data: str | bytes) -> int:
    """How deep the arrays and objects of JSON text nest (brackets inside strings do not count)."""
    if isinstance(data, bytes):
        brackets: str | bytes = _NOT_BRACKET_B.sub(b"", _STRING_B.sub(b"", data))
        opening: Any = b"[{"[0], b"[{"[1]
    else:
        brackets = _NOT_BRACKET.sub("", _STRING.sub("", data))
        opening = "[", "{"
    if not brackets:
        return 0
    return max(0, max(accumulate(1 if c in opening else -1 for c in brackets)))


def check_depth(data: str | bytes, limit: int = MAX_DEPTH) -> None:
    """NestingError when `data` nests deeper than `limit`; quick when it has fewer opening brackets."""
    opened = data.count(b"[") + data.count(b"{") if isinstance(data, bytes) else data.count("[") + data.count("{")
    if opened > limit and (found := depth(data)) > limit:
        raise NestingError(f"JSON nested {found} levels deep, more than the {limit} read")


def loads(data: str | bytes, limit: int = MAX_DEPTH, *,
          parse_constant: Callable[[str], Any] | None = None) -> Any:
    """json.loads, after check_depth: ValueError (NestingError, or the decoder's) for what is not read."""
    check_depth(data, limit)
    return json.loads(data, parse_constant=parse_constant)


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON, the one encoding stackpin hashes and emits, so equal data always gives equal bytes (the
    stack digest, every OCI manifest, config and index stackpin writes, the JSON arguments of rendered engine
    command lines): sorted keys, no whitespace, UTF-8 as is (no \\u escapes)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# One JSON token: a string, a punctuation mark, or a number / true / false / null.
_TOKEN = re.compile(r'("(?:[^"\\]|\\.)*")|([{}\[\],:])|([^\s{}\[\],:"]+)', re.DOTALL)


def positions(text: str) -> dict[tuple[str | int, ...], tuple[int, int]]:
    """Field path -> (line, column), 1-based, of every value of JSON `text` that `loads` has read: a member
    at its key (as stackpin.yamlio marks YAML, where editors put the cursor), an item where it starts.
    A scan of the tokens, without recursion (the nesting is bounded already); for error messages only."""
    breaks = [m.start() for m in re.finditer("\n", text)]
    marks: dict[tuple[str | int, ...], tuple[int, int]] = {}
    # Open containers: (path, its next index, or None for an object) and an object's current key.
    stack: list[tuple[tuple[str | int, ...], list[int] | None]] = []
    keys: list[str] = []
    expect_key = False

    def where(offset: int) -> tuple[int, int]:
        line = bisect.bisect_left(breaks, offset)
        return line + 1, offset - (breaks[line - 1] if line else -1)

    for token in _TOKEN.finditer(text):
        string, mark = token.group(1), token.group(2)
        if mark in (",", ":"):
            expect_key = mark == "," and bool(stack) and stack[-1][1] is None
            continue
        if mark in ("}", "]"):
            if stack.pop()[1] is None:
                keys.pop()
            expect_key = False
            continue
        if expect_key and string is not None:  # a member's key
            keys[-1] = json.loads(string)
            marks[(*stack[-1][0], keys[-1])] = where(token.start())
            expect_key = False
            continue
        if not stack:
            path: tuple[str | int, ...] = ()
            marks[path] = where(token.start())
        elif stack[-1][1] is None:
            path = (*stack[-1][0], keys[-1])
        else:
            counter = stack[-1][1]
            path = (*stack[-1][0], counter[0])
            counter[0] += 1
            marks[path] = where(token.start())
        if mark == "{":
            stack.append((path, None))
            keys.append("")
            expect_key = True
        elif mark == "[":
            stack.append((path, [0]))
    return marks
