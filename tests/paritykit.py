"""Recipe parity runs for the test and scripts/parity_table.py: each upstream DeepSeek V4 recipe against
its equivalent profile, locked from the demo mirror (tests/lockkit.py), rendered and compared item by item as
the import round trip compares (stackpin.imports.roundtrip.compare_items)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from stackpin.imports.dgd import Dgd, dgds_in
from stackpin.imports.parity import Recipe, load_recipes
from stackpin.imports.roundtrip import CARRIED, SAME, Item, compare_items
from stackpin.imports.source import read_dgds
from stackpin.profile.loader import load_profile
from stackpin.render.build import build_objects
from tests.lockkit import ROOT, lock_loaded

UPSTREAM = ROOT / "tests" / "data" / "upstream"
PARITY = ROOT / "tests" / "data" / "parity"
DIFFERENCES = PARITY / "differences.yaml"


def rendered_dgd(profile: Path) -> tuple[Dgd, dict[str, Any]]:
    """The DGD stackpin renders for `profile`, read back with the same reader as the upstream one, and the
    profile as locked (its `extends` resolved)."""
    [lock] = lock_loaded([load_profile(profile)])
    [dgd] = dgds_in([(obj, "render") for obj in build_objects(lock)])
    return dgd, lock.profile


@cache
def recipes() -> tuple[Recipe, ...]:
    return load_recipes(DIFFERENCES)


def differences(recipe: Recipe) -> list[Item]:
    """Every item of the round-trip comparison that is not the same (or carried by the profile's podOverrides)."""
    [upstream] = read_dgds(UPSTREAM / f"{recipe.name}.yaml")
    rendered, profile = rendered_dgd(PARITY / recipe.profile)
    return [i for i in compare_items(upstream, rendered, profile) if i.status not in (SAME, CARRIED)]
