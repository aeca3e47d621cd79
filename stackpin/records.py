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

import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from typing import Any, Self, TypeVar

import msgspec

from stackpin.errors import InputError, Location, Problem, clip

T = TypeVar("T")
FieldPath = tuple[str | int, ...]
DecHook = Callable[[type, Any], Any]  # msgspec's: a value of a type it does not know (a Version from text)


class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A frozen, typo-proof record; its YAML keys are its Python names (the catalog's files).

    A subclass repeats `frozen=True, kw_only=True` (`class Gpu(Record, frozen=True, kw_only=True)`):
    mypy reads a subclass without frozen as mutable, and msgspec applies kw_only to the fields a class
    defines itself (without it a required field may not follow one with a default)."""

    @classmethod
    def from_data(cls, data: Any) -> Self:
        """`data` (YAML or JSON as Python) checked into this type; msgspec.ValidationError names the first
        problem (`load` names all of them, at file:line:col)."""
        return msgspec.convert(data, cls)

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (not re-checked: the caller's values are already typed)."""
        return msgspec.structs.replace(self, **changes)

    def to_data(self) -> dict[str, Any]:
        """Plain JSON-able data under the YAML names, in field order; enums as their values."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data


class CamelRecord(Record, frozen=True, kw_only=True, rename="camel"):
    """A record whose YAML keys are camelCase (profiles, lockfiles): `max_num_seqs` is `maxNumSeqs`."""


NO_NEWLINE = r"(?!\n)"


def anchored(pattern: str) -> str:
    """A `^...$` pattern that also refuses a trailing line break: msgspec matches with Python's re.search,
    whose `$` matches before a final newline (`name: "web\\n"` would pass). The lookahead means
    nothing to an editor's ECMA-262 reading of the schema, where `$` is the end already."""
    return pattern[:-1] + NO_NEWLINE + "$" if pattern.endswith("$") else pattern


class Invalid(ValueError):
    """Raised by a record's `__post_init__`: `field` (its Python name) holds a value the type allows but
    the rule does not. The error is reported at that field. A pydantic record (stackpin/models.py) raises
    it from a model validator, and may name a field below its own, dotted (`waves.canary`)."""

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


def _parse_path(text: str) -> FieldPath:
    return tuple(m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _STEP.finditer(text)
                 if m.group(0) != "[...]")


def _args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is typing.Annotated:
        return _args(typing.get_args(annotation)[0])
    return typing.get_args(annotation)


def strip_annotation(annotation: Any) -> Any:
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
    current = strip_annotation(root)
    for step in path:
        if isinstance(current, type) and issubclass(current, msgspec.Struct):
            hints = typing.get_type_hints(current, include_extras=True)
            name = fields(current).get(str(step))
            if name is None:
                return None
            current = strip_annotation(hints[name])
        elif typing.get_origin(current) in (list, tuple, dict):
            args = _args(current)
            current = strip_annotation(args[-1]) if args else None
        else:
            return None
    return current


_TYPES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false", "null": "null",
          "object": "a mapping", "array": "a list"}
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`(?:, got `(?P<got>[^`]+)`| (?P<rule>.+))$", re.DOTALL)
_REGEX = re.compile(r"^matching regex '(?P<pattern>.*)'$", re.DOTALL)


def _kind(name: str) -> str:
    return " or ".join(_TYPES.get(part, part) for part in name.split(" | "))


_NAMES = {int: "int", float: "float", str: "str", type(None): "null", dict: "object", list: "array"}


def kind_of(value: Any) -> str:
    """What a value is, in an error's words (`got a string`); true and false as the file spells them. For
    the pydantic records' errors (stackpin/models.py), which name the value, not its type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    name = _NAMES.get(type(value))
    return _TYPES[name] if name else type(value).__name__


def _message(root: Any, document: Any, path: FieldPath, message: str) -> str:
    """msgspec's wording in the user's terms (`Expected `int`, got `str`` -> `must be an integer, got a
    string`); an enum's error lists the values it takes."""
    expected = _EXPECTED.match(message)
    if message.startswith("Invalid enum value") or (expected and expected.group("got")):
        declared = _type_at(root, path)
        allowed = ([m.value for m in declared] if isinstance(declared, type) and issubclass(declared, Enum)
                   else typing.get_args(declared) if typing.get_origin(declared) is typing.Literal else ())
        if allowed:
            return f"must be one of {', '.join(repr(a) for a in allowed)}, got {clip(repr(_value_at(document, path)))}"
    if expected:
        want, got, rule = expected.group("want", "got", "rule")
        if got is not None:
            value = _value_at(document, path)
            # "got true" rather than "got true or false": the value itself, as the file spells it.
            shown = ("true" if value else "false") if got == "bool" and isinstance(value, bool) else _kind(got)
            return f"must be {_kind(want)}, got {shown}"
        if pattern := _REGEX.match(rule):
            shown = pattern.group("pattern").replace("\\\\", "\\")  # msgspec doubles the backslashes
            return f"must match the pattern {shown.replace(NO_NEWLINE, '')}"
        return f"must be {_kind(want)} {rule}"
    return message.replace("`", "'")


def _value_at(document: Any, path: FieldPath) -> Any:
    node = document
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def unknown_field(name: str, known: Iterable[str]) -> str:
    """The message for a key no field of its record has, naming the closest one."""
    import difflib  # the error path only

    close = difflib.get_close_matches(name, list(known), n=1)
    return "unknown field" + (f" (did you mean '{close[0]}'?)" if close else "")


def _one(exc: msgspec.ValidationError, root: Any, document: Any) -> tuple[FieldPath, str]:
    """(path, message) of one msgspec error."""
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any text
    message, path = match.group("msg"), _parse_path(match.group("path") or "")
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, Invalid):
        owner = _type_at(root, path)
        name = next((k for k, v in fields(owner).items() if v == cause.field), cause.field) \
            if isinstance(owner, type) and issubclass(owner, msgspec.Struct) else cause.field
        return (*path, name), str(cause)
    if unknown := _UNKNOWN.match(message):
        name = unknown.group("name")
        owner = _type_at(root, path)
        known = fields(owner) if isinstance(owner, type) and issubclass(owner, msgspec.Struct) else {}
        return (*path, name), unknown_field(name, known)
    if missing := _MISSING.match(message):
        return (*path, missing.group("name")), "required field is missing"
    return path, _message(root, document, path, message)


