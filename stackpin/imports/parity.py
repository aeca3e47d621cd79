"""Recipe parity: what an upstream DGD sets against what stackpin renders for the equivalent profile, every
difference either explained in a data file or reported.

The differences are the import round trip's (stackpin.imports.roundtrip.compare_items: argv flags with JSON
keys, env, envFrom, resources, shared memory, volumes, node labels, tolerations, replicas, nodes, the DGD's
apiVersion), every item whose status is `dropped` or `differs`. The data file
(tests/data/parity/differences.yaml) names, per upstream recipe, the profile of the equivalent stack, a
blocking difference when stackpin cannot express the stack at all yet, and each known difference with its
reason. `reconcile` pairs the differences found with those listed: a found one that is not listed is
unexplained, a listed one that is no longer found is stale; both fail the parity test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackpin.errors import InputError, Location, Problem
from stackpin.imports.roundtrip import Item
from stackpin.yamlio import load_yaml

RENDER_GAP = "render does not set it yet (lead)"  # the reason of a difference stackpin render will close


Key = tuple[str, str, str | None, str | None]  # (component, item, upstream value, rendered value)


def key_of(item: Item) -> Key:
    return (item.component, item.item, item.upstream, item.rendered)


@dataclass(frozen=True)
class Listed:
    key: Key
    reason: str


@dataclass(frozen=True)
class Recipe:
    name: str  # the upstream file's stem under tests/data/upstream
    profile: str  # the equivalent profile, relative to the data file
    blocking: str | None
    listed: tuple[Listed, ...]


@dataclass(frozen=True)
class Row:
    recipe: str
    difference: Item  # status dropped or differs
    reason: str | None  # None: not listed (unexplained)


def _value(raw: Any) -> str | None:
    return None if raw is None else str(raw)


def load_recipes(path: Path) -> tuple[Recipe, ...]:
    """The data file; a malformed entry is one located line (exit 2)."""
    data, positions = load_yaml(path)

    def bad(where: tuple[str | int, ...], message: str) -> InputError:
        return InputError([Problem(positions.locate(where), ".".join(map(str, where)), message)])

    if not isinstance(data, Mapping) or not isinstance(data.get("recipes"), Mapping):
        raise InputError([Problem(Location(str(path)), "recipes", "expected a mapping of recipe -> entry")])
    out = []
    for name, entry in data["recipes"].items():
        where: tuple[str | int, ...] = ("recipes", name)
        if not isinstance(entry, Mapping) or not isinstance(entry.get("profile"), str):
            raise bad(where, "expected a mapping with `profile`")
        listed = []
        for i, item in enumerate(entry.get("differences") or []):
            at = (*where, "differences", i)
            if not isinstance(item, Mapping) or not {"component", "item", "reason"} <= set(item):
                raise bad(at, "expected component, item, upstream, stackpin and reason")
            if not isinstance(item["reason"], str) or not item["reason"].strip():
                raise bad(at, "every difference needs a reason")
            key = (str(item["component"]), str(item["item"]), _value(item.get("upstream")),
                   _value(item.get("stackpin")))
            listed.append(Listed(key, item["reason"]))
        blocking = entry.get("blocking")
        out.append(Recipe(str(name), entry["profile"], str(blocking) if blocking else None, tuple(listed)))
    return tuple(out)


def reconcile(recipe: Recipe, found: Sequence[Item]) -> tuple[list[Row], list[Listed]]:
    """(a row per difference found, with its listed reason or None; the listed differences not found)."""
    reasons = {item.key: item.reason for item in recipe.listed}
    rows = [Row(recipe.name, d, reasons.get(key_of(d))) for d in found]
    found_keys = {key_of(d) for d in found}
    stale = [item for item in recipe.listed if item.key not in found_keys]
    return rows, stale


def listing(rows: Sequence[Row]) -> str:
    """Unexplained rows as YAML entries to paste into the data file once each has a reason."""
    from stackpin.yamlio import dump_yaml

    entries = [{"component": r.difference.component, "item": r.difference.item, "upstream": r.difference.upstream,
                "stackpin": r.difference.rendered, "reason": "TODO"} for r in rows]
    return dump_yaml(entries, sort_keys=False)
