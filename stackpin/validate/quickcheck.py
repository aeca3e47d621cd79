"""Is an instance valid under a JSON Schema (draft 7)? A yes/no answer, fast and without jsonschema.

Rendering validates every object before writing it, and almost every object is valid. Importing
jsonschema (with referencing, attrs, rpds and its bundled metaschemas) costs more than building and
writing a whole stack, so manifests.py asks this module first and hands the object to jsonschema
only when the answer is not a plain yes, to report the errors in its words.

The answer is exact or absent: `is_valid` returns what `jsonschema.Draft7Validator(schema)
.is_valid(instance)` returns (no format checker, as stackpin builds its validators), or raises
`Unsure` for anything it does not decide the same way: `$ref`, keywords it does not know, and
values outside plain JSON data (numbers other than int and float, enum and const over arrays or
objects, ...). Exactness matters inside `not`, `oneOf` and `if`, where a stricter answer would turn
into a more lenient one. tests/test_quickcheck.py compares the two on mutated manifests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

__all__ = ["Unsure", "is_valid"]


class Unsure(Exception):
    """This module would not answer exactly as jsonschema does; ask jsonschema."""


# Keywords that assert nothing in draft 7 as stackpin's validators run it (no format checker).
_ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "readOnly", "writeOnly",
    "definitions", "format", "contentMediaType", "contentEncoding",
})
# Applied through their parent keyword, never on their own.
_DEPENDENT = frozenset({"then", "else"})

_NUMBER = (int, float)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _is_type(instance: Any, name: str) -> bool:
    if name == "object":
        return isinstance(instance, dict)
    if name == "string":
        return isinstance(instance, str)
    if name == "array":
        return isinstance(instance, list)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "null":
        return instance is None
    if name in ("integer", "number"):
        if isinstance(instance, bool):
            return False
        if isinstance(instance, int):
            return True
        if isinstance(instance, float):
            return name == "number" or instance.is_integer()
        if isinstance(instance, (str, list, dict)) or instance is None:
            return False
        raise Unsure  # Decimal, Fraction, ...: jsonschema asks numbers.Number
    raise Unsure  # an unknown type name is an error in jsonschema


def _number(instance: Any) -> bool:
    """Does jsonschema treat the instance as a number (int or float here; others are Unsure)?"""
    return _is_type(instance, "number")


def _equal_to_any(instance: Any, values: list[Any]) -> bool:
    """jsonschema's `equal` of an instance to any of the values, for plain JSON scalars."""
    if isinstance(instance, str):
        return any(isinstance(v, str) and v == instance for v in values)
    if instance is None or isinstance(instance, bool):
        return any(v is instance for v in values)
    if type(instance) in _NUMBER:
        if any(not (v is None or isinstance(v, (str, bool, int, float))) for v in values):
            raise Unsure
        return any(type(v) in _NUMBER and v == instance for v in values)
    raise Unsure


def _items_unique(items: list[Any]) -> bool:
    if all(isinstance(i, str) for i in items):
        return len(set(items)) == len(items)
    raise Unsure


def _valid(instance: Any, schema: Any) -> bool:
    if schema is True:
        return True
    if schema is False:
        return False
    if not isinstance(schema, dict):
        raise Unsure
    if "$ref" in schema:
        raise Unsure
    for key, value in schema.items():
        check = _KEYWORDS.get(key)
        if check is not None:
            if not check(instance, value, schema):
                return False
        elif key not in _ANNOTATIONS and key not in _DEPENDENT:
            raise Unsure
    return True


# Each keyword: (instance, keyword value, whole schema) -> valid? Written to decide as jsonschema's
# draft 7 keywords do, including which instance types a keyword applies to.

def _type(instance: Any, types: Any, _schema: dict[str, Any]) -> bool:
    return any(_is_type(instance, t) for t in (types if isinstance(types, list) else [types]))


