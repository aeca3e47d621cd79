"""The profile reference (docs/profile-reference.md), generated from the models so it cannot drift."""

from __future__ import annotations

import types
import typing
from enum import Enum
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from stackpin.profile.model import StackProfile


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
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.get_default(call_default_factory=True, validated_data={})
        return "`{}`" if value == {} else "`[]`" if value == [] else "(defaults below)"
    if field.default is PydanticUndefined or field.default is None:
        return "unset"
    value = field.default.value if isinstance(field.default, Enum) else field.default
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _constraints(field: FieldInfo) -> str:
    out = []
    for meta in field.metadata:
        for name in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            value = getattr(meta, name, None)
            if value is not None:
                out.append(f"{name} {value}")
    return ", ".join(out)


def _nested(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested(arg)
        if found is not None:
            return found
    return None


def _rows(model: type[BaseModel], prefix: str, seen: set[str]) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}.{key}" if prefix else key
        nested = _nested(field.annotation)
        notes = " ".join(x for x in (field.description or "", _constraints(field)) if x).replace("|", "\\|")
        rows.append(f"| `{path}` | {_type_name(field.annotation)} | {_default(field)} | {notes} |")
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
