"""Per-pool `engineArgs` / `dynamoArgs`: engine flags the profile does not model, passed through checked.

A key is a long option as the engine spells it (`--max-logprobs`); a value is `true` for a switch, a
string or a number for an option that takes one, or a mapping for a JSON-config option (rendered as
canonical JSON). What the pinned release accepts is validation's (rules SP221-SP226, against
`stackpin.catalog.flags`); here only the form is checked, where the profile is read.

The other half of the contract is each engine's `modelled` table (stackpin.backends): the options stackpin
renders itself, each with the field that sets it. A profile that passes one of them through engineArgs would
fight that field (argparse keeps the last value), so validation names the field to use instead; render's own
argv is held to that table by tests/test_engine_args.py.
"""

from __future__ import annotations

import math
import re
from typing import Any

# A JSON object as YAML gives it (a JSON config's mapping); value_problem holds it to what JSON can carry.
JsonValue = Any
JsonObject = dict[str, JsonValue]
# Strict: YAML `1` for a switch or `yes` for a number are mistakes, not conversions. Floats are finite.
EngineArgValue = bool | int | float | str | JsonObject
# What a profile's editor schema says a flag's value may be.
ENGINE_ARG_SCHEMA: dict[str, Any] = {"anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "number"},
                                               {"type": "string"}, {"type": "object"}]}

_OPTION = re.compile(r"--[a-z0-9]+(?:-[a-z0-9]+)*")
# The dynamo.frontend flags render writes from the profile (render/args.py frontend_flags): frontendArgs may
# not set them (SP232).
MODELLED_FRONTEND = ("--http-port", "--router-mode", "--migration-limit", "--no-router-kv-events",
                     "--router-kv-events")
POOL = "{pool}"  # stands for spec.placement.pools.<role> in the engines' modelled field paths


def option_problem(name: str) -> str | None:
    """Why `name` cannot be an engineArgs / dynamoArgs key, or None."""
    shown = repr(name[:80])
    if not name.startswith("--"):
        return f"{shown} is not a long option: write the option's --long-form"
    if "=" in name or "." in name:
        return f"{shown}: give the value as the key's value (a mapping for a JSON config), not inside the option name"
    if "_" in name and _OPTION.fullmatch(name.replace("_", "-")):
        return f"{shown}: options are spelled with dashes: {name.replace('_', '-')}"
    if not _OPTION.fullmatch(name):
        return f"{shown} is not an option name (--, then lowercase words of letters and digits joined by '-')"
    return None


def value_type_problem(value: Any) -> str | None:
    """One message for a value of no accepted type (rather than one per member of the union)."""
    if value is None:
        return "has no value: write true for a switch, or the option's value"
    if isinstance(value, list):
        return ("is a list: give the option's value as one string, or a mapping for a JSON config "
                "(list-valued options are not passed through)")
    if not isinstance(value, bool | int | float | str | dict):
        return f"is a {type(value).__name__}: write true, a string, a number or a mapping"
    return None


def value_problem(value: Any) -> str | None:
    """A JSON-config value must survive canonical JSON exactly: JSON types only (YAML also has dates and
    bytes), string keys, no NaN or infinity anywhere inside."""
    if isinstance(value, float) and not math.isfinite(value):
        return "holds a NaN or infinite number, which JSON cannot carry"
    if isinstance(value, dict):
        if any(not isinstance(key, str) for key in value):
            return "holds a mapping key that is not a string, which JSON cannot carry"
        return next((p for p in map(value_problem, value.values()) if p), None)
    if isinstance(value, list):
        return next((p for p in map(value_problem, value) if p), None)
    if value is not None and not isinstance(value, bool | int | float | str):
        return f"holds a {type(value).__name__}, which JSON cannot carry (quote it)"
    return None


def scalar_text(value: Any) -> str | None:
    """The argv text of a string or number value (shortest round-trip form for a float); None for a
    switch's `true`/`false` and for a mapping (JSON, rendered canonically by render/args.py)."""
    if isinstance(value, bool | dict):
        return None
    return repr(value) if isinstance(value, float) else str(value)
