"""The pydantic records (bench results, upgrade proposals and trials, fleets, rollout records, diffs): one
base, `Model` (`CamelModel` for camelCase keys), and one reader, `load_model`, whose errors are those of
stackpin/records.py's msgspec records: every problem, each at its file:line:col, in the same words
(`path:line:col: field.path: message`).

These stay pydantic where the msgspec records do not: they are built field by field by the code that
measures or decides (a replay client, a trial, a rollout step), and pydantic checks a value when it is
built, not only when it is read back; and their files' bytes are pydantic's (a trial is
`model_dump_json`). It imports pydantic: a module that needs only msgspec records does not import it.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

import stackpin.jsonio as jsonio
from stackpin.errors import InputError, Location, Problem, clip
from stackpin.records import Invalid, kind_of, unknown_field
from stackpin.records import strip_annotation as _strip
from stackpin.yamlio import FieldPath, Positions

M = TypeVar("M", bound=BaseModel)
Locate = Callable[[FieldPath], Location]


class Model(BaseModel):
    """A frozen, typo-proof pydantic record; its keys are its Python names (bench results)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class CamelModel(Model):
    """A record whose keys are camelCase (proposals, trials, fleets, rollout records, diffs)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


def load_model(data: Any, model: type[M], locate: Locate) -> M:
    """`data` (parsed YAML or JSON) as a `model`; InputError lists every problem at its file:line:col, in
    file order, worded as a profile's are."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [Problem(locate(path), ".".join(str(p) for p in path), message)
                    for path, message in problems_of(exc, data, model)]
    raise InputError(sorted(problems, key=lambda p: (p.location.file, p.location.line, p.location.col)))


def read_json_model(text: str, model: type[M], file: str,
                    parse_constant: Callable[[str], Any] | None = None) -> M:
    """JSON text (a result, a proposal, a trial) as a `model`: not JSON is one problem at its line and
    column; a document of wrong fields is every problem at the line and column of each."""
    data, locate = parse_json(text, file, parse_constant)
    return load_model(data, model, locate)


def parse_json(text: str, file: str, parse_constant: Callable[[str], Any] | None = None) -> tuple[Any, Locate]:
    """JSON text's data (nesting bounded, stackpin.jsonio) and where each of its values sits; not JSON is an
    InputError at the line and column the decoder stopped at."""
    try:
        data = jsonio.loads(text, parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        raise InputError([Problem(Location(file, exc.lineno, exc.colno), "", f"not JSON: {exc.msg}")]) from None
    except ValueError as exc:  # NestingError, a refused constant, an integer json does not convert
        raise InputError([Problem(Location(file), "", clip(exc, 200))]) from None
    positions: list[Positions] = []

    def locate(path: FieldPath) -> Location:  # the error path only: the text is scanned once, when asked
        if not positions:
            positions.append(Positions(file, jsonio.positions(text)))
        return positions[0].locate(path)

    return data, locate


class Invalids(ValueError):
    """Several of a record's own rules broken at once (a model validator that checks them all): each is
    reported, at the field it names."""

    def __init__(self, problems: list[Invalid]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def problems_of(exc: ValidationError, data: Any, model: type[BaseModel]) -> list[tuple[FieldPath, str]]:
    """Every (path, message) of a pydantic error of `data` as a `model`, in records' words."""
    out = []
    for error in exc.errors(include_url=False):
        path = _data_path(data, tuple(error["loc"]), error["type"] == "missing")
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, Invalids):
            out += [((*path, *_spelled(model, path, p.field)), str(p)) for p in cause.problems]
        else:
            out.append(_worded(error, path, model))
    return out


def _data_path(data: Any, loc: tuple[Any, ...], missing: bool) -> FieldPath:
    """pydantic's loc as a path into the document: the names of union members it inserts are dropped."""
    path: list[str | int] = []
    node = data
    for i, step in enumerate(loc):
        if isinstance(node, dict) and step in node or isinstance(node, list) and isinstance(step, int) \
                and 0 <= step < len(node):
            node = node[step]
            path.append(step)
        elif missing and i == len(loc) - 1:  # the name the missing field should have had
            path.append(step)
            node = None
    return tuple(path)


def _field(model: type[BaseModel], key: str | int) -> tuple[str, Any] | None:
    """(Python name, annotation) of the field of `model` spelled `key` in a file."""
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name, info.annotation
    return None


def _type_at(root: Any, path: FieldPath) -> Any:
    """The declared type at a path into a document of type `root` (None when the path leaves the types)."""
    current = _strip(root)
    for step in path:
        if isinstance(current, type) and issubclass(current, BaseModel):
            found = _field(current, step)
            if found is None:
                return None
            current = _strip(found[1])
        elif typing.get_origin(current) in (list, tuple, dict):
            args = [a for a in typing.get_args(current) if a is not Ellipsis]
            if typing.get_origin(current) is tuple and len(args) > 1 and isinstance(step, int):
                current = _strip(args[step]) if step < len(args) else None
            else:
                current = _strip(args[-1]) if args else None
        else:
            return None
    return current


def _keys(model: Any) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()] \
        if isinstance(model, type) and issubclass(model, BaseModel) else []


