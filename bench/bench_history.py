"""`stackpin history DEPLOYMENT` over long histories: 1, 100 and 1,000 synthetic revisions of one deployment.

Revisions are made from the shipped GB300 locks (launch and tuned, alternating) with distinct messages,
chained and written as `stackpin promote` writes them. Each row is the median of whole `stackpin history`
processes, which read and verify every revision (its digest, its lock's digest, the chain). Two aims:
listing time grows no worse than linearly (the cost per revision above the one-revision run, which is
start-up, at 1,000 at most that at 100 plus noise), and a listing of 1,000 revisions takes at most
500 ms (issue 21). Rows are listed as a user lists them a second time: the per-user verified cache
(stackpin/history/verified.py) holds the files read before, in a cache directory of the bench's own;
the first, cold listing (every revision parsed) is printed beside them.

Run from the repository root: `python bench/bench_history.py [REPEATS]` (default 5).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stackpin.history.model import Action, ActionKind, DeploymentKey, Revision, new_revision, revision_text
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import read_lock
from stackpin.yamlio import create_exclusive

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1, 100, 1000)
AIM_MS = 500
STACKPIN = [sys.executable, "-c", "from stackpin.cli.main import run; run()"]


def build(root: Path, count: int) -> DeploymentKey:
    """`count` revisions of the GB300 deployment under `root`."""
    locks = [read_lock(ROOT / "lockfiles" / f"{name}.lock.yaml") for name in ("gb300-launch", "gb300-tuned")]
    store, key = HistoryStore(root), DeploymentKey.of_lock(locks[0])
    store.directory(key).mkdir(parents=True)
    previous: Revision | None = None
    for number in range(1, count + 1):
        revision = new_revision(key, number, locks[number % 2], created=f"2026-01-01T00:00:{number % 60:02d}Z",
                                author="bench <bench@stackpin.dev>", message=f"synthetic revision {number}",
                                action=Action(kind=ActionKind.promote), previous=previous)
        create_exclusive(store.path(key, number), revision_text(revision))
        previous = revision
    return key


def timed_ms(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - start) * 1000


def median_ms(cmd: list[str], repeats: int, env: dict[str, str]) -> tuple[float, float]:
    """(the first, cold run: nothing cached; the median of `repeats` runs after it)."""
    cold = timed_ms(cmd, env)
    return cold, statistics.median(timed_ms(cmd, env) for _ in range(repeats))


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        key = build(work / "1000", max(SIZES))
        built = time.perf_counter() - start
        for size in SIZES[:-1]:  # the first N revisions of a history are a history of N revisions
            directory = HistoryStore(work / str(size)).directory(key)
            directory.mkdir(parents=True)
            for number in range(1, size + 1):
                shutil.copyfile(HistoryStore(work / "1000").path(key, number), directory / f"{number:06d}.yaml")
        env = {**os.environ, "STACKPIN_CACHE_DIR": str(work / "cache")}
        timed = {size: median_ms([*STACKPIN, "history", str(key), "--history", str(work / str(size))], repeats, env)
                 for size in SIZES}
    wall = {size: warm for size, (_, warm) in timed.items()}
    per = {size: (wall[size] - wall[1]) / (size - 1) for size in SIZES[1:]}
    ratio = per[1000] / per[100]
    print(f"stackpin history: whole process, median of {repeats} runs ({max(SIZES):,} revisions written in "
          f"{built:.1f} s)")
    print(f"  {'revisions':>9}  {'wall':>9}  {'per revision above 1':>21}  {'first (cold) listing':>21}")
    for size in SIZES:
        extra = f"{per[size]:>18.2f} ms" if size in per else f"{'(start-up)':>21}"
        print(f"  {size:>9,}  {wall[size]:>6.0f} ms  {extra}  {timed[size][0]:>18.0f} ms")
    verdict = "linear or better: met" if ratio <= 1.25 else "NOT met"
    print(f"  per-revision cost 1,000 vs 100: {ratio:.2f}x (aim <= 1x plus noise: {verdict}); "
          f"wall 1,000 vs 100: {wall[1000] / wall[100]:.1f}x for 10x the revisions")
    print(f"aim: history of 1,000 revisions listed within {AIM_MS} ms: {wall[1000]:.0f} ms "
          f"(first listing, every revision parsed: {timed[1000][0]:.0f} ms): "
          f"{'met' if wall[1000] <= AIM_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
