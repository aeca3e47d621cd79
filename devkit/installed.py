"""stackpin as `pip install` leaves it, for the benchmarks that time whole commands.

A development checkout runs stackpin through an editable install, whose import hook (setuptools'
`__editable__` finder, loaded by a .pth file at every start) costs each Python process about 10 ms that a
user's `pip install stackpin` does not pay. So start-up is timed in a fresh venv (`python -m venv`, as a
user makes one) holding a wheel built from this tree, installed without its dependencies: those come
from the running environment through one .pth line, so nothing is downloaded and the versions are the
ones tested.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the wheel is built from: copied out, so the build leaves nothing (build/, *.egg-info) in the tree.
SOURCES = ("pyproject.toml", "README.md", "NOTICE", "stackpin")


def copy_sources(dest: Path, root: Path = ROOT) -> Path:
    """The files a wheel of `root` is built from, copied into `dest` (without bytecode caches)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        if (root / name).is_dir():
            shutil.copytree(root / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(root / name, dest / name)
    return dest


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise RuntimeError(f"{' '.join(cmd[:4])} ...: {last}")


@contextmanager
def installed_stackpin(root: Path = ROOT) -> Iterator[Path]:
    """The bin directory of a temporary venv with `root`'s stackpin installed from a wheel (byte-compiled
    by pip), its dependencies those of this environment; removed afterwards. RuntimeError names the step
    that failed (building needs setuptools in this environment, as `pip install -e .` did)."""
    with tempfile.TemporaryDirectory(prefix="stackpin-installed-") as tmp:
        work = Path(tmp)
        source = copy_sources(work / "src", root)
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
              "--wheel-dir", str(work / "wheel"), str(source)])
        venv = work / "venv"
        _run([sys.executable, "-m", "venv", str(venv)])
        wheel = next((work / "wheel").glob("stackpin-*.whl"))
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)])
        ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
        (site_packages(venv) / "zz-stackpin-bench-dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
        yield venv / "bin"