_KIND = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
         "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
         "bool_type": "true or false", "bool_parsing": "true or false", "model_type": "a mapping",
         "model_attributes_type": "a mapping", "dict_type": "a mapping", "list_type": "a list",
         "tuple_type": "a list", "none_required": "null"}
_BOUND = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
_LENGTH = {"string_too_short": ("a string", ">=", "min_length"), "string_too_long": ("a string", "<=", "max_length"),
           "too_short": ("a list", ">=", "min_length"), "too_long": ("a list", "<=", "max_length")}


def _worded(error: Any, path: FieldPath, model: type[BaseModel]) -> tuple[FieldPath, str]:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "missing":
        return path, "required field is missing"
    if kind == "extra_forbidden":
        return path, unknown_field(str(path[-1]), _keys(_type_at(model, path[:-1])))
    if kind in ("value_error", "assertion_error"):
        cause = ctx.get("error")
        if isinstance(cause, Invalid):  # a record's own rule, reported at the field it names
            return (*path, *_spelled(model, path, cause.field)), str(cause)
        return path, str(cause if cause is not None else error["msg"])
    if kind in _KIND:
        return path, f"must be {_KIND[kind]}, got {kind_of(value)}"
    if kind in ("literal_error", "enum"):
        declared = _type_at(model, path)
        allowed = ([m.value for m in declared] if isinstance(declared, type) and issubclass(declared, Enum)
                   else typing.get_args(declared) if typing.get_origin(declared) is typing.Literal else ())
        shown = ", ".join(repr(a) for a in allowed) if allowed else str(ctx.get("expected", "")).replace(" or ", ", ")
        return path, f"must be one of {shown}, got {clip(repr(value))}"
    if kind in _BOUND:
        bound = next(iter(ctx.values()))
        declared = _type_at(model, path)
        number = "an integer" if declared is int or (declared is None and isinstance(value, int)) else "a number"
        return path, f"must be {number} {_BOUND[kind]} {bound}"
    if kind in _LENGTH:
        what, op, key = _LENGTH[kind]
        return path, f"must be {what} of length {op} {ctx.get(key)}"
    if kind == "string_pattern_mismatch":
        return path, f"must match the pattern {ctx.get('pattern')}"
    if kind == "finite_number":
        return path, "must be a finite number"
    return path, str(error["msg"])


def _spelled(model: type[BaseModel], path: FieldPath, field: str) -> FieldPath:
    """`field` (Python names, dotted for a nested one: `waves.canary`, `racks.0.endpoint`) as the file
    spells it, below the record at `path`."""
    out: list[str | int] = []
    for step in field.split("."):
        owner = _type_at(model, (*path, *out))
        if step.isdigit():
            out.append(int(step))
        elif isinstance(owner, type) and issubclass(owner, BaseModel) and step in owner.model_fields:
            out.append(owner.model_fields[step].alias or step)
        else:
            out.append(step)
    return tuple(out)
