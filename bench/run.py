"""`make bench`: run every benchmark script in bench/ in one go, each as its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

if __name__ == "__main__":
    failed = 0
    for script in sorted(BENCH.glob("bench_*.py")):
        print(f"\n== {script.name}", flush=True)
        failed |= subprocess.run([sys.executable, str(script)], cwd=BENCH.parent, check=False).returncode
    sys.exit(1 if failed else 0)
