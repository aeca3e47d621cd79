"""The rollout's bench gate (stackpin/rollout/benchgate.py) against in-process simulators of the shipped
gb300-tuned lock, and the test bed's live endpoint (devkit/livesim.py) against a real kube-apiserver.

Short benches as tests/test_upgrade_trial.py runs them: a share of the rack (18), simulated time at wall
speed, a four-session trace with no tool time between turns (the gate has no --delay-scale), lag limit 50ms.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from devkit.demorun import SHORT_SESSIONS
from stackpin.bench.resultfile import read_result
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock, read_lock
from stackpin.rollout.benchgate import GateResult, judge, measure
from stackpin.rollout.fleet import BenchGate
from stackpin.sim.faults import FaultSpec
from stackpin.sim.server import serve_in_thread
from tests.helpers import ROOT
from tests.kube import Kube, garbage_collector

LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
GATE = BenchGate(trace="agents.jsonl", runs=2, threshold="20%", lag_limit="50ms")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Short sessions (`stackpin trace gen`, devkit.demorun.SHORT_SESSIONS), their turns back to back."""
    path = tmp_path_factory.mktemp("trace") / "agents.jsonl"
    params = ["first_input.median=800", "turn_input.median=200", "output.median=30", "output.min=20",
              "output.max=60", "turns.median=2", "turns.max=3", "delay_ms.median=0", "delay_ms.max=0"]
    subprocess.run([sys.executable, "-m", "stackpin", "trace", "gen", "--sessions", str(SHORT_SESSIONS), "--seed", "1",
                    *[x for p in params for x in ("--param", p)], "--out", str(path)], cwd=ROOT, check=True,
                   capture_output=True)
    return path


@pytest.fixture(scope="module")
def lock() -> StackLock:
    return read_lock(LOCK)


SPEEDS = (1.0, 0.5, 0.25)  # a try again runs the simulators slower: a late host then weighs less in the stack's time


def gate_run(tmp_path: Path, lock: StackLock, trace: Path, after_faults: str, wrong: str) -> GateResult:
    """Bench one simulator as the stack before, another (with `after_faults`) as the new one, and judge. A host
    busy with other work (two cores, tests in parallel, a CPU burner) can leave the evidence short of a
    decision, which the gate rightly calls inconclusive: then again at a lower simulator speed (SPEEDS), as
    the demo does. No try may give the `wrong` verdict."""
    notes: list[str] = []
    result = None
    for attempt, speed in enumerate(SPEEDS):
        out = tmp_path / f"try{attempt}"
        with serve_in_thread(LOCK, speed=speed, share=18) as old, \
                serve_in_thread(LOCK, speed=speed, share=18, faults=FaultSpec.parse(after_faults)) as new:
            before = measure(old.url, lock, GATE, trace, out, "before", notes.append)
            after = measure(new.url, lock, GATE, trace, out, "after", notes.append)
        assert [p.name for p in before] == ["before-1.json", "before-2.json"]
        assert [p.name for p in after] == ["after-1.json", "after-2.json"]
        assert len(notes) == 4 and notes[0].startswith("before run 1/2: ") and notes[0].endswith(f"({before[0]})")
        result = judge(before, after, 0.2)
        assert result.before == tuple(map(str, before)) and result.after == tuple(map(str, after))
        assert result.verdict != wrong, (speed, result.summary)
        if result.verdict != "inconclusive":
            break
        notes.clear()
    assert result is not None
    return result


def test_a_slowed_new_stack_fails_the_gate(tmp_path: Path, lock: StackLock, trace: Path) -> None:
    result = gate_run(tmp_path, lock, trace, "slow=2", wrong="pass")
    assert result.verdict == "fail", result.summary
    assert "\n" not in result.summary
    assert result.summary.startswith("single-agent tok/s -"), result.summary
    assert result.summary.endswith("(2 runs, simulated)"), result.summary


def test_the_same_stack_on_both_sides_passes(tmp_path: Path, lock: StackLock, trace: Path) -> None:
    result = gate_run(tmp_path, lock, trace, "", wrong="fail")
    assert result.verdict == "pass", result.summary
    assert "simulated" in result.summary and "\n" not in result.summary


