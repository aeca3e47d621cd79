"""Where a trial measures: each stack behind an endpoint (stackpin's simulator served in-process on a
loopback port, or endpoints the user names), benched by `stackpin bench run`'s library with one set of
controls for both sides."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from stackpin.bench.result import BenchResult, Slo
from stackpin.bench.sessions import Trace
from stackpin.deploy.source import StackSource


@dataclass(frozen=True)
class BenchControls:
    """What both sides are benched under: bench run's options, the same for current and candidate."""

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


@dataclass(frozen=True)
class SimBed:
    """`--sim`: each lock served by stackpin's simulator; `candidate_faults` only on the candidate's."""

    speed: float = 1.0
    share: int = 1
    candidate_faults: str = ""


@dataclass(frozen=True)
class EndpointBed:
    """`--endpoint URL --current-endpoint URL`: stacks already served, the candidate's and the current one's."""

    candidate: str
    current: str


Bed = SimBed | EndpointBed


@contextmanager
def endpoints(bed: Bed, current: StackSource, candidate: StackSource) -> Iterator[tuple[str, str]]:
    """(current URL, candidate URL) while the block runs; simulators are stopped after it, whatever happens."""
    if isinstance(bed, EndpointBed):
        yield bed.current, bed.candidate
        return
    from stackpin.sim.faults import FaultSpec
    from stackpin.sim.server import serve_in_thread
    from stackpin.sim.stack import sim_stack

    faults = FaultSpec.parse(bed.candidate_faults)  # a bad spec is refused before anything is served
    with ExitStack() as servers:
        urls = [servers.enter_context(serve_in_thread(sim_stack(source.lock), speed=bed.speed, share=bed.share,
                                                      faults=spec)).url
                for source, spec in ((current, FaultSpec()), (candidate, faults))]
        yield urls[0], urls[1]


def bench(endpoint: str, source: StackSource, controls: BenchControls) -> BenchResult:
    """One `bench run` of `source` behind `endpoint`, under a fresh cache salt (no run hits the prefix
    cache another filled). run_bench returns with Ctrl-C ignored; the caller restores it."""
    from stackpin.bench.replay import RunOptions, run_bench

    options = RunOptions(endpoint=endpoint, trace=controls.trace, agents=controls.agents, slo=controls.slo,
                         workers=controls.workers, duration_s=controls.duration_s, sessions=controls.sessions,
                         delay_scale=controls.delay_scale, timeout_s=controls.timeout_s,
                         cache_salt=secrets.token_hex(3), lag_limit_s=controls.lag_limit_s, retries=controls.retries)
    return run_bench(options, source)
