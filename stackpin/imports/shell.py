"""The commands of a container's launch script (`/bin/sh -c SCRIPT`), split into words as a POSIX shell would.

Upstream DGDs start workers through scripts: `set -e`, `ulimit`, `export`, then `exec python3 -m dynamo.vllm \\`
with `"${MODEL_PATH}"` and multi-line JSON in single quotes. `shlex` splits words but forgets which were
quoted, and `'${X}'` must stay literal while `"${X}"` expands, so words are built here with their quoting in
view. Redirections (`2>&1`, `> log`, `>> log`, `&> log`, `< in`) and pipes (`| tee FILE`) change where a
command's output goes, never its words: they are parsed away and kept beside the command (`Script.redirects`,
`Script.piped`) so callers can report them. Only what such scripts use is understood; command substitution,
globs that matter, here-documents and control flow are refused with one line (`ShellError`), never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_SCRIPT = 256 * 1024  # a launch script is a few KB
MAX_WORDS = 20_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
# A redirection operator with its optional file descriptor (POSIX io_number, bash's `&>` / `&>>`).
_REDIRECT = re.compile(r"(?:[0-9]+|&)?(?:>>|>&|>\||<>|<&|>|<)")
_CONTROL = frozenset({"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
                      "function", "{", "}", "(", ")"})


class ShellError(ValueError):
    """A script construct stackpin does not evaluate."""


@dataclass(frozen=True)
class Script:
    """The script's simple commands in order (each its words after expansion) and what it left unresolved."""

    commands: tuple[tuple[str, ...], ...]
    unresolved: tuple[str, ...]  # variables referenced but set nowhere stackpin can see (left as `${NAME}`)
    redirects: tuple[tuple[str, ...], ...] = ()  # per command, its redirections as written ("2>&1", "> /tmp/x")
    piped: tuple[bool, ...] = ()  # per command: its output goes to the next command (`|`)


class _Lexer:
    def __init__(self, text: str, env: Mapping[str, str]) -> None:
        self.text, self.i, self.env = text, 0, dict(env)
        self.unresolved: list[str] = []

    def _expand(self) -> str:
        """`$NAME` / `${NAME}` / `${NAME:-default}` at self.i (on the `$`)."""
        text, i = self.text, self.i + 1
        if i < len(text) and text[i] in "(`":
            raise ShellError("command substitution $(...) is not evaluated")
        if i < len(text) and text[i] == "{":
            end = text.find("}", i)
            if end < 0:
                raise ShellError("unterminated ${")
            body = text[i + 1:end]
            self.i = end + 1
            name, sep, default = body.partition(":-")
            if not _NAME.fullmatch(name):
                raise ShellError(f"parameter expansion ${{{body[:40]}}} is not evaluated")
            return self._value(name, default if sep else None)
        match = _NAME.match(text, i)
        if not match:
            self.i = i
            return "$"  # a lone `$` is literal
        self.i = match.end()
        return self._value(match.group(), None)

    def _value(self, name: str, default: str | None) -> str:
        if name in self.env and (default is None or self.env[name] != ""):
            return self.env[name]
        if default is not None:
            return default
        if name not in self.unresolved:
            self.unresolved.append(name)
        return "${" + name + "}"

    def next_item(self) -> tuple[str, str] | None:
        """The next ("word", text) or ("sep", separator); None at the end. Words are expanded as they are
        read, so an assignment applied between two calls reaches the words after it."""
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and text[self.i + 1:self.i + 2] == "\n":
                self.i += 2  # line continuation
            elif c == "\n":
                self.i += 1
                return ("sep", "\n")
            elif c == "#":
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end
            elif (match := _REDIRECT.match(text, self.i)) and (c != "&" or match.group().startswith("&>")):
                return ("redirect", self._redirect(match.group()))
            elif c in ";&|":
                two = text[self.i:self.i + 2]
                sep = two if two in ("&&", "||") else c
                self.i += len(sep)
                return ("sep", sep)
            else:
                return ("word", self._word())
        return None

    def _redirect(self, operator: str) -> str:
        """`operator` at self.i (a word's start: digits before `<`/`>` are its file descriptor) and its target
        word, as text; the target is expanded like any word."""
        self.i += len(operator)
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1
        if self.i >= len(self.text) or self.text[self.i] in "\n;&|<>":
            raise ShellError(f"the redirection {operator!r} names no target")
        return f"{operator}{self._word()}" if operator.endswith("&") else f"{operator} {self._word()}"

    def _word(self) -> str:
        text, parts = self.text, []
        while self.i < len(text) and text[self.i] not in " \t\n;&|<>":
            c = text[self.i]
            if c == "'":
                end = text.find("'", self.i + 1)
                if end < 0:
                    raise ShellError("unterminated single quote")
                parts.append(text[self.i + 1:end])
                self.i = end + 1
            elif c == '"':
                parts.append(self._double_quoted())
            elif c == "\\":
                nxt = text[self.i + 1:self.i + 2]
                self.i += 2
                if nxt != "\n":
                    parts.append(nxt)
            elif c == "$":
                value = self._expand()
                if any(ch in value for ch in " \t\n"):
                    raise ShellError(f"an unquoted expansion holding spaces ({value[:40]!r}) would be split into "
                                     "words, which stackpin does not evaluate; quote it")
                parts.append(value)
            elif c == "`":
                raise ShellError("command substitution `...` is not evaluated")
            else:
                parts.append(c)
                self.i += 1
        return "".join(parts)

    def _double_quoted(self) -> str:
        text, parts = self.text, list[str]()
        self.i += 1
        while True:
            if self.i >= len(text):
                raise ShellError("unterminated double quote")
            c = text[self.i]
            if c == '"':
                self.i += 1
                return "".join(parts)
            if c == "\\" and text[self.i + 1:self.i + 2] in ('"', "\\", "$", "`", "\n"):
                if text[self.i + 1] != "\n":
                    parts.append(text[self.i + 1])
                self.i += 2
            elif c == "$":
                parts.append(self._expand())
            elif c == "`":
                raise ShellError("command substitution `...` is not evaluated")
            else:
                parts.append(c)
                self.i += 1


