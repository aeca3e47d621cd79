"""The profile reference (docs/profile-reference.md), generated from the models so it cannot drift."""

from __future__ import annotations

import types
import typing
from enum import Enum
from typing import Any

import msgspec

from stackpin.profile.model import StackProfile
from stackpin.records import NO_NEWLINE


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return ", ".join(repr(a) if not isinstance(a, str) else f"`{a}`" for a in args)
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map {_type_name(args[0])} -> {_type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return ", ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return "object"
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "JSON value"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: msgspec.structs.FieldInfo) -> str:
    if field.required:
        return "required"
    if field.default_factory is not msgspec.NODEFAULT:
        value = field.default_factory()
        return "`{}`" if value == {} else "`[]`" if value == [] else "(defaults below)"
    if field.default is None:
        return "unset"
    value = field.default.value if isinstance(field.default, Enum) else field.default
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _metas(annotation: Any) -> list[msgspec.Meta]:
    """The Meta of a field's type: its own and those of the type under `| None`."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        return [*_metas(base), *(m for m in extras if isinstance(m, msgspec.Meta))]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _metas(arg)]
    return []


def _constraints(metas: list[msgspec.Meta]) -> str:
    out = []
    for meta in metas:
        for name in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            value = getattr(meta, name, None)
            if value is not None:
                # anchored()'s lookahead is for Python's re only: the reference shows the rule itself.
                out.append(f"{name} {value.replace(NO_NEWLINE, '') if name == 'pattern' else value}")
    return ", ".join(out)


def _nested(annotation: Any) -> type[msgspec.Struct] | None:
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested(arg)
        if found is not None:
            return found
    return None


def _rows(model: type[msgspec.Struct], prefix: str, seen: set[str]) -> list[str]:
    rows = []
    hints = typing.get_type_hints(model, include_extras=True)
    for field in msgspec.structs.fields(model):
        annotation = hints[field.name]
        path = f"{prefix}.{field.encode_name}" if prefix else field.encode_name
        nested = _nested(annotation)
        metas = _metas(annotation)
        description = " ".join(m.description for m in metas if m.description)
        notes = " ".join(x for x in (description, _constraints(metas)) if x).replace("|", "\\|")
        rows.append(f"| `{path}` | {_type_name(annotation)} | {_default(field)} | {notes} |")
        if nested is not None and path not in seen:
            seen.add(path)
            rows.extend(_rows(nested, path, seen))
    return rows


def profile_reference() -> str:
    lines = [
        "# Profile reference",
        "",
        "Generated from `stackpin/profile/model.py` by `make docs`; do not edit by hand. Every object rejects",
        "unknown keys. The JSON Schema is `schema/stackprofile.schema.json` (`stackpin schema`).",
        "",
        "| field | type | default | notes |",
        "| --- | --- | --- | --- |",
        *_rows(StackProfile, "", set()),
        "",
    ]
    return "\n".join(line.replace("\n", " ") for line in lines)
