"""JSON from outside files and servers, its nesting bounded before it is decoded.

Python's json and msgspec both decode arrays and objects by recursion: a file of 100,000 `[` is a
RecursionError (a traceback) or worse, whatever the byte bound on the file. `check_depth` counts the
brackets outside strings first, without recursion; `loads` is json.loads behind it.
"""

from __future__ import annotations

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
