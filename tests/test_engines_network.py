"""A real release from PyPI, extracted as `stackpin engines add` does, gives the shipped catalog byte for
byte. Marked `network`: `make test` leaves it out; run it with `pytest -m network`. Downloads are kept
in .bench/engines/ (ignored), where `make bench` finds them too."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackpin.engines.add import add_release

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "stackpin" / "catalog"
CACHE = ROOT / ".bench" / "engines"


@pytest.mark.network
@pytest.mark.parametrize(("spec", "shipped"), [("vllm==0.33.0", "vllm-0.33.0.json"),
                                               ("ai-dynamo==1.6.1", "dynamo-1.6.1.json")])
def test_a_published_release_extracts_to_the_shipped_catalog(tmp_path: Path, spec: str, shipped: str) -> None:
    added = add_release(spec, catalog_dir=tmp_path, cache_dir=CACHE)
    assert added.downloaded
    assert added.catalog_file.read_text(encoding="utf-8") == (BUNDLED / "engines" / shipped).read_text(encoding="utf-8")
    pins = (tmp_path / "versions.yaml").read_text(encoding="utf-8").splitlines()
    bundled = (BUNDLED / "versions.yaml").read_text(encoding="utf-8").splitlines()
    assert [line for line in pins if line.startswith("  ")][0] in bundled
