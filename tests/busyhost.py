"""Bench results as a busy host leaves them: tests/benchdata.py's illustrative curves with some points
measured by a saturated client, marked invalid as `stackpin bench run` marks them (stats.build_point with
the client's busy fraction over --busy-limit), their figures still in the file, so each reads back verified.

`python -m tests.busyhost DIR` writes the three story stacks' results (NAME-busy.json) as issue 34 found
them on a busy host (most points invalid; the tuned stack left with one valid point), bound to the shipped
lockfiles' stack digests, for the docs' examples of invalid points on the charts and in the report.
"""

from __future__ import annotations

from stackpin.bench.result import BenchResult
from stackpin.bench.stats import build_point
from tests import benchdata

BUSY = 0.97  # the busiest client process's share of a CPU: over the default --busy-limit, 0.9

# Agent counts a saturated client measured, per story stack.
INVALID = {"gb300-launch": {32, 128, 512, 2048}, "gb300-tuned": {8, 32, 128, 512, 2048}, "vera-rubin-tuned": {32}}


def with_invalid(result: BenchResult, agents: set[int]) -> BenchResult:
    """`result` with its points at `agents` measured by a saturated client (their request logs kept)."""
    points = tuple(build_point(p.agents, p.duration_s, p.request_log, result.stack.gpus, result.controls.slo,
                               busy=BUSY) if p.agents in agents else p for p in result.points)
    return result.model_copy(update={"points": points})


def busy_host(digests: dict[str, str] | None = None) -> list[BenchResult]:
    """Launch, tuned and Vera Rubin as the issue's busy host measured them; `digests` by stack name."""
    made = {"gb300-launch": benchdata.launch, "gb300-tuned": benchdata.tuned, "vera-rubin-tuned": benchdata.rubin}
    return [with_invalid(make((digests or {}).get(name)), INVALID[name]) for name, make in made.items()]


if __name__ == "__main__":
    import sys
    from pathlib import Path

    from stackpin.lock.lockfile import read_lock

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    locks = Path(__file__).resolve().parent.parent / "lockfiles"
    digests = {name: read_lock(locks / f"{name}.lock.yaml").stack_digest for name in INVALID}
    for result in busy_host(digests):
        path = out / f"{result.stack.name}-busy.json"  # beside benchdata's quiet ones, named apart
        benchdata.write(result, path)
        print(path)