def test_a_dead_endpoint_is_one_line_naming_it(tmp_path: Path, lock: StackLock, trace: Path) -> None:
    from devkit.process import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(StackpinError) as caught:
        measure(endpoint, lock, GATE, trace, tmp_path, "before", lambda _: None)
    [line] = caught.value.lines()
    assert line.startswith(f"bench gate: {endpoint}: run 1 of 2 (before): cannot reach it: "), line
    assert not list(tmp_path.glob("*.json"))


def test_failed_requests_are_one_line_naming_the_endpoint(tmp_path: Path, lock: StackLock, trace: Path) -> None:
    """A stack that answers errors is not measured: the gate stops on it rather than judge what came back."""
    gate = GATE.model_copy(update={"slo": "none", "runs": 1})
    with serve_in_thread(LOCK, share=18, faults=FaultSpec(error=0.5)) as sim:
        with pytest.raises(StackpinError) as caught:
            measure(sim.url, lock, gate, trace, tmp_path, "after", lambda _: None)
    [line] = caught.value.lines()
    assert line.startswith(f"bench gate: {sim.url}: run 1 of 1 (after): "), line
    assert " requests failed (first: " in line, line
    assert not list(tmp_path.glob("*.json"))

def test_the_simulator_of_another_stack_is_refused(tmp_path: Path, trace: Path) -> None:
    """The rack serving something other than the stack the gate benches is an error, not a measurement."""
    other = read_lock(ROOT / "lockfiles" / "gb300-launch.lock.yaml")
    with serve_in_thread(LOCK, share=18) as sim:
        with pytest.raises(StackpinError) as caught:
            measure(sim.url, other, GATE, trace, tmp_path, "after", lambda _: None)
    [line] = caught.value.lines()
    assert line.startswith(f"bench gate: {sim.url}: run 1 of 2 (after): simulates stack "), line


def test_an_invalid_run_is_inconclusive(tmp_path: Path, lock: StackLock, trace: Path) -> None:
    """A run whose client could not keep up (here: a lag limit no client meets, so every point of the new
    stack's second run is invalid) is no measurement: left out of both sides, and what is left cannot
    settle the gate, which says which point and why."""
    with serve_in_thread(LOCK, speed=1.0, share=18) as sim:
        before = measure(sim.url, lock, GATE, trace, tmp_path, "before", lambda _: None)
        after = measure(sim.url, lock, GATE, trace, tmp_path / "a1", "after", lambda _: None)[:1]
        after += measure(sim.url, lock, GATE.model_copy(update={"lag_limit": "0.000001s", "runs": 1}), trace,
                         tmp_path / "a2", "after", lambda _: None)
    assert read_result(after[1]).points[0].invalid is not None
    result = judge(before, after, 0.2)
    assert result.verdict == "inconclusive", result.summary
    assert "B run 2 has no valid point at 1 agent(s) (client timestamps late" in result.summary, result.summary


def test_an_interval_past_the_threshold_is_inconclusive() -> None:
    """No significant change by the mean, but an interval too wide to tell it from a change past the
    threshold: the one decision (bench compare's, the trial's and the gate's) is inconclusive; no headline
    at all is inconclusive too."""
    from stackpin.bench.compare import Verdict, _measured_verdict, decide

    assert _measured_verdict(-0.01, -0.03, 0.01, True, 0.05, 100.0, 99.0)[0] is Verdict.no_change
    verdict, why = _measured_verdict(-0.01, -0.09, 0.04, True, 0.05, 100.0, 99.0)
    assert verdict is Verdict.inconclusive and "reaches past the 5% threshold on the worse side" in why
    assert decide([]) is Verdict.inconclusive


def test_the_slo_of_the_stack_before_is_pinned_for_both_sides(trace: Path) -> None:
    """No slo in the gate: each side would be held to its own spec.service; pinned_slo writes the old stack's
    out, so the new one is held to it (and judge compares like with like)."""
    from stackpin.bench.binding import service_slo
    from stackpin.rollout.benchgate import gate_controls, pinned_slo

    launch = read_lock(ROOT / "lockfiles" / "gb300-launch.lock.yaml")
    loaded = GATE.model_copy(update={"agents": "1,8"})
    pinned = pinned_slo(loaded, launch)
    assert gate_controls(pinned, read_lock(LOCK), trace).slo == service_slo(launch)
    assert pinned_slo(pinned, read_lock(LOCK)) is pinned
    assert gate_controls(loaded.model_copy(update={"slo": "none"}), launch, trace).slo is None
    # One agent alone cannot locate the SLO's edge: no SLO unless the gate names one.
    assert gate_controls(pinned_slo(GATE, launch), read_lock(LOCK), trace).slo is None
    named = GATE.model_copy(update={"slo": "tps=50,ttft=2s"})
    assert gate_controls(pinned_slo(named, launch), launch, trace).slo is not None

