"""The canary's bench gate: the rack's endpoint benched on the stack it ran, then on the new one, with one
trace, one set of controls and one SLO (`stackpin.bench.controlled`, as `upgrade trial` benches), and
`bench compare` judging the runs (its settled verdict, as a trial's).

The engine calls `measure` once per side (it applies the new stack in between) and `judge` on the two
sets of result files, which stay beside the rollout's record as its evidence.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stackpin.bench.compare import Estimate, Metric, Verdict, compare, main_metric
from stackpin.bench.controlled import BenchControls, bench_once
from stackpin.bench.result import BenchResult, result_json
from stackpin.deploy.source import StackSource
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.rollout.fleet import BenchGate
from stackpin.yamlio import write_atomic


@dataclass(frozen=True)
class GateResult:
    verdict: Literal["pass", "fail", "inconclusive"]
    summary: str  # one line, e.g. "tok/s per GPU at the SLO -49.5% [-49.6%, -49.3%] (2 runs, simulated)"
    before: tuple[str, ...]  # result files of the stack that ran before
    after: tuple[str, ...]  # result files of the new stack


def gate_controls(gate: BenchGate, lock: StackLock, trace: Path) -> BenchControls:
    """The gate's controls for `lock`: its SLO is `gate.slo`, else the lock's profile spec.service (as a
    trial's is). The engine benches both sides alike by pinning the SLO of the stack that ran before
    (`pinned_slo`) when the two stacks' spec.service differ; otherwise `judge` refuses the pair."""
    from stackpin.bench.binding import parse_agents, parse_seconds
    from stackpin.bench.controlled import compared_slo
    from stackpin.bench.sessions import read_trace

    agents = parse_agents(gate.agents)
    return BenchControls(trace=read_trace(trace), agents=agents, slo=compared_slo(gate.slo, lock, agents),
                         duration_s=gate.duration_seconds, sessions=gate.sessions,
                         lag_limit_s=parse_seconds(gate.lag_limit, "lagLimit"))


def pinned_slo(gate: BenchGate, lock: StackLock) -> BenchGate:
    """`gate` with its SLO written out as `lock`'s spec.service when it names none: give it to `measure`
    for both sides so the new stack is held to the SLO the old one was."""
    from stackpin.bench.binding import parse_agents

    if gate.slo is not None:
        return gate
    if set(parse_agents(gate.agents)) == {1}:
        return gate.model_copy(update={"slo": "none"})  # one agent alone cannot locate it (compared_slo)
    service = lock.stack_profile.spec.service
    return gate.model_copy(update={"slo": f"tps={float(service.per_agent_tok_s):g},"
                                          f"ttft={float(service.ttft_seconds):g}s"})


SWITCH_WAIT_S = 120.0  # how long a rack's endpoint may take to serve the stack just applied


def measure(endpoint: str, lock: StackLock, gate: BenchGate, trace: Path, out_dir: Path, label: str,
            on_note: Callable[[str], None]) -> tuple[Path, ...]:
    """`gate.runs` bench runs of `lock` served at `endpoint`, written atomically to out_dir/<label>-<n>.json.
    A run that cannot be made (endpoint down, another stack served, failed requests, Ctrl-C) raises a
    one-line StackpinError naming the endpoint; files of the runs before it stay."""
    controls = gate_controls(gate, lock, trace)
    source = StackSource(lock, origin=lock.metadata.name)
    _wait_serving(endpoint, lock, on_note)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    original = signal.getsignal(signal.SIGINT)
    try:
        for run in range(1, gate.runs + 1):
            result = _run(endpoint, source, controls, f"run {run} of {gate.runs} ({label})")
            path = out_dir / f"{label}-{run}.json"
            write_atomic(path, result_json(result))
            paths.append(path)
            on_note(f"{label} run {run}/{gate.runs}: {_headline(result)} ({path})")
    finally:
        signal.signal(signal.SIGINT, original)  # run_bench leaves Ctrl-C ignored until the result is written
    return tuple(paths)


def _wait_serving(endpoint: str, lock: StackLock, on_note: Callable[[str], None]) -> None:
    """Until the endpoint serves `lock`'s stack, as far as it says which (a simulator names its digest):
    a rack's frontend can still serve the stack before for a moment after the new one reports ready. After
    SWITCH_WAIT_S, measure goes on and bench run's own check says what is served."""
    import time

    from stackpin.bench.replay import probe

    deadline, said = time.monotonic() + SWITCH_WAIT_S, False
    while time.monotonic() < deadline:
        try:
            found = probe(endpoint)
        except StackpinError:
            found = None  # not answering yet
        if found is not None and found.digest in (None, lock.stack_digest):
            return
        if not said:
            on_note(f"waiting for {endpoint} to serve {lock.metadata.name} ({lock.stack_digest[:19]})")
            said = True
        time.sleep(0.5)


def _run(endpoint: str, source: StackSource, controls: BenchControls, which: str) -> BenchResult:
    try:
        result = bench_once(endpoint, source, controls)
    except StackpinError as exc:
        # bench run's errors speak of its --endpoint option; the gate's name the rack's endpoint
        said = " ".join(" ".join(exc.lines()).split())
        said = said.removeprefix(f"--endpoint {endpoint}: ").removeprefix(f"--endpoint {endpoint} ")
        raise StackpinError(f"bench gate: {endpoint}: {which}: {said}") from None
    if result.interrupted:
        raise StackpinError(f"bench gate: {endpoint}: {which} interrupted")
    requests = [r for p in result.points for r in p.request_log]
    failed = [r for r in requests if r.error]
    if failed:
        first = " ".join((failed[0].error or "").split())[:200]
        raise StackpinError(f"bench gate: {endpoint}: {which}: {len(failed)} of {len(requests)} requests failed "
                            f"(first: {first})")
    return result


def judge(before: Sequence[Path], after: Sequence[Path], threshold: float,
          allow_acceptance_change: bool = False) -> GateResult:
    """bench compare's verdict (bench.compare.decide) as the gate's: pass on a gain or no significant change,
    fail on a regression, inconclusive when the evidence cannot decide (then the summary says what is
    missing). Results measured under different controls (trace, model, SLO) raise ControlsDiffer; one
    without its request logs is refused."""
    from stackpin.bench.resultfile import read_evidence

    if not before or not after:
        raise StackpinError("bench gate: judging needs at least one result of each stack")
    a, b = [read_evidence(p) for p in before], [read_evidence(p) for p in after]
    comparison = compare(a, b, threshold=threshold, allow_acceptance_change=allow_acceptance_change)
    decided = comparison.verdict
    main = main_metric(comparison)
    runs = f"{len(a)} runs" if len(a) == len(b) else f"{len(a)}+{len(b)} runs"
    simulated = ", simulated" if any(r.simulation is not None for r in [*a, *b]) else ""
    summary = f"{_change(main)} ({runs}{simulated})" if main else f"no headline measured on both sides ({runs}" \
                                                                      f"{simulated})"
    verdict: Literal["pass", "fail", "inconclusive"] = "pass"
    if decided is Verdict.regression:
        verdict = "fail"
    elif decided is Verdict.inconclusive:
        verdict = "inconclusive"
    if decided is Verdict.inconclusive:
        summary += "; " + "; ".join(comparison.missing())
    return GateResult(verdict, " ".join(summary.split()), tuple(map(str, before)), tuple(map(str, after)))


def _change(metric: Metric) -> str:
    if metric.change is None:  # bounds, or no evidence on a side: the estimates, no percentage
        def text(e: Estimate | None) -> str:
            return "no data" if e is None else e.text(lambda v: f"{v:.3g}")

        return f"{metric.name} {text(metric.a)} -> {text(metric.b)}"
    interval = f" [{metric.low:+.1%}, {metric.high:+.1%}]" if metric.low is not None and metric.high is not None \
        else ""
    return f"{metric.name} {metric.change:+.1%}{interval}"


def _headline(result: BenchResult) -> str:
    from stackpin.bench.headline import headline

    return headline(result)
