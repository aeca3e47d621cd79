"""`stackpin history DEPLOYMENT` over long histories: 1, 100 and 1,000 synthetic revisions of one deployment.

Revisions are made from the shipped GB300 locks (launch and tuned, alternating) with distinct messages,
chained and written as `stackpin promote` writes them. Each row is the median of whole `stackpin history`
processes, which read and verify every revision (its digest, its lock's digest, the chain). Two aims:
listing time grows no worse than linearly (`linearity`: the time above the one-revision run, which is
start-up, at 1,000 at most ten times that at 100, times 1.25, plus a noise allowance; never a ratio of
two per-revision costs, which with the cache are near zero and noise), and a listing of 1,000 revisions
takes at most 500 ms (issue 21). Rows are listed as a user lists them a second time: the per-user verified cache
(stackpin/history/verified.py) holds the files read before, in a cache directory of the bench's own;
the first, cold listing (every revision parsed) is printed beside them.

Then what a machine with no verified cache (a fresh CI runner) pays for the commands that verify the whole
chain before they act (issue 18): `promote`, `rollback --to 1` and `diff DEP@1 DEP@2` onto the 100- and
1,000-revision histories, each run on a fresh copy with an empty cache directory; every revision is parsed
once, so their time grows with the history.

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
from collections.abc import Mapping, Sequence
from pathlib import Path

from stackpin.history.model import Action, ActionKind, DeploymentKey, Revision, new_revision, revision_text
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import read_lock
from stackpin.yamlio import create_exclusive

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1, 100, 1000)
AIM_MS = 500
SLACK = 1.25
# What two whole `stackpin history` processes differ by with no work between them, on a busy 2-core host.
NOISE_FLOOR_MS = 30.0
STACKPIN = [sys.executable, "-c", "from stackpin.cli.main import run; run()"]


def build(root: Path, count: int) -> DeploymentKey:
    """`count` revisions of the GB300 deployment under `root`."""
    locks = [read_lock(ROOT / "lockfiles" / f"{name}.lock.yaml") for name in ("gb300-launch", "gb300-tuned")]
    store, key = HistoryStore(root), DeploymentKey.of_lock(locks[0])
    store.directory(key).mkdir(parents=True)
    previous: Revision | None = None
    for number in range(1, count + 1):
        # One second apart: a history's times never go back (reading refuses one that does).
        created = f"2026-01-01T{number // 3600:02d}:{number // 60 % 60:02d}:{number % 60:02d}Z"
        revision = new_revision(key, number, locks[number % 2], created=created,
                                author="bench <bench@stackpin.dev>", message=f"synthetic revision {number}",
                                action=Action(kind=ActionKind.promote), previous=previous)
        create_exclusive(store.path(key, number), revision_text(revision))
        previous = revision
    return key


def timed_ms(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode:
        sys.exit(f"{' '.join(cmd[3:])} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return (time.perf_counter() - start) * 1000


def linearity(samples: Mapping[int, Sequence[float]]) -> tuple[bool, str]:
    """Whether whole-process time grows no faster than linearly with the number of revisions, and the line
    saying so. `samples`: wall times (ms) per history size; the smallest size is start-up. The time above
    start-up at the largest size must be at most the time above start-up at the middle size scaled by the
    sizes' ratio, times SLACK, plus a noise allowance (NOISE_FLOOR_MS, or the spread of the start-up runs
    if larger). Medians throughout; no division by a per-revision cost, which is near zero once the
    verified cache holds the files and would turn noise into a false verdict."""
    base, small, large = sorted(samples)
    med = {size: statistics.median(times) for size, times in samples.items()}
    above = {size: med[size] - med[base] for size in (small, large)}
    per = {size: above[size] / (size - base) for size in (small, large)}
    scale = (large - base) / (small - base)
    noise = max(NOISE_FLOOR_MS, max(samples[base]) - min(samples[base]))
    bound = SLACK * scale * max(above[small], 0.0) + noise
    met = above[large] <= bound
    ratio = (f"{per[large] / per[small]:.2f}x" if min(above.values()) > noise else
             "not a ratio: within noise of start-up")
    line = (f"time above start-up: {small:,}: {above[small]:.0f} ms ({per[small]:.3f} ms/revision), "
            f"{large:,}: {above[large]:.0f} ms ({per[large]:.3f} ms/revision); per-revision {large:,} vs "
            f"{small:,}: {ratio}; linear bound for {large:,}: {bound:.0f} ms ({SLACK}x {scale:.0f}x "
            f"{max(above[small], 0.0):.0f} ms + {noise:.0f} ms noise): {'met' if met else 'NOT met'}")
    return met, line


def cold_commands(work: Path, key: DeploymentKey, repeats: int) -> dict[str, dict[int, list[float]]]:
    """Whole-process ms of promote, rollback and a two-revision diff onto the 100- and 1,000-revision histories
    under `work`, each on a fresh copy of the history and deployments with an empty verified cache."""
    tuned = str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")  # both histories' newest revision is the launch stack
    commands = {"promote": ["promote", tuned, "-m", "bench"], "rollback --to 1": ["rollback", str(key), "--to", "1"],
                "diff DEP@1 DEP@2": ["diff", f"{key}@1", f"{key}@2"]}
    times: dict[str, dict[int, list[float]]] = {name: {size: [] for size in SIZES[1:]} for name in commands}
    for run in range(repeats):
        for name, args in commands.items():
            for size in SIZES[1:]:
                copy = work / f"cold-{run}-{len(times[name][size])}-{size}-{name.split()[0]}"
                shutil.copytree(work / str(size), copy / "history")
                where = ["--history", str(copy / "history")]
                if name != "diff DEP@1 DEP@2":
                    where += ["--deployments", str(copy / "deployments")]
                env = {**os.environ, "STACKPIN_CACHE_DIR": str(copy / "cache"),
                       "STACKPIN_AUTHOR": "bench <bench@stackpin.dev>"}
                times[name][size].append(timed_ms([*STACKPIN, *args, *where], env))
                shutil.rmtree(copy)
    return times


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
        cmds = {size: [*STACKPIN, "history", str(key), "--history", str(work / str(size))] for size in SIZES}
        cold = {size: timed_ms(cmds[size], env) for size in SIZES}  # the first listing: nothing cached
        warm: dict[int, list[float]] = {size: [] for size in SIZES}
        for _ in range(repeats):  # in turn, so every size sees the same load
            for size in SIZES:
                warm[size].append(timed_ms(cmds[size], env))
        cold_ops = cold_commands(work, key, min(repeats, 3))
    wall = {size: statistics.median(times) for size, times in warm.items()}
    print(f"stackpin history: whole process, median of {repeats} runs in turn ({max(SIZES):,} revisions "
          f"written in {built:.1f} s)")
    print(f"  {'revisions':>9}  {'wall':>9}  {'first (cold) listing':>21}")
    for size in SIZES:
        print(f"  {size:>9,}  {wall[size]:>6.0f} ms  {cold[size]:>18.0f} ms")
    _, line = linearity(warm)
    print(f"  listing: {line}")
    cold_per = {size: (cold[size] - cold[SIZES[0]]) / (size - SIZES[0]) for size in SIZES[1:]}
    print("  first listing, per revision above start-up: " +
          ", ".join(f"{size:,}: {per:.2f} ms" for size, per in cold_per.items()) + " (one run each)")
    small, large = SIZES[1], SIZES[2]
    print(f"cold commands (no verified cache; median of {len(cold_ops['promote'][small])} runs, each on a fresh "
          "copy): whole process")
    for name, times in cold_ops.items():
        a, b = statistics.median(times[small]), statistics.median(times[large])
        print(f"  {name:<24} {small:,}: {a:6.0f} ms  {large:,}: {b:6.0f} ms  "
              f"(+{(b - a) / (large - small):.2f} ms per revision)")
    print(f"aim: history of 1,000 revisions listed within {AIM_MS} ms: {wall[1000]:.0f} ms "
          f"(first listing, every revision parsed: {cold[1000]:.0f} ms): "
          f"{'met' if wall[1000] <= AIM_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
