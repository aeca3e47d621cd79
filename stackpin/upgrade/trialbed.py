"""Where a trial measures: each stack behind an endpoint (stackpin's simulator served in-process on a
loopback port, NVIDIA Dynamo's own frontend, KV router and mocker as the Dynamo bed, or endpoints the user
names), each benched by `stackpin.bench.controlled` with one set of controls for both sides, alternated
(`alternate`)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from stackpin.bench.controlled import BenchControls as BenchControls  # what the CLI builds a trial's controls as
from stackpin.bench.controlled import bench_once
from stackpin.bench.result import BenchResult, result_json
from stackpin.deploy.source import StackSource
from stackpin.errors import StackpinError
from stackpin.yamlio import write_atomic


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


@dataclass(frozen=True)
class DynamoBed:
    """Each lock served by the Dynamo bed (stackpin.sim.dynamo_bed: Dynamo's own frontend, KV router and
    mocker, timed from the lock by `model`), from its own environment (`env`: None for $STACKPIN_DYNAMO_ENV,
    else the default, as `sim serve --backend dynamo` finds it)."""

    env: str | None = None
    speed: float = 1.0
    share: int = 1
    model: str = "roofline"


Bed = SimBed | EndpointBed | DynamoBed


@contextmanager
def endpoints(bed: Bed, current: StackSource, candidate: StackSource) -> Iterator[tuple[str, str]]:
    """(current URL, candidate URL) while the block runs; simulators and beds are stopped after it, whatever
    happens."""
    if isinstance(bed, EndpointBed):
        yield bed.current, bed.candidate
        return
    if isinstance(bed, DynamoBed):
        from stackpin.sim.dynamo import plan
        from stackpin.sim.dynamo_bed import find_env, running
        from stackpin.sim.models import check_model
        from stackpin.sim.stack import sim_stack

        env = find_env(bed.env)  # one line when it is not installed, before anything starts
        for source in (current, candidate):
            check_model(bed.model, sim_stack(source.lock))
        with ExitStack() as beds:
            urls = [beds.enter_context(running(plan(source.lock, bed.share, bed.speed, bed.model), env,
                                               speed=bed.speed, model_name=bed.model)).url
                    for source in (current, candidate)]
            yield urls[0], urls[1]
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


Measured = list[tuple[Path, BenchResult]]


def alternate(urls: tuple[str, str], sides: tuple[StackSource, StackSource], labels: tuple[str, str],
              controls: BenchControls, runs: int, out_dir: Path,
              note: Callable[[str], None] = lambda _: None) -> tuple[Measured, Measured]:
    """Bench both sides `runs` times, alternating which goes first (A B, then B A, ...: ABBA), so that a drift
    of the host over the runs weighs on both alike; each result written atomically to
    out_dir/<label>-<run>.json. An interrupted run raises (the files of the runs before it stay)."""
    from stackpin.bench.headline import headline

    measured: tuple[Measured, Measured] = ([], [])
    original = signal.getsignal(signal.SIGINT)
    try:
        for run in range(1, runs + 1):
            for side in (0, 1) if run % 2 else (1, 0):
                result = bench_once(urls[side], sides[side], controls)
                if result.interrupted:
                    raise StackpinError(f"interrupted in run {run} of {runs} ({labels[side]})")
                path = out_dir / f"{labels[side]}-{run}.json"
                write_atomic(path, result_json(result))
                measured[side].append((path, result))
                note(f"run {run}/{runs} {labels[side]}: {headline(result)} ({path})")
    finally:
        signal.signal(signal.SIGINT, original)  # run_bench returns with Ctrl-C ignored
    return measured
