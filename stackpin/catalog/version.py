"""Release versions compare as PEP 440 orders them (`packaging.version`), never as hand-split tuples:
split on dots, `1.6.1rc1` loses its patch number and sorts below `1.6.0`; PEP 440 puts it between
`1.6.0` and `1.6.1`."""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version

__all__ = ["PackageVersion", "Version", "decode_version", "parse_version"]


def parse_version(text: str) -> Version:
    """`text` as a PEP 440 version; ValueError (naming it) when it is not one."""
    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a PEP 440 version") from None


# A catalog field holding a version: parsed when the catalog loads (a typo fails there, not at the
# first comparison). Records read it with `decode_version` as their dec_hook.
PackageVersion = Version


def decode_version(kind: type, value: Any) -> Any:
    """msgspec's dec_hook for a record with PackageVersion fields: text -> Version."""
    if kind is Version:
        if not isinstance(value, str):
            raise ValueError(f"a version must be a string, got {value!r}")
        return parse_version(value)
    raise NotImplementedError(f"{kind.__name__} is not a type a catalog record holds")
