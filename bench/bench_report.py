"""`stackpin report DEPLOYMENT` over long histories: 10, 100 and 1,000 revisions, each with a bench result
attached beside it, as `stackpin bench attach` leaves them.

Revisions are the shipped GB300 locks (launch and tuned, alternating) chained as `stackpin promote` writes
them (bench_history.py's history). Each revision's result is one of two generated files, one per stack,
of a measured run's size: six points of 1,000 requests each, every request with its token-gap histogram,
about 14 MiB of JSON (one point of each marked invalid: the client was saturated). The files are
hard links of those two, so a history of 1,000 results costs 28 MiB of disk, not 14 GiB; the report reads
and verifies each one in full all the same (every figure against its request log).

Each row is the median of whole `stackpin report` processes: wall time and peak resident memory (the
child's ru_maxrss from wait4), first with no cache (`STACKPIN_CACHE_DIR=`: every result read and
verified, as on a first report), then as a report is made again: the summaries of results that verified
before come from the user's cache (stackpin/report/summary.py), each file only hashed. The aim (issue 34):
memory bounded as revisions grow: the report keeps a small summary per result, not the result, so from 10
to 1,000 revisions its peak grows by at most 1% of a result's size per revision (what the page shows of a
revision: its lock's diff and row, about 0.1 MiB), where holding the results grew it by more than a
result's size per revision.

Run from the repository root: `python bench/bench_report.py [REPEATS]` (default 3; the uncached
1,000-revision row, about 10 minutes on two cores, runs REPEATS - 2 times, at least once).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stackpin.bench.gaps import gap_bucket
from stackpin.bench.result import BenchResult, ClientInfo, Controls, Request, Slo, StackRef, controls_fingerprint
from stackpin.bench.result import result_json as result_text
from stackpin.bench.stats import build_point
from stackpin.history.model import Action, ActionKind, DeploymentKey, Revision, new_revision, revision_text
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import read_lock
from stackpin.yamlio import create_exclusive

ROOT = Path(__file__).resolve().parent.parent
SIZES = (10, 100, 1000)
AIM_SHARE = 0.01  # of a result's size: the most the peak may grow per revision
STACKS = ("gb300-launch", "gb300-tuned")
SLO = Slo(tps=80, ttft_s=10)
AGENTS = (1, 8, 32, 128, 512, 2048)
INVALID_AT = 128  # the client was saturated here: the point stays in the file, marked invalid
REQUESTS = 1000  # per point: about what a 40 s point of 128 agents logs (make demo's launch stack)
OUTPUTS = (40, 60, 90, 110, 130, 150, 150, 170, 220, 300, 450, 900, 2100)  # AgentPerf-shaped, median 150


def requests_at(rng: random.Random, agents: int, speed: float, ttft: float, count: int) -> tuple[list[Request], float]:
    """`count` requests of `agents` agents around `speed` tok/s each, with their gap histograms, and the
    point's wall time (so its throughput is `agents * speed`)."""
    log: list[Request] = []
    clock, total = 0.0, 0
    spread = min(agents, count)
    for i in range(count):
        agent = i % spread
        rate = speed * (0.95 + 0.1 * agent / max(1, spread - 1))
        out = OUTPUTS[i % len(OUTPUTS)]
        first = ttft * (0.5, 0.8, 1.0)[i % 3]
        # A measured stream's gaps: most near 1/rate, a tail of slower ones (scheduling, prefill of others).
        gaps: dict[int, int] = {}
        for _ in range(out - 1):
            gap = (1 / rate) * rng.lognormvariate(0, 0.25)
            gaps[gap_bucket(gap)] = gaps.get(gap_bucket(gap), 0) + 1
        prompt = 27000 + 40 * (i % 4)
        log.append(Request(agent=agent, session=f"s{i // 4}", turn=i % 4, start_s=round(clock, 6), ttft_s=first,
                           end_s=round(clock + first + out / rate, 6), prompt_tokens=prompt, cached_tokens=20000,
                           output_tokens=out, itl_mean_s=1 / rate, sent_tokens=prompt,
                           token_gaps=tuple(sorted(gaps.items()))))
        clock += 0.02
        total += out
    return log, total / (agents * speed)


def realistic_result(name: str, digest: str, single: float, knee: float, requests: int = REQUESTS) -> BenchResult:
    """A result shaped like benchdata's curves (`single` tok/s for one agent, halved at `knee` + 1 agents),
    `requests` requests a point, every figure computed from its log as a run computes it (so it reads back
    verified)."""
    controls = Controls(model="deepseek-ai/DeepSeek-V4.1-Flash@main", precision="fp4", engines={"vllm": "0.31.0"},
                        trace_digest="sha256:" + "ab" * 32, agents=AGENTS, slo=SLO)
    rng = random.Random(name)
    points = []
    for agents in AGENTS:
        speed = single / (1 + (agents - 1) / knee)
        log, duration = requests_at(rng, agents, speed, 0.4 + (agents / 900) ** 2 * 10, requests)
        busy = 0.97 if agents == INVALID_AT else 0.4
        points.append(build_point(agents, duration, log, 72, SLO, busy=busy, lag_s=0.001))
    return BenchResult(stack=StackRef(digest=digest, name=name, platform="gb300-nvl72", gpus=72), controls=controls,
                       fingerprint=controls_fingerprint(controls), endpoint="http://127.0.0.1:8000",
                       started="2026-11-30T12:00:00Z", finished="2026-11-30T12:40:00Z",
                       client=ClientInfo(workers=2, cpu_seconds=300.0, saturated=False), points=tuple(points))


