"""Where a trial measures: each stack behind an endpoint (stackpin's simulator served in-process on a
loopback port, or endpoints the user names), each benched by `stackpin.bench.controlled` with one set of
controls for both sides."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from stackpin.bench.controlled import BenchControls as BenchControls  # what the CLI builds a trial's controls as
from stackpin.deploy.source import StackSource


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
