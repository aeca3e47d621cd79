"""Errors a user can act on. The CLI prints each as one line and exits with its code; no traceback."""

from __future__ import annotations

import re

MAX_LINE = 500  # characters of one error line; a 1 MB value must not make a 1 MB line
# C0 and C1 controls and the Unicode line and paragraph separators: what breaks a line (str.splitlines breaks
# at \x1c-\x1e and \x85 too) or drives a terminal (ESC).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    """`text` with each control character written as repr writes it (`\\n`, `\\x1b`, `\\u2028`): a line that
    quotes a value stays one line, and a value cannot forge the line after it or colour a terminal."""
    return _CONTROL.sub(lambda found: repr(found[0])[1:-1], text)


def clip(value: object, limit: int = 80) -> str:
    """`value` as text, cut to `limit` characters with a note of how much was left out."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def clip_middle(text: str, limit: int = MAX_LINE) -> str:
    """Cut the middle out of a long line: its start names the file and field, its end the verdict."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]} ...({len(text) - head - tail} characters)... {text[-tail:]}"


class StackpinError(Exception):
    """A problem with the user's input or environment (exit code 2 unless a subclass says otherwise)."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def lines(self) -> list[str]:
        """The one-line-per-problem form the CLI prints."""
        text = self.message if not self.hint else f"{self.message} (hint: {self.hint})"
        return text.splitlines()


class Location:
    """Where a value sits in a YAML file: `path:line:col` (1-based, as editors count)."""

    __slots__ = ("file", "line", "col")

    def __init__(self, file: str, line: int = 0, col: int = 0) -> None:
        self.file, self.line, self.col = file, line, col

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.line else self.file


class Problem:
    """One located problem: `file:line:col: field.path: message`."""

    __slots__ = ("location", "field", "message")

    def __init__(self, location: Location, field: str, message: str) -> None:
        self.location, self.field, self.message = location, field, message

    def __str__(self) -> str:
        field = f" {self.field}:" if self.field else ""
        # One line per problem, even when a key or value quoted in it holds a line break.
        line = f"{self.location}:{clip(field, 200)} {self.message}"
        return escape_controls(clip_middle(line))


class InputError(StackpinError):
    """One or more located problems in input files; all are reported, one line each."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


class ResolveError(StackpinError):
    """A reference could not be resolved to an immutable digest (registry, layout, network)."""


class IntegrityError(ResolveError):
    """Bytes did not match the digest that names them."""


class RegistryUnreachable(ResolveError):
    """The network carried no answer from a registry or its token service (refused, name not resolved,
    timed out). `registry` is the registry the reference names (not the mirror it was asked through), for
    hints that suggest another way to it."""

    def __init__(self, message: str, hint: str | None = None, *, registry: str | None = None) -> None:
        super().__init__(message, hint)
        self.registry = registry
