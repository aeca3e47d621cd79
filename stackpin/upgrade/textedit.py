"""Edit a YAML profile as text, line by line, where its own positions (yamlio.parse_yaml: each field at
its key) put each field: the candidate keeps the current file's comments, order and quoting, and differs
only where the upgrade changes something. Block-style mappings only; a field the edit cannot place is
one error, never a rewritten file."""

from __future__ import annotations

import re
from typing import Any

import yaml

from stackpin.errors import StackpinError
from stackpin.yamlio import FieldPath, parse_yaml

# The scalar after `key:` on its line: quoted, or plain up to a comment or the line's end.
_VALUE = re.compile(r"\s*:[ \t]*(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^#\n]*?)(?=[ \t]+#|[ \t]*$)",
                    re.MULTILINE)


def scalar_text(value: Any) -> str:
    """A value as YAML flow text on one line, quoted only where YAML would read it as something else."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return text.removesuffix("...").strip()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


class TextEdit:
    """One profile file's text, edited in place; every edit re-reads the positions of the text so far."""

    def __init__(self, text: str, display: str) -> None:
        self.text, self.display = text, display

    def _fail(self, path: FieldPath, why: str) -> StackpinError:
        return StackpinError(f"{self.display}: {'.'.join(map(str, path)) or 'the document'}: {why}",
                             "edit the profile by hand, or write the mapping in block style")

    def _read(self, path: FieldPath) -> tuple[bool, Any, list[str], tuple[int, int]]:
        """Whether the file has `path`, its value, the lines, and the (0-based) line and column of its key."""
        data, positions = parse_yaml(self.text, self.display)
        for key in path:
            if not isinstance(data, dict) or key not in data:
                return False, None, self.text.splitlines(keepends=True), (0, 0)
            data = data[key]
        where = positions.locate(path)
        return True, data, self.text.splitlines(keepends=True), (where.line - 1, where.col - 1)

    def has(self, path: FieldPath) -> bool:
        return self._read(path)[0]

    def _key_end(self, lines: list[str], at: tuple[int, int], path: FieldPath) -> int:
        """Where the key that starts at `at` ends on its line (a quoted key included)."""
        line, col = at
        text, key = lines[line], str(path[-1])
        for spelled in (key, f'"{key}"', f"'{key}'"):
            if text.startswith(spelled, col):
                return col + len(spelled)
        raise self._fail(path, "cannot find the key's text")

    def set(self, path: FieldPath, value: Any, comment: str | None = None) -> None:
        """Replace a scalar's text, or insert the field (and any mapping above it) when the file lacks it.
        `comment`: replaces the line's comment (one that described the old value would mislead)."""
        present, old, lines, at = self._read(path)
        if not present:
            self.insert(path, value)
            return
        found = _VALUE.match(lines[at[0]], self._key_end(lines, at, path))
        if isinstance(old, dict | list) or found is None or not found.group("value"):
            raise self._fail(path, "is not a value on its key's line")
        text = lines[at[0]]
        rest = text[found.end("value"):]
        if comment is not None:
            rest = f"  # {comment}" + ("\n" if text.endswith("\n") else "")
        lines[at[0]] = text[: found.start("value")] + scalar_text(value) + rest
        self.text = "".join(lines)

    def rename(self, path: FieldPath, new_key: str) -> None:
        """Rename the key at `path`, keeping its value, position and comments."""
        present, _, lines, (line, col) = self._read(path)
        if not present:
            raise self._fail(path, "not in this file")
        end = self._key_end(lines, (line, col), path)
        lines[line] = lines[line][:col] + scalar_text(new_key) + lines[line][end:]
        self.text = "".join(lines)

    def delete(self, path: FieldPath) -> None:
        """Remove a key whose value is a scalar on the key's own line."""
        present, old, lines, at = self._read(path)
        if not present:
            return
        if isinstance(old, dict | list) or lines[at[0]][: at[1]].strip():
            raise self._fail(path, "only a one-line field of a block mapping can be removed")
        del lines[at[0]]
        self.text = "".join(lines)

    def insert(self, path: FieldPath, value: Any) -> None:
        """Add `path: value` at the end of the deepest mapping the file already has on the way to it."""
        depth = len(path) - 1
        while depth > 0 and not self.has(path[:depth]):
            depth -= 1
        parent = path[:depth]
        _, node, lines, _ = self._read(parent)
        if not isinstance(node, dict) or not node:
            raise self._fail(parent, "is not a block mapping with fields to add to")
        _, _, _, (first, col) = self._read(parent + (next(iter(node)),))
        if lines[first][:col].strip():
            raise self._fail(parent, "is a flow mapping")
        end = first
        for index in range(first + 1, len(lines)):  # the mapping ends at the first line indented less
            stripped = lines[index].strip()
            if stripped and not stripped.startswith("#"):
                if _indent(lines[index]) < col:
                    break
                end = index
        rest = path[depth:]
        block = [" " * (col + 2 * level) + f"{scalar_text(key)}:\n" for level, key in enumerate(rest[:-1])]
        block.append(" " * (col + 2 * (len(rest) - 1)) + f"{scalar_text(rest[-1])}: {scalar_text(value)}\n")
        if not lines[end].endswith("\n"):
            lines[end] += "\n"
        lines[end + 1:end + 1] = block
        self.text = "".join(lines)
