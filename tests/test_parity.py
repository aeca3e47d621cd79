"""Recipe parity (issue 19, item 1): each upstream DeepSeek V4 recipe against stackpin's render of the
equivalent profile; every difference is listed with its reason in tests/data/parity/differences.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackpin.errors import InputError
from stackpin.imports.parity import Listed, Recipe, listing, load_recipes, reconcile
from stackpin.imports.roundtrip import DIFFERS, Item
from tests.paritykit import UPSTREAM, differences, recipes

V4_RECIPES = sorted(p.stem for p in UPSTREAM.glob("recipes_deepseek-v4_*.yaml"))


def test_every_upstream_deepseek_v4_recipe_has_a_parity_entry() -> None:
    assert len(V4_RECIPES) == 4
    assert sorted(r.name for r in recipes()) == V4_RECIPES


@pytest.mark.parametrize("recipe", recipes(), ids=lambda r: r.name)
def test_parity(recipe: Recipe) -> None:
    rows, stale = reconcile(recipe, differences(recipe))
    unexplained = [r for r in rows if r.reason is None]
    assert not unexplained, "differences not in tests/data/parity/differences.yaml (add each with a reason):\n" + \
        listing(unexplained)
    assert not stale, "listed differences that no longer exist (remove them): " + \
        "; ".join(f"{s.key[0]} {s.key[1]}" for s in stale)


def test_parsers_match_every_recipe() -> None:
    # The reason issue 19 was filed: every V4 recipe sets both parsers on every worker.
    for recipe in recipes():
        for diff in differences(recipe):
            assert not diff.item.startswith(("flag --dyn-tool-call-parser", "flag --dyn-reasoning-parser")), diff


def test_reconcile_reports_unlisted_and_stale() -> None:
    listed = Listed(("worker", "flag --a", None, "1"), "why")
    recipe = Recipe("r", "p.yaml", None, (listed,))
    changed = Item("worker", "flag --a", None, "2", DIFFERS, None)  # same flag, another value: not the listed one
    rows, stale = reconcile(recipe, [changed])
    assert [r.reason for r in rows] == [None] and stale == [listed]
    rows, stale = reconcile(recipe, [Item("worker", "flag --a", None, "1", DIFFERS, None)])
    assert [r.reason for r in rows] == ["why"] and stale == []


def test_a_difference_without_a_reason_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "d.yaml"
    bad.write_text("recipes:\n  r:\n    profile: p.yaml\n    differences:\n"
                   "      - {component: worker, item: flag --a, upstream: null, stackpin: '1', reason: ''}\n")
    with pytest.raises(InputError, match="needs a reason"):
        load_recipes(bad)


def test_the_table_compares_resources_tolerations_and_volumes_too() -> None:
    # Issue 36: the table is the round trip's comparison, not flags and env alone.
    items = {d.item.split(" ")[0].rsplit(".", 1)[0] for recipe in recipes() for d in differences(recipe)}
    assert {"resources.limits", "resources.requests", "toleration", "volume", "sharedMemory", "apiVersion"} <= items, \
        items
