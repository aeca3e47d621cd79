"""The benchmark scripts still import what they use (they run only under `make bench`)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("script", sorted(BENCH.glob("bench_*.py")), ids=lambda p: p.stem)
def test_bench_script_imports(script: Path) -> None:
    namespace = runpy.run_path(str(script), run_name="not_main")  # top level only; main() is not called
    assert callable(namespace["main"])
