"""`stackpin diff` of two shipped stacks versus what a user would otherwise run: `diff -u` of the two
lockfiles plus `diff -ru` of the two rendered manifest directories (two processes, timed together).

Rows, medians of whole processes (a fresh interpreter each run), for each pair of shipped stacks:
  - `stackpin diff A.lock B.lock` (grouped changes, rollout impact, invalidations);
  - `stackpin diff A.lock B.lock --manifests` (plus both stacks rendered and diffed per object);
  - `diff -u A.lock B.lock; diff -ru manifests/A manifests/B`.
The ratio is stackpin's time over the two diffs'. Both read the committed lockfiles/ and manifests/.

Run from the repository root: `python bench/bench_diff.py [RUNS]` (default 15).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIRS = (("gb300-launch", "gb300-tuned"), ("gb300-tuned", "gb300-disagg-wide-ep"))


def _stackpin() -> list[str]:
    """The installed console script (what users run), else the CLI through this interpreter."""
    exe = Path(sys.executable).with_name("stackpin")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "stackpin"]


def _run(cmds: list[list[str]]) -> float:
    """Seconds to run the commands one after the other (exit 1, "they differ", is expected)."""
    start = time.perf_counter()
    for cmd in cmds:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.decode(errors='replace').strip()}")
    return time.perf_counter() - start


def median_ms(cmds: list[list[str]], runs: int) -> float:
    _run(cmds)  # warm the page cache, not the interpreter
    return statistics.median(_run(cmds) for _ in range(runs)) * 1000


def _lines(cmds: list[list[str]]) -> int:
    return sum(len(subprocess.run(c, cwd=ROOT, capture_output=True, check=False).stdout.splitlines()) for c in cmds)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    diff = shutil.which("diff")
    stackpin = _stackpin()
    print(f"whole-process wall time, median of {runs} runs; lines = lines of output")
    print(f"{'pair / command':<58} {'ms':>8} {'lines':>6}  ratio")
    for a, b in PAIRS:
        lock_a, lock_b = f"lockfiles/{a}.lock.yaml", f"lockfiles/{b}.lock.yaml"
        plain = [[*stackpin, "diff", lock_a, lock_b]]
        with_manifests = [[*stackpin, "diff", lock_a, lock_b, "--manifests"]]
        print(f"{a} -> {b}")
        rows = [("stackpin diff", plain), ("stackpin diff --manifests", with_manifests)]
        if diff:
            text = [[diff, "-u", lock_a, lock_b], [diff, "-ru", f"manifests/{a}", f"manifests/{b}"]]
            base = median_ms(text, runs)
        else:
            print("  note: no `diff` on PATH; its row is skipped")
            base = 0.0
        for name, cmds in rows:
            ms = median_ms(cmds, runs)
            ratio = f"{ms / base:5.2f}x" if base else "-"
            print(f"  {name:<56} {ms:8.1f} {_lines(cmds):6d}  {ratio}")
        if diff:
            label = "diff -u (locks) + diff -ru (manifests), two processes"
            print(f"  {label:<56} {base:8.1f} {_lines(text):6d}  1.00x")


if __name__ == "__main__":
    main()
