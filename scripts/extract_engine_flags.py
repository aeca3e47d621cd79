#!/usr/bin/env python3
"""Regenerate the bundled engine catalogs (stackpin/catalog/engines/*.json and versions.yaml pins).

A thin wrapper over `stackpin engines add` (stackpin.engines.add), which downloads each published
package from the index and reads it with `ast` only:

    .venv/bin/python scripts/extract_engine_flags.py                  # every release the bundled catalog has
    .venv/bin/python scripts/extract_engine_flags.py vllm==0.34.0     # one more
    .venv/bin/python scripts/extract_engine_flags.py --cache-dir .bench/engines

A site adds releases to its own catalog directory instead: `stackpin engines add vllm==X --catalog DIR`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from stackpin.engines.add import add_release

BUNDLED = Path(__file__).resolve().parent.parent / "stackpin" / "catalog"
PROJECT = {"vllm": "vllm", "dynamo": "ai-dynamo", "flashinfer": "flashinfer-python"}


def shipped() -> list[str]:
    """NAME==VERSION of every release catalog the bundled directory holds."""
    specs = []
    for path in sorted((BUNDLED / "engines").glob("*.json")):
        match = re.fullmatch(r"(vllm|dynamo|flashinfer)-(.+)\.json", path.name)
        if match:
            specs.append(f"{PROJECT[match.group(1)]}=={match.group(2)}")
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", metavar="NAME==VERSION")
    parser.add_argument("--cache-dir", type=Path, help="keep downloads here and reuse them")
    args = parser.parse_args(argv)
    for spec in args.specs or shipped():
        added = add_release(spec, catalog_dir=BUNDLED, cache_dir=args.cache_dir)
        print(f"{spec}: {added.catalog_file.relative_to(BUNDLED.parent.parent)} from {added.package} "
              f"sha256 {added.sha256}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
