"""YAML in and out: loading that remembers where every value came from, canonical dumping.

Loading composes the node graph (which carries marks) and builds plain Python values alongside a
map from field path (a tuple of keys and indexes) to the file position, so errors found later, by
pydantic or by a validation rule, can still point at `file:line:col`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from stackpin.errors import InputError, Location, Problem

FieldPath = tuple[str | int, ...]


class Positions:
    """Field path -> Location for one loaded document (falls back to the nearest known parent)."""

    def __init__(self, file: str, marks: dict[FieldPath, tuple[int, int]]) -> None:
        self.file = file
        self._marks = marks

    def locate(self, path: FieldPath) -> Location:
        path = tuple(path)
        while path and path not in self._marks:
            path = path[:-1]
        line, col = self._marks.get(path, (1, 1))
        return Location(self.file, line, col)


# Values built, aliases expanded: far above any profile, far below what an alias bomb expands to.
MAX_NODES = 100_000
# Integers beyond 64 bits are no sane setting and overflow float arithmetic later.
MAX_INT = 2**63


def _build(node: yaml.Node, path: FieldPath, marks: dict[FieldPath, tuple[int, int]],
           loader: yaml.SafeLoader, file: str) -> Any:
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if len(marks) > MAX_NODES:
        raise InputError([Problem(Location(file, *marks[path]), "", f"invalid YAML: more than {MAX_NODES} "
                                  "values once aliases are expanded")])
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InputError([Problem(Location(file, key_node.start_mark.line + 1,
                                                   key_node.start_mark.column + 1), "",
                                          "YAML merge keys (<<) are not supported; use extends:")])
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                raise InputError([Problem(Location(file, key_node.start_mark.line + 1,
                                                   key_node.start_mark.column + 1),
                                          ".".join(map(str, path + (key,))), "duplicate key")])
            out[key] = _build(value_node, path + (key,), marks, loader, file)
            # Point a key's errors at the key itself, where editors put the cursor.
            marks[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), marks, loader, file) for i, item in enumerate(node.value)]
    value = loader.construct_object(node, deep=True)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_INT:
        raise InputError([Problem(Location(file, *marks[path]), ".".join(map(str, path)),
                                  "integer out of range (more than 64 bits)")])
    return value


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, Positions]:
    """Load one YAML document from `path`; bad input raises InputError with file:line:col."""
    file = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError([Problem(Location(file), "", "no such file")]) from None
    except IsADirectoryError:
        raise InputError([Problem(Location(file), "", "is a directory, expected a YAML file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Problem(Location(file), "", f"cannot read: {exc}")]) from None
    return parse_yaml(text, file)


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str, file: str) -> tuple[Any, Positions]:
    try:
        yaml.reader.Reader(text)  # PyYAML's check for unprintable characters (NUL, ...), with a position
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - text.rfind("\n", 0, exc.position)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError([Problem(Location(file, line, col), "", f"invalid YAML: unacceptable character "
                                  f"#x{char:04x}: {exc.reason}")]) from None
    # libyaml parses ~10x faster than PyYAML's Python parser and gives the same nodes and marks.
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Positions(file, {})
        marks: dict[FieldPath, tuple[int, int]] = {}
        data = _build(node, (), marks, loader, file)
        return data, Positions(file, marks)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        reason = exc.problem or exc.context or "invalid YAML"
        raise InputError([Problem(Location(file, line, col), "", f"invalid YAML: {reason}")]) from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        raise InputError([Problem(Location(file), "", f"invalid YAML: {exc}")]) from None
    finally:
        loader.dispose()


class _CanonicalDumper(yaml.SafeDumper):
    """Block style, no aliases, stable string quoting: the same data always gives the same bytes.

    PyYAML's own emitter, not libyaml's: the two write different bytes for some values (trailing
    line breaks, characters beyond the BMP, complex keys), and output must not depend on how PyYAML
    was built on a machine."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# Line breaks YAML knows besides \n: PyYAML writes them raw in plain or single-quoted scalars,
# where a reader folds them, so such strings are emitted double-quoted (escaped) instead.
_OTHER_BREAKS = ("\x85", "\u2028", "\u2029", "\r")


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if any(b in value for b in _OTHER_BREAKS):
        style: str | None = '"'
    else:
        style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_CanonicalDumper.add_representer(str, _str_representer)


def dump_yaml(data: Any, sort_keys: bool = True) -> str:
    return yaml.dump(data, Dumper=_CanonicalDumper, sort_keys=sort_keys, default_flow_style=False,
                     allow_unicode=True, width=4096)


def dump_yaml_all(docs: list[Any], sort_keys: bool = True) -> str:
    return yaml.dump_all(docs, Dumper=_CanonicalDumper, sort_keys=sort_keys,
                         default_flow_style=False, allow_unicode=True, width=4096)


def _write_failed(path: Path, exc: OSError) -> InputError:
    reason = exc.strerror or type(exc).__name__
    return InputError([Problem(Location(str(path)), "", f"cannot write: {reason}")])


def write_files(files: Mapping[Path, str | bytes]) -> None:
    """Write several files all or nothing: every file goes to a temp file beside its target first,
    and only when all are written are they renamed into place. A failure (read-only, disk full, a
    directory where a file should be) leaves every existing file as it was and raises one line."""
    import tempfile  # only writers need it; validation never writes

    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            except OSError as exc:
                raise _write_failed(path, exc) from None
            staged.append((tmp, path))
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data.encode("utf-8") if isinstance(data, str) else data)
                os.chmod(tmp, 0o644)
            except OSError as exc:
                raise _write_failed(path, exc) from None
        for tmp, path in staged:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise _write_failed(path, exc) from None
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write via a temp file in the same directory and rename: a failed run never leaves half a file."""
    write_files({path: data})
