"""What `pip install stackpin` costs: a fresh venv with this tree installed without extras (the core: validate,
lock, render, diff, history), its size on disk and package count, against the same with every extra
(`stackpin[all]`) and a bare venv (Python and pip alone); plus the core's heaviest packages.

Run from the repository root: `python bench/bench_install.py`. It needs the package index (pip's cache serves
what it has); the venvs are made in a temporary directory, one at a time, and removed. Sizes are disk usage
in MiB as `du -sm` counts it; packages are the venv's distributions (`pip list`), pip's own included.
Aim: the core venv at most 150 MiB (it was 497 MiB, 53 packages, before the extras).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # devkit sits beside bench/, not inside the installed package

from devkit.installed import copy_sources, site_packages  # noqa: E402

CORE_AIM_MIB = 150


def disk_mib(path: Path) -> float:
    """Disk usage below `path`, each file once (as du counts it)."""
    seen, blocks = set(), 0
    for entry in [path, *path.rglob("*")]:
        stat = entry.lstat()
        if (stat.st_dev, stat.st_ino) not in seen:
            seen.add((stat.st_dev, stat.st_ino))
            blocks += stat.st_blocks
    return blocks * 512 / 2**20


def make_venv(venv: Path, requirement: str | None) -> tuple[float, int]:
    """A venv with `requirement` installed (none: bare); its size (MiB) and number of distributions."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if requirement is not None:
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement],
                              capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            sys.exit(f"bench_install: pip install {requirement} failed: {last}")
    return disk_mib(venv), len(list(site_packages(venv).glob("*.dist-info")))


def heaviest(venv: Path, count: int = 8) -> list[tuple[str, float]]:
    sizes = [(entry.name, disk_mib(entry)) for entry in site_packages(venv).iterdir()
             if not entry.name.endswith((".dist-info", ".pth")) and entry.name != "__pycache__"]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        source = copy_sources(Path(tmp) / "src")
        rows: dict[str, tuple[float, int]] = {}
        core_heaviest: list[tuple[str, float]] = []
        for label, requirement in (("bare venv (python -m venv)", None), ("pip install stackpin", str(source)),
                                   ("pip install 'stackpin[all]'", f"{source}[all]")):
            venv = Path(tmp) / "venv"
            rows[label] = make_venv(venv, requirement)
            if requirement == str(source):
                core_heaviest = heaviest(venv)
            shutil.rmtree(venv)
    print(f"Install size, fresh venv each (Python {sys.version.split()[0]}), disk usage as du -sm counts it")
    for label, (mib, packages) in rows.items():
        print(f"  {label:<30} {mib:7.1f} MiB  {packages:3d} packages")
    core, _ = rows["pip install stackpin"]
    full, _ = rows["pip install 'stackpin[all]'"]
    bare, _ = rows["bare venv (python -m venv)"]
    print(f"  core / all: {core / full:.2f}; the core's own packages over a bare venv: {core - bare:.1f} MiB")
    print("  the core's heaviest site-packages entries: "
          + ", ".join(f"{name} {mib:.1f}" for name, mib in core_heaviest) + " (MiB)")
    print(f"aim: core install (pip install stackpin) at most {CORE_AIM_MIB} MiB: {core:.0f} MiB: "
          f"{'met' if core <= CORE_AIM_MIB else 'NOT met'}")


if __name__ == "__main__":
    main()
