"""Typed, frozen records for the documents every command reads (profiles, lockfiles, the catalog), and
their errors at file:line:col.

They are msgspec Structs, not pydantic models: a Struct class costs about 20 us to define where a pydantic
model costs 1-3 ms, and a command reads a hundred of them before doing anything (issue 21: that alone was
more than a cold `render` may take). msgspec's checks are strict the way YAML wants them: `true` or
`18.0` where a count belongs is refused, not read as 1 or 18.

msgspec stops at the first error; `load` goes on past it (on the error path only) so that a user sees
every problem of a document at once, each at the file and line that supplied it.
"""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any, Self, TypeVar

import msgspec

from stackpin.errors import InputError, Location, Problem, clip

T = TypeVar("T")
FieldPath = tuple[str | int, ...]
MAX_PROBLEMS = 50  # of one document: past this, a file is not the one the user meant


class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A frozen, typo-proof record; its YAML keys are its Python names (the catalog's files).

    A subclass repeats `frozen=True` (`class Gpu(Record, frozen=True)`): msgspec inherits it, but mypy
    reads a subclass without it as mutable."""

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (not re-checked: the caller's values are already typed)."""
        return msgspec.structs.replace(self, **changes)

    def to_data(self) -> dict[str, Any]:
        """Plain JSON-able data under the YAML names, in field order; enums as their values."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data


class CamelRecord(Record, frozen=True, rename="camel"):
    """A record whose YAML keys are camelCase (profiles, lockfiles): `max_num_seqs` is `maxNumSeqs`."""


class Invalid(ValueError):
    """Raised by a record's `__post_init__`: `field` (its Python name) holds a value the type allows but
    the rule does not. The error is reported at that field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def fields(record: type[msgspec.Struct]) -> dict[str, str]:
    """A record type's fields, YAML name -> Python name, in order."""
    return {f.encode_name: f.name for f in msgspec.structs.fields(record)}


# `Expected `int` >= 1 - at `$.spec.pools[0].tp`` -> the message and the path.
_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>.*)`$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<name>.*)`$", re.DOTALL)


DecHook = Callable[[type, Any], Any]  # msgspec's: a value of a type it does not know (a Version from text)


def _converts(value: Any, kind: Any, dec_hook: DecHook | None) -> bool:
    try:
        msgspec.convert(value, kind, dec_hook=dec_hook)
    except msgspec.ValidationError:
        return False
    return True


def _parse_path(text: str, root: Any, document: Any, dec_hook: DecHook | None) -> FieldPath:
    """msgspec's path as steps. It writes a mapping's key as `[...]`: that key is found again, the first
    entry of the mapping (in order, as msgspec checks them) whose key or value does not convert."""
    path: list[str | int] = []
    for m in _STEP.finditer(text):
        if m.group(0) != "[...]":
            path.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
            continue
        node, args = _value_at(document, tuple(path)), _args(_type_at(root, tuple(path)))
        if isinstance(node, dict) and len(args) == 2:
            bad = next((k for k, v in node.items()
                        if not _converts(k, args[0], dec_hook) or not _converts(v, args[1], dec_hook)), None)
            if bad is not None:
                path.append(bad)
    return tuple(path)


def _args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is typing.Annotated:
        return _args(typing.get_args(annotation)[0])
    return typing.get_args(annotation)


def _strip(annotation: Any) -> Any:
    """The type under Annotated[...] and `| None`."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation


def _type_at(root: Any, path: FieldPath) -> Any:
    """The declared type at a path into a document of type `root` (None when the path leaves the types)."""
    current = _strip(root)
    for step in path:
        if isinstance(current, type) and issubclass(current, msgspec.Struct):
            hints = typing.get_type_hints(current, include_extras=True)
            name = fields(current).get(str(step))
            if name is None:
                return None
            current = _strip(hints[name])
        elif typing.get_origin(current) in (list, tuple, dict):
            args = _args(current)
            current = _strip(args[-1]) if args else None
        else:
            return None
    return current


def _message(root: Any, document: Any, path: FieldPath, message: str) -> str:
    if message.startswith("Invalid enum value"):
        declared = _type_at(root, path)
        allowed = ([m.value for m in declared] if isinstance(declared, type) and issubclass(declared, Enum)
                   else typing.get_args(declared) if typing.get_origin(declared) is typing.Literal else ())
        if allowed:
            return f"must be one of {', '.join(repr(a) for a in allowed)}, got {clip(repr(_value_at(document, path)))}"
    return message.replace("`", "'")


def _value_at(document: Any, path: FieldPath) -> Any:
    node = document
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _one(exc: msgspec.ValidationError, root: Any, document: Any,
         dec_hook: DecHook | None = None) -> tuple[FieldPath, str, str]:
    """(path, message, kind) of one msgspec error; kind is unknown, missing, invalid or value."""
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any text
    message, path = match.group("msg"), _parse_path(match.group("path") or "", root, document, dec_hook)
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, Invalid):
        owner = _type_at(root, path)
        name = next((k for k, v in fields(owner).items() if v == cause.field), cause.field) \
            if isinstance(owner, type) and issubclass(owner, msgspec.Struct) else cause.field
        return (*path, name), str(cause), "invalid"
    if unknown := _UNKNOWN.match(message):
        name = unknown.group("name")
        owner = _type_at(root, path)
        text = "unknown field"
        if isinstance(owner, type) and issubclass(owner, msgspec.Struct):
            close = difflib.get_close_matches(name, list(fields(owner)), n=1)
            if close:
                text += f" (did you mean '{close[0]}'?)"
        return (*path, name), text, "unknown"
    if missing := _MISSING.match(message):
        return (*path, missing.group("name")), "required field is missing", "missing"
    return path, _message(root, document, path, message), "value"


def _drop(document: Any, path: FieldPath) -> bool:
    """Remove the value at `path` so that checking can go on past it; False when it cannot be removed."""
    if not path or not isinstance(path[-1], str):
        return False
    node = document
    for step in path[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return False
    if not isinstance(node, dict) or path[-1] not in node:
        return False
    del node[path[-1]]
    return True


def _errors(data: Any, root: Any, dec_hook: DecHook | None = None) -> Iterator[tuple[FieldPath, str]]:
    document = copy.deepcopy(data)
    seen: set[FieldPath] = set()
    for _ in range(MAX_PROBLEMS):
        try:
            msgspec.convert(document, root, dec_hook=dec_hook)
            return
        except msgspec.ValidationError as exc:
            path, message, kind = _one(exc, root, document, dec_hook)
            if path in seen:  # a value removed left its field missing: reported already
                return
            seen.add(path)
            yield path, message
            if kind == "missing" or not _drop(document, path):
                return


def load(data: Any, root: type[T], locate: Callable[[FieldPath], Location], dec_hook: DecHook | None = None) -> T:
    """`data` (parsed YAML) as a `root`; InputError lists every problem at its file:line:col, in file order."""
    try:
        return msgspec.convert(data, root, dec_hook=dec_hook)
    except msgspec.ValidationError:
        pass
    problems = [Problem(locate(path), ".".join(str(p) for p in path), message)
                for path, message in _errors(data, root, dec_hook)]
    raise InputError(sorted(problems, key=lambda p: (p.location.file, p.location.line, p.location.col)))


def problems_of(data: Any, root: type[Any], dec_hook: DecHook | None = None) -> list[tuple[FieldPath, str]]:
    """Every (path, message) of `data` as a `root`; empty when it is one."""
    return list(_errors(data, root, dec_hook))
