"""Whole-process cost of the CLI: `stackpin --help` and `stackpin validate` on every shipped profile,
side by side with a bare `python -c pass` (the floor any Python CLI pays), plus what `--help` imports.

Run from the repository root: `python bench/bench_cli.py [N]` (N defaults to 15 runs each).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACKPIN = [sys.executable, "-c", "from stackpin.cli.main import main; main()"]
HEAVY = ("kubernetes", "httpx", "matplotlib", "jsonschema", "rich", "pydantic")


def median_ms(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def help_imports() -> tuple[float, list[str]]:
    """Cumulative import time of the CLI module (us -> ms) and which heavy packages `--help` loads."""
    out = subprocess.run([sys.executable, "-X", "importtime", *STACKPIN[1:], "--help"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stderr
    loaded, cli_us = set(), 0
    for line in out.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        loaded.add(name.split(".")[0])
        if name == "stackpin.cli.main":
            cli_us = int(cumulative)
    return cli_us / 1000, sorted(h for h in HEAVY if h in loaded)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    profiles = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profiles").rglob("*.yaml"))
    floor = median_ms([sys.executable, "-c", "pass"], runs)
    rows = [
        ("python -c pass", floor),
        ("stackpin --help", median_ms([*STACKPIN, "--help"], runs)),
        (f"stackpin validate ({len(profiles)} profiles)", median_ms([*STACKPIN, "validate", *profiles], runs)),
    ]
    print(f"CLI wall time, median of {runs} runs (whole process)")
    for name, ms in rows:
        print(f"  {name:<36} {ms:8.1f} ms   {ms / floor:5.1f}x python startup")
    import_ms, heavy = help_imports()
    print(f"  import stackpin.cli.main (cumulative, -X importtime): {import_ms:.1f} ms")
    print(f"  heavy packages imported by --help: {', '.join(heavy) if heavy else 'none'}")


if __name__ == "__main__":
    main()