def _properties(instance: Any, properties: dict[str, Any], _schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(_valid(instance[key], sub) for key, sub in properties.items() if key in instance)


def _pattern_properties(instance: Any, patterns: dict[str, Any], _schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    return all(_valid(value, sub) for pattern, sub in patterns.items()
               for key, value in instance.items() if _regex(pattern).search(key))


def _additional_properties(instance: Any, extra: Any, schema: dict[str, Any]) -> bool:
    if not isinstance(instance, dict):
        return True
    known = schema.get("properties", {})
    patterns = "|".join(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in known and not (patterns and _regex(patterns).search(key))]
    if isinstance(extra, dict):
        return all(_valid(instance[key], extra) for key in extras)
    return bool(extra) or not extras


def _required(instance: Any, names: list[str], _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, dict) or all(name in instance for name in names)


def _items(instance: Any, items: Any, _schema: dict[str, Any]) -> bool:
    if not isinstance(instance, list):
        return True
    if isinstance(items, list):
        raise Unsure  # tuple form (with additionalItems)
    return all(_valid(item, items) for item in instance)


def _enum(instance: Any, values: list[Any], _schema: dict[str, Any]) -> bool:
    return _equal_to_any(instance, values)


def _const(instance: Any, value: Any, _schema: dict[str, Any]) -> bool:
    return _equal_to_any(instance, [value])


def _pattern(instance: Any, pattern: str, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, str) or _regex(pattern).search(instance) is not None


def _min_length(instance: Any, limit: int, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, str) or len(instance) >= limit


def _max_length(instance: Any, limit: int, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, str) or len(instance) <= limit


def _minimum(instance: Any, limit: Any, _schema: dict[str, Any]) -> bool:
    return not _number(instance) or not instance < limit


def _maximum(instance: Any, limit: Any, _schema: dict[str, Any]) -> bool:
    return not _number(instance) or not instance > limit


def _exclusive_minimum(instance: Any, limit: Any, _schema: dict[str, Any]) -> bool:
    return not _number(instance) or not instance <= limit


def _exclusive_maximum(instance: Any, limit: Any, _schema: dict[str, Any]) -> bool:
    return not _number(instance) or not instance >= limit


def _multiple_of(instance: Any, divisor: Any, _schema: dict[str, Any]) -> bool:
    if not _number(instance):
        return True
    if type(divisor) is not int or type(instance) is not int:
        raise Unsure  # jsonschema's float arithmetic
    return instance % divisor == 0


def _min_items(instance: Any, limit: int, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, list) or len(instance) >= limit


def _max_items(instance: Any, limit: int, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, list) or len(instance) <= limit


def _unique_items(instance: Any, unique: Any, _schema: dict[str, Any]) -> bool:
    return not (unique and isinstance(instance, list)) or _items_unique(instance)


def _min_properties(instance: Any, limit: int, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, dict) or len(instance) >= limit


def _max_properties(instance: Any, limit: int, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, dict) or len(instance) <= limit


def _all_of(instance: Any, schemas: list[Any], _schema: dict[str, Any]) -> bool:
    return all(_valid(instance, sub) for sub in schemas)


def _any_of(instance: Any, schemas: list[Any], _schema: dict[str, Any]) -> bool:
    return any(_valid(instance, sub) for sub in schemas)


def _one_of(instance: Any, schemas: list[Any], _schema: dict[str, Any]) -> bool:
    return sum(1 for sub in schemas if _valid(instance, sub)) == 1


def _not(instance: Any, sub: Any, _schema: dict[str, Any]) -> bool:
    return not _valid(instance, sub)


def _if(instance: Any, condition: Any, schema: dict[str, Any]) -> bool:
    branch = "then" if _valid(instance, condition) else "else"
    return branch not in schema or _valid(instance, schema[branch])


_KEYWORDS: dict[str, Callable[[Any, Any, dict[str, Any]], bool]] = {
    "type": _type, "properties": _properties, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties, "required": _required, "items": _items, "enum": _enum,
    "const": _const, "pattern": _pattern, "minLength": _min_length, "maxLength": _max_length,
    "minimum": _minimum, "maximum": _maximum, "exclusiveMinimum": _exclusive_minimum,
    "exclusiveMaximum": _exclusive_maximum, "multipleOf": _multiple_of, "minItems": _min_items,
    "maxItems": _max_items, "uniqueItems": _unique_items, "minProperties": _min_properties,
    "maxProperties": _max_properties, "allOf": _all_of, "anyOf": _any_of, "oneOf": _one_of, "not": _not,
    "if": _if,
}


def is_valid(instance: Any, schema: Any) -> bool:
    """Exactly jsonschema's draft 7 verdict; raises Unsure where this module would not be exact."""
    try:
        return _valid(instance, schema)
    except (RecursionError, re.error, TypeError, ValueError):
        # Deep nesting, or a schema jsonschema itself would fail on: let jsonschema have its say.
        raise Unsure from None
