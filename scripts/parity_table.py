"""Print the recipe parity table: per upstream DeepSeek V4 recipe, every item where stackpin's render of the
equivalent profile differs (the import round trip's items: flags, env, envFrom, resources, shared memory,
volumes, node labels, tolerations, launch-script lines, the DGD's apiVersion), with the reason listed in
tests/data/parity/differences.yaml (UNEXPLAINED when there is none). Exit 1 when a difference is unexplained
or a listed one no longer exists.

    .venv/bin/python scripts/parity_table.py [--gaps]     # --gaps: only "render does not set it yet" rows
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stackpin.imports.parity import RENDER_GAP, reconcile  # noqa: E402
from tests.paritykit import differences, recipes  # noqa: E402


def _cell(value: str | None, width: int) -> str:
    text = "-" if value is None else value.replace("\n", " ")
    return text if len(text) <= width else text[:width - 3] + "..."


def main(argv: list[str]) -> int:
    gaps_only = "--gaps" in argv
    failed = False
    print(f"{'component':<9}  {'item':<44}  {'upstream':<28}  {'stackpin':<28}  reason")
    for recipe in recipes():
        rows, stale = reconcile(recipe, differences(recipe))
        print(f"\n{recipe.name}  (profile tests/data/parity/{recipe.profile})")
        if recipe.blocking:
            print(f"  BLOCKING: {recipe.blocking}")
        for row in rows:
            reason = row.reason or "UNEXPLAINED"
            failed |= row.reason is None
            if gaps_only and not reason.startswith(RENDER_GAP):
                continue
            d = row.difference
            print(f"{d.component:<9}  {_cell(d.item, 44):<44}  {_cell(d.upstream, 28):<28}  "
                  f"{_cell(d.rendered, 28):<28}  {reason}")
        for item in stale:
            failed = True
            print(f"STALE (listed, no longer found): {item.key[0]} {item.key[1]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
