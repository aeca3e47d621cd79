"""Recipe parity runs for the test and scripts/parity_table.py: each upstream DeepSeek V4 recipe against
its equivalent profile, locked from the demo mirror (tests/lockkit.py) and rendered."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from stackpin.imports.compare import Difference, compare
from stackpin.imports.dgd import Dgd, dgds_in
from stackpin.imports.parity import Recipe, load_recipes
from stackpin.imports.source import read_dgds
from stackpin.profile.loader import load_profile
from stackpin.render.build import build_objects
from tests.lockkit import ROOT, lock_loaded

UPSTREAM = ROOT / "tests" / "data" / "upstream"
PARITY = ROOT / "tests" / "data" / "parity"
DIFFERENCES = PARITY / "differences.yaml"


def rendered_dgd(profile: Path) -> Dgd:
    """The DGD stackpin renders for `profile`, read back with the same reader as the upstream one."""
    [lock] = lock_loaded([load_profile(profile)])
    [dgd] = dgds_in([(obj, "render") for obj in build_objects(lock)])
    return dgd


@cache
def recipes() -> tuple[Recipe, ...]:
    return load_recipes(DIFFERENCES)


def differences(recipe: Recipe) -> list[Difference]:
    [upstream] = read_dgds(UPSTREAM / f"{recipe.name}.yaml")
    return compare(upstream, rendered_dgd(PARITY / recipe.profile))