def _errors(data: Any, declared: Any, dec_hook: DecHook | None,
            path: FieldPath = ()) -> Iterator[tuple[FieldPath, str]]:
    """Every problem of `data` as a `declared`: each field of a record is checked on its own, so that one
    wrong field does not hide the next; a record's own rules (`__post_init__`) once its fields are right."""
    try:
        msgspec.convert(data, declared, dec_hook=dec_hook)
        return
    except msgspec.ValidationError as exc:
        first = exc
    inner, found = strip_annotation(declared), False
    if isinstance(inner, type) and issubclass(inner, msgspec.Struct) and isinstance(data, dict):
        names, hints = fields(inner), typing.get_type_hints(inner, include_extras=True)
        for key, value in data.items():
            if key not in names:
                found = True
                yield (*path, key), unknown_field(str(key), names)
                continue
            for problem in _errors(value, hints[names[key]], dec_hook, (*path, key)):
                found = True
                yield problem
        for f in msgspec.structs.fields(inner):
            if f.required and f.encode_name not in data:
                found = True
                yield (*path, f.encode_name), "required field is missing"
    elif typing.get_origin(inner) in (list, dict) and isinstance(data, typing.get_origin(inner)):
        items = enumerate(data) if isinstance(data, list) else ((k, data[k]) for k in data)
        item_type = _args(inner)[-1]
        for key, value in items:
            for problem in _errors(value, item_type, dec_hook, (*path, key)):
                found = True
                yield problem
    if not found:  # the first problem is the value itself (its type, a bound, a record's own rule)
        where, message = _one(first, declared, data)
        yield (*path, *where), message


def load(data: Any, root: type[T], locate: Callable[[FieldPath], Location], dec_hook: DecHook | None = None) -> T:
    """`data` (parsed YAML) as a `root`; InputError lists every problem at its file:line:col, in file order.
    `dec_hook` reads the values of types msgspec does not know (the catalog's versions)."""
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
