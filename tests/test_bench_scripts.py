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


def test_the_start_up_benches_time_an_installed_wheel_not_this_checkout() -> None:
    # bench_render/bench_cli/bench_deploy time stackpin as `pip install` leaves it: the editable install of a
    # checkout costs every process ~10 ms of import hooks that users do not pay.
    import subprocess

    from devkit.installed import installed_stackpin

    with installed_stackpin() as bin_dir:
        where = subprocess.run([str(bin_dir / "python"), "-c", "import stackpin, sys; print(stackpin.__file__); "
                                "print(any('__editable__' in m for m in sys.modules))"],
                               capture_output=True, text=True, check=True, cwd="/").stdout.split()
        assert Path(where[0]).is_relative_to(bin_dir.parent) and where[1] == "False"
        version = subprocess.run([str(bin_dir / "stackpin"), "--version"], capture_output=True, text=True,
                                 check=True, cwd="/")
        assert "stackpin" in version.stdout
    assert not bin_dir.exists()
