"""Benching stacks alike: one set of controls (bench run's options) for every side of a comparison, and
one run of a stack behind an endpoint under them. `upgrade trial` and the rollout's bench gate both
bench this way, so what one compares is measured as the other's is."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from stackpin.bench.result import BenchResult, Slo
from stackpin.bench.sessions import Trace
from stackpin.deploy.source import StackSource
from stackpin.lock.lockfile import StackLock


@dataclass(frozen=True)
class BenchControls:
    """What every side is benched under: bench run's options, the same for each stack compared."""

    trace: Trace
    agents: tuple[int, ...] = (1,)
    slo: Slo | None = None
    workers: int = 1
    duration_s: float | None = None
    sessions: int | None = None
    delay_scale: float = 1.0
    timeout_s: float = 300.0
    lag_limit_s: float = 0.01
    retries: int = 1


def bench_once(endpoint: str, source: StackSource, controls: BenchControls) -> BenchResult:
    """One `bench run` of `source` behind `endpoint`, under a fresh cache salt (no run hits the prefix
    cache another filled). run_bench returns with Ctrl-C ignored; the caller restores it."""
    from stackpin.bench.replay import RunOptions, run_bench

    options = RunOptions(endpoint=endpoint, trace=controls.trace, agents=controls.agents, slo=controls.slo,
                         workers=controls.workers, duration_s=controls.duration_s, sessions=controls.sessions,
                         delay_scale=controls.delay_scale, timeout_s=controls.timeout_s,
                         cache_salt=secrets.token_hex(3), lag_limit_s=controls.lag_limit_s, retries=controls.retries)
    return run_bench(options, source)


def compared_slo(text: str | None, lock: StackLock, agents: tuple[int, ...]) -> Slo | None:
    """The SLO both sides are benched under: `text` as bench run's --slo reads it; absent, the profile's
    spec.service, unless one agent is all that is measured. Then nothing can locate the SLO's edge (a curve
    of one point that holds says only ">= 1 agent"), and its headlines could only ever be lower bounds, which
    decide nothing: the comparison is of single-agent speed and TTFT, as asked."""
    from stackpin.bench.binding import slo_option

    if text is None and set(agents) == {1}:
        return None
    return slo_option(text, lock)