# --- the test bed's live endpoint (devkit/livesim.py) ------------------------------------------------

GB300 = "dsv41-flash@gb300-nvl72"


def sim_info(url: str) -> dict:
    with urllib.request.urlopen(url + "/stackpin/sim", timeout=10) as answer:
        return json.loads(answer.read())


def serving(url: str, digest: str, within_s: float = 15.0) -> dict:
    """/stackpin/sim once it names `digest` (the bed polls the API server every half second; 503 until a
    stack is live)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            info = sim_info(url)
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                raise AssertionError(f"{exc.code}: {exc.read().decode()}") from None
        else:
            if info["stack_digest"] == digest or time.monotonic() > deadline:
                return info
        time.sleep(0.1)


def test_the_live_endpoint_serves_the_applied_revision_and_follows_an_apply(kube: Kube, tmp_path: Path,
                                                                            trace: Path) -> None:
    """Apply revision 1 of the committed demo history (gb300-launch): the bed serves its simulator. Apply
    revision 2 (gb300-tuned, injected with slow=2 by digest): it switches, streams through, and the gate
    benches the new stack through it. Then a stack applied from a lockfile (no revision)."""
    from devkit.livesim import serve_live
    from stackpin.history.store import HistoryStore

    history = tmp_path / "history"
    shutil.copytree(ROOT / "history", history)
    store = HistoryStore(history)
    key = store.resolve(GB300)
    first, second = (store.read(key, n).lock.stack_digest for n in (1, 2))
    assert first != second
    with serve_live(kube.kubeconfig, kube.namespace, "dsv41-flash", history, {second: "slow=2"}, share=2) as url:
        with pytest.raises(urllib.error.HTTPError) as nothing:
            sim_info(url)
        assert nothing.value.code == 503  # nothing applied yet: nothing served
        assert kube.stackpin("apply", f"{GB300}@1", "--history", str(history)).exit_code == 0
        info = serving(url, first)
        assert (info["stack_digest"], info["stack"]) == (first, "gb300-launch")
        assert not any("slow" in s for s in info["substitutions"])
        with garbage_collector(kube):
            applied = kube.stackpin("apply", f"{GB300}@2", "--history", str(history), "--allow-recreate",
                                    "--timeout", "60")
        assert applied.exit_code == 0, applied.output
        info = serving(url, second)
        assert (info["stack_digest"], info["stack"]) == (second, "gb300-tuned")
        assert any("slow=2" in s for s in info["substitutions"]), info
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as answer:
            model = json.loads(answer.read())["data"][0]["id"]
        # A stream passes through as it is made: its first event arrives long before its last.
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "a b c"}], "stream": True,
                           "max_tokens": 400, "ignore_eos": True}).encode()
        request = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
        started, events = time.monotonic(), []
        with urllib.request.urlopen(request, timeout=60) as answer:
            for line in answer:
                if line.startswith(b"data: "):
                    events.append((time.monotonic() - started, line.decode().strip()))
        assert events[-1][1] == "data: [DONE]" and len(events) > 10, events
        assert events[0][0] < events[-1][0] / 2, (events[0][0], events[-1][0])
        # The gate benches the rack through it as it would a real rack's endpoint.
        [path] = measure(url, store.read(key, 2).lock, BenchGate(trace="t", runs=1, slo="none", lag_limit="50ms"),
                         trace, tmp_path / "gate", "after", lambda _: None)
        result = read_result(path)
        assert result.stack.digest == second and result.simulation is not None
        assert any("slow=2" in s for s in result.simulation.substitutions)
        assert result.points[0].request_log and not any(r.error for r in result.points[0].request_log)
        # A stack applied from a lockfile has no revision: the record's own copy of its lock is served.
        assert kube.apply("vera-rubin-tuned").exit_code == 0
        other = read_lock(ROOT / "lockfiles" / "vera-rubin-tuned.lock.yaml").stack_digest
        assert serving(url, other)["stack"] == "vera-rubin-tuned"
