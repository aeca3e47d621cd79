"""`make bench`: run every benchmark script in bench/ in one go, each as its own process, then repeat
every aim line they printed (`aim: ...: met` / `NOT met`) in one summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

if __name__ == "__main__":
    failed = 0
    aims: list[str] = []
    for script in sorted(BENCH.glob("bench_*.py")):
        print(f"\n== {script.name}", flush=True)
        proc = subprocess.Popen([sys.executable, str(script)], cwd=BENCH.parent, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("aim: "):
                aims.append(f"{script.stem}: {line.removeprefix('aim: ').rstrip()}")
        failed |= proc.wait()
    if aims:
        print("\n== aims")
        for aim in aims:
            print(f"  {aim}")
    sys.exit(1 if failed else 0)