def build(root: Path, count: int, results: dict[str, Path]) -> DeploymentKey:
    """`count` revisions of the GB300 deployment under `root`, each with its stack's result beside it."""
    locks = [read_lock(ROOT / "lockfiles" / f"{name}.lock.yaml") for name in STACKS]
    store, key = HistoryStore(root), DeploymentKey.of_lock(locks[0])
    store.directory(key).mkdir(parents=True)
    previous: Revision | None = None
    for number in range(1, count + 1):
        lock = locks[number % 2]
        # One second apart: a history's times never go back (reading refuses one that does).
        created = f"2026-01-01T{number // 3600:02d}:{number // 60 % 60:02d}:{number % 60:02d}Z"
        revision = new_revision(key, number, lock, created=created,
                                author="bench <bench@stackpin.dev>", message=f"synthetic revision {number}",
                                action=Action(kind=ActionKind.promote), previous=previous)
        create_exclusive(store.path(key, number), revision_text(revision))
        os.link(results[lock.metadata.name], store.directory(key) / f"{number:06d}.bench.json")
        previous = revision
    return key


# Linux counts a child's resident memory before its exec in its ru_maxrss: a child forked from this process,
# which holds generated results, would report this process's size as its own peak. The command is started
# from this small launcher instead, which reports the command's wall time, peak RSS (KiB) and exit status.
_LAUNCHER = ("import os, subprocess, sys, time; start = time.perf_counter(); "
             "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
             "_, status, usage = os.wait4(child.pid, 0); "
             "print(time.perf_counter() - start, usage.ru_maxrss, os.waitstatus_to_exitcode(status))")


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one whole process."""
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, *cmd], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True)
    wall, peak_kib, code = done.stdout.split()
    if code != "0":
        raise SystemExit(f"{' '.join(cmd)}: exit {code}")
    return float(wall), int(peak_kib) / 1024  # Linux: KiB


def median_run(cmd: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    timed = [measured(cmd, env) for _ in range(runs)]
    return statistics.median(w for w, _ in timed), statistics.median(m for _, m in timed)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        files: dict[str, Path] = {}
        for name, single, knee in (("gb300-launch", 596, 60), ("gb300-tuned", 848, 64.5)):
            lock = read_lock(ROOT / "lockfiles" / f"{name}.lock.yaml")
            files[name] = work / f"{name}.json"
            files[name].write_text(result_text(realistic_result(name, lock.stack_digest, single, knee)))
        size_mib = statistics.mean(f.stat().st_size for f in files.values()) / 2**20
        keys = {size: build(work / str(size), size, files) for size in SIZES}
        built = time.perf_counter() - start
        uncached = {**os.environ, "STACKPIN_CACHE_DIR": ""}
        cached = {**os.environ, "STACKPIN_CACHE_DIR": str(work / "cache")}

        def cmd(size: int) -> list[str]:
            return [sys.executable, "-m", "stackpin", "report", str(keys[size]), "--history", str(work / str(size)),
                    "--out", str(work / f"report-{size}.html")]

        cold = {size: median_run(cmd(size), repeats if size < 1000 else max(1, repeats - 2), uncached)
                for size in SIZES}
        measured(cmd(SIZES[0]), cached)  # fills the cache: every revision's result is one of these two files
        warm = {size: median_run(cmd(size), repeats, cached) for size in SIZES}
        page_mib = {size: (work / f"report-{size}.html").stat().st_size / 2**20 for size in SIZES}
    print(f"stackpin report: whole process, median of {repeats} runs ({max(1, repeats - 2)} uncached at 1,000); "
          f"every revision with a {size_mib:.1f} MiB result attached (built in {built:.0f} s)")
    print(f"  {'revisions':>9}  {'first (no cache)':>16}  {'per result':>10}  {'peak RSS':>8}  "
          f"{'again (cached)':>14}  {'peak RSS':>8}  {'page':>8}")
    for size in SIZES:
        (wall, peak), (again, again_peak) = cold[size], warm[size]
        print(f"  {size:>9,}  {wall:>14.1f} s  {wall / size * 1000:>7.0f} ms  {peak:>4.0f} MiB  {again:>12.1f} s  "
              f"{again_peak:>4.0f} MiB  {page_mib[size]:>4.1f} MiB")
    per_revision = (cold[1000][1] - cold[10][1]) / (1000 - 10)
    aim = AIM_SHARE * size_mib
    print(f"  wall, first report: 1,000 vs 100 {cold[1000][0] / cold[100][0]:.1f}x, 100 vs 10 "
          f"{cold[100][0] / cold[10][0]:.1f}x (for 10x the revisions each); peak 1,000 vs 10: "
          f"{cold[1000][1] / cold[10][1]:.2f}x")
    print(f"aim: peak memory grows by at most {AIM_SHARE:.0%} of a result ({aim:.3f} MiB) per revision, 10 to 1,000: "
          f"{per_revision:.3f} MiB ({cold[10][1]:.0f} -> {cold[1000][1]:.0f} MiB): "
          f"{'met' if per_revision <= aim else 'NOT met'}")


if __name__ == "__main__":
    main()