def parse_script(script: str, env: Mapping[str, str]) -> Script:
    """Split `script` into simple commands, expanding variables from `env` and from the script's own
    assignments (`export A=B`, `A=B`) as it goes."""
    if len(script) > MAX_SCRIPT:
        raise ShellError(f"the script is longer than {MAX_SCRIPT} characters")
    if "<<" in script:
        raise ShellError("here-documents are not evaluated")
    lexer = _Lexer(script, env)
    commands: list[tuple[str, ...]] = []
    redirects: list[tuple[str, ...]] = []
    piped: list[bool] = []
    current: list[str] = []
    current_redirects: list[str] = []

    def finish(separator: str) -> None:
        if current:
            words = tuple(current)
            if words[0] in _CONTROL:
                raise ShellError(f"control flow ({words[0]}) is not evaluated")
            _assign(words, lexer.env)
            commands.append(words)
            redirects.append(tuple(current_redirects))
            piped.append(separator == "|")
        elif current_redirects:  # `> log` alone truncates a file; nothing runs
            commands.append(())
            redirects.append(tuple(current_redirects))
            piped.append(separator == "|")
        current.clear()
        current_redirects.clear()

    words = 0
    while (item := lexer.next_item()) is not None:
        kind, text = item
        if kind == "sep":
            finish(text)
            continue
        if kind == "redirect":
            current_redirects.append(text)
            continue
        words += 1
        if words > MAX_WORDS:
            raise ShellError(f"more than {MAX_WORDS} words")
        current.append(text)
    finish("")
    return Script(tuple(commands), tuple(lexer.unresolved), tuple(redirects), tuple(piped))


def _assign(words: tuple[str, ...], env: dict[str, str]) -> None:
    """`export A=B C=D` or a bare `A=B`: later commands see the values."""
    rest = words[1:] if words[0] == "export" else words
    if words[0] != "export" and not all(_ASSIGNMENT.fullmatch(w) for w in words):
        return
    for word in rest:
        if match := _ASSIGNMENT.fullmatch(word):
            env[match.group(1)] = match.group(2)
