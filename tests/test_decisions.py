"""Issue 34: every decision from evidence, recomputed; no decision from a bound, an invalid point or no data.

The first tests are the issue's reproductions on results built by the tests through the code that builds a
measured point (stackpin.bench.stats.build_point; tests/test_bench_compare.py's make_result), so each
mechanism is held to its decision deterministically; the last measure real simulators beside a CPU burner on
each core and assert the decisions, never a timing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stackpin.bench.compare import EXIT_INCONCLUSIVE, MIN_REQUESTS, Verdict, compare
from stackpin.bench.result import BenchResult
from stackpin.bench.stats import build_point, measured, score
from tests.helpers import cpu_burners
from tests.test_bench_compare import LAUNCH, TUNED, cli, make_result, save

BUSY = 0.97  # a client's busiest process over bench run's --busy-limit (0.9): the point is invalid


def invalidate(result: BenchResult, agents: set[int]) -> BenchResult:
    """`result` with its points at `agents` measured by a saturated client, as bench run marks them."""
    slo = result.controls.slo
    points = tuple(build_point(p.agents, p.duration_s, p.request_log, result.stack.gpus, slo, busy=BUSY)
                   if p.agents in agents else p for p in result.points)
    return result.model_copy(update={"points": points, "score": score(points, slo) if slo and measured(points)
                                     else None})


def history(tmp_path: Path, a: str, b: str, lock: Path = TUNED) -> list[str]:
    """Revisions 1 and 2 of one deployment, both of `lock` (a revision promoted again), with `a` and `b`
    attached; the history options to pass."""
    args = ["--history", str(tmp_path / "history")]
    deployments = ["--deployments", str(tmp_path / "deployments")]
    assert cli(["promote", str(lock), "-m", "first", *args, *deployments])[0] == 0
    assert cli(["promote", str(lock), "-m", "again", "--allow-same", *args, *deployments])[0] == 0
    for revision, path in ((1, a), (2, b)):
        code, _, err = cli(["bench", "attach", f"dsv41-flash@{revision}", path, *args])
        assert code == 0, err
    return [*args, *deployments]


def revisions(tmp_path: Path) -> list[int]:
    code, out, err = cli(["history", "dsv41-flash", "--history", str(tmp_path / "history"), "-o", "json"])
    assert code == 0, err
    return [r["revision"] for r in json.loads(out)["revisions"]]


def test_an_invalid_point_on_one_side_is_left_out_and_never_a_rollback(tmp_path: Path) -> None:
    """The same stack benched twice, the second time with its 32-agent point invalid (a busy host): main
    reported -75% max agents, exit 1, and rollback --if-regressed recorded a rollback between two identical
    revisions. Now the point is left out: each side's score is what its valid points say (>= 32 and >= 8,
    two lower bounds), which decides nothing; TTFT is compared at 8 agents, valid on both."""
    same = {"tps": 100, "ttft": 0.5, "agents": (1, 8, 32), "fail_from": None}
    a = save(tmp_path, "a.json", make_result(TUNED, seed=1, **same))  # type: ignore[arg-type]
    busy = invalidate(make_result(TUNED, seed=2, **same), {32})  # type: ignore[arg-type]
    b = save(tmp_path, "b.json", busy)
    code, out, err = cli(["bench", "compare", a, b, "--exit-code", "-o", "json"])
    assert code == EXIT_INCONCLUSIVE, out + err
    data = json.loads(out)
    found = {m["name"]: m for m in data["metrics"]}
    assert data["verdict"] == "inconclusive" and not data["regressed"]
    agents = found["max agents under SLO"]
    assert (agents["estimateA"]["atLeast"], agents["estimateA"]["atMost"]) == (32, None)
    assert (agents["estimateB"]["atLeast"], agents["estimateB"]["atMost"]) == (8, None)
    assert agents["change"] is None and agents["low"] is None and agents["verdict"] == "inconclusive"
    assert "both are lower bounds" in agents["why"]
    assert "TTFT p90 at 8 agents" in found and "TTFT p90 at 32 agents" not in found
    assert data["leftOut"] == [f"B, 32 agents: {busy.points[2].invalid}"]
    code, text, _ = cli(["bench", "compare", a, b])
    assert code == 0 and ">= 32" in text and ">= 8" in text and "-75" not in text, text
    assert "left out (invalid): B, 32 agents: client saturated" in text
    options = history(tmp_path, a, b)
    code, out, err = cli(["rollback", "dsv41-flash", "--if-regressed", *options])
    assert code == EXIT_INCONCLUSIVE, out + err
    assert "no rollback: revision 2 against revision 1 is inconclusive: max agents under SLO: both are lower" in err
    assert revisions(tmp_path) == [1, 2]


def test_all_invalid_on_one_side_is_inconclusive_never_a_pass(tmp_path: Path) -> None:
    """Every point of B invalid: main printed an empty table, "no significant change", exit 0."""
    a = save(tmp_path, "a.json", make_result(TUNED, tps=100, ttft=0.5, seed=1))
    b = save(tmp_path, "b.json", invalidate(make_result(TUNED, tps=100, ttft=0.5, seed=2), {1, 4, 5}))
    code, out, err = cli(["bench", "compare", a, b, "--exit-code"])
    assert code == EXIT_INCONCLUSIVE, out + err
    assert "verdict: inconclusive" in out and "no significant change" not in out.splitlines()[-1]
    assert "B has no valid point at 1 agent(s) (client saturated" in out
    code, out, err = cli(["bench", "compare", a, b, "-o", "json"])
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "inconclusive"  # without --exit-code it reports, as before
    assert all(m["verdict"] == "inconclusive" for m in data["metrics"]) and data["missing"]
    options = history(tmp_path, a, b)
    code, out, err = cli(["rollback", "dsv41-flash", "--if-regressed", *options])
    assert code == EXIT_INCONCLUSIVE and "is inconclusive" in err and "does not regress" not in err
    assert revisions(tmp_path) == [1, 2]


def test_two_lower_bounds_are_inconclusive_with_no_percentage(tmp_path: Path) -> None:
    """Neither curve crossed the SLO, on stacks of different GPU counts (agents compare per GPU): main printed
    `max agents per GPU under SLO 5.3 -> 24.0 +350.0%` and an improvement; bounds decide nothing here."""
    a = save(tmp_path, "a.json", make_result(LAUNCH, tps=100, ttft=0.5, seed=1, agents=(1, 96, 384), gpus=72,
                                             fail_from=None))
    b = save(tmp_path, "b.json", make_result(TUNED, tps=100, ttft=0.5, seed=2, agents=(1, 96), gpus=4,
                                             fail_from=None))
    code, out, err = cli(["bench", "compare", a, b, "--exit-code", "-o", "json"])
    assert code == EXIT_INCONCLUSIVE, out + err
    per_gpu = {m["name"]: m for m in json.loads(out)["metrics"]}["max agents per GPU under SLO"]
    assert per_gpu["estimateA"] == {"value": None, "atLeast": pytest.approx(384 / 72), "atMost": None,
                                    "measured": False}
    assert per_gpu["estimateB"]["atLeast"] == 24 and per_gpu["estimateB"]["atMost"] is None
    assert (per_gpu["change"], per_gpu["low"], per_gpu["high"], per_gpu["verdict"]) == (None, None, None,
                                                                                      "inconclusive")
    code, text, _ = cli(["bench", "compare", a, b])
    row = next(line for line in text.splitlines() if line.startswith("max agents per GPU under SLO"))
    assert ">= 5.3" in row and ">= 24.0" in row and "%" not in row and "inconclusive" in row, text


def test_a_measured_value_below_the_other_sides_lower_bound_is_a_regression(tmp_path: Path) -> None:
    """A held the SLO at every count it measured (>= 32 agents); B crossed between 8 and 9 (8, measured): B
    is at least 75% worse whatever A's true edge is. The verdict stands on the bounds, with no percentage."""
    a = save(tmp_path, "a.json", make_result(TUNED, tps=100, ttft=0.5, seed=1, agents=(1, 8, 9, 32),
                                             fail_from=None))
    b = save(tmp_path, "b.json", make_result(TUNED, tps=100, ttft=0.5, seed=2, agents=(1, 8, 9, 32), fail_from=9))
    code, out, err = cli(["bench", "compare", a, b, "--exit-code", "-o", "json"])
    assert code == 1, out + err
    agents = {m["name"]: m for m in json.loads(out)["metrics"]}["max agents under SLO"]
    assert agents["estimateB"]["value"] == 8 and agents["estimateA"]["atMost"] is None
    assert agents["verdict"] == "regression" and agents["basis"] == "bounds" and agents["change"] is None
    assert "at least 75% worse" in agents["why"]


def test_an_edge_past_a_gap_is_a_bracket(tmp_path: Path) -> None:
    """The curve held at 8, its 16-agent point was invalid and it failed at 32: the edge lies in 8..31, a
    bracket, not 8 (main's score). Against a stack whose edge is measured at 20 that is inconclusive."""
    a = save(tmp_path, "a.json", invalidate(make_result(TUNED, tps=100, ttft=0.5, seed=1, agents=(1, 8, 16, 32),
                                                        fail_from=32), {16}))
    b = save(tmp_path, "b.json", make_result(TUNED, tps=100, ttft=0.5, seed=2, agents=(1, 8, 20, 21, 32),
                                             fail_from=21))
    code, out, err = cli(["bench", "compare", a, b, "--exit-code", "-o", "json"])
    assert code == EXIT_INCONCLUSIVE, out + err
    agents = {m["name"]: m for m in json.loads(out)["metrics"]}["max agents under SLO"]
    assert (agents["estimateA"]["atLeast"], agents["estimateA"]["atMost"]) == (8, 31)
    assert agents["estimateB"]["value"] == 20 and agents["verdict"] == "inconclusive"
    assert "overlap past the threshold" in agents["why"]


def test_too_few_requests_decide_nothing() -> None:
    few = MIN_REQUESTS // 2  # requests an agent count: fewer than MIN_REQUESTS in any steady window
    a = make_result(TUNED, tps=100, ttft=0.5, seed=1, requests=few)
    b = make_result(TUNED, tps=50, ttft=0.5, seed=2, requests=few)
    comparison = compare([a], [b])
    assert comparison.verdict is Verdict.inconclusive
    assert all("too few valid requests in the steady window" in m.why for m in comparison.metrics)
    enough = compare([make_result(TUNED, tps=100, ttft=0.5, seed=1)], [make_result(TUNED, tps=50, ttft=0.5, seed=2)])
    assert enough.verdict is Verdict.regression


def without_logs(result: BenchResult) -> BenchResult:
    """A legal shape: figures kept, request logs removed (an older or trimmed file)."""
    return result.model_copy(update={"points": tuple(p.model_copy(update={"request_log": ()})
                                                     for p in result.points)})


def test_a_result_without_request_logs_decides_nothing(tmp_path: Path) -> None:
    """main attached a forged -97.7% result with its logs removed (the check that recomputes every figure
    skips points without one) and rollback --if-regressed recorded a rollback on it."""
    from stackpin.rollout.benchgate import judge

    good = make_result(TUNED, tps=100, ttft=0.5, seed=1)
    forged = without_logs(make_result(TUNED, tps=2.3, ttft=0.5, seed=2))
    a, b = save(tmp_path, "a.json", good), save(tmp_path, "forged.json", forged)
    code, out, err = cli(["bench", "compare", a, b, "--exit-code"])
    assert (code, out) == (2, "") and "forged.json: point(s) at 1, 4, 5 agent(s) have no request log" in err
    options = history(tmp_path, a, a)
    code, _, err = cli(["bench", "attach", "dsv41-flash@2", b, "--replace", "--history", str(tmp_path / "history")])
    assert code == 2 and "no request log" in err
    # placed beside the revision by hand, it is refused where the decision is made
    attached = next((tmp_path / "history").rglob("000002.bench.json"))
    attached.write_text(Path(b).read_text())
    code, out, err = cli(["rollback", "dsv41-flash", "--if-regressed", *options])
    assert code == 2 and "000002.bench.json: point(s) at 1, 4, 5 agent(s) have no request log" in err
    assert revisions(tmp_path) == [1, 2]
    with pytest.raises(Exception, match="no request log"):
        judge([Path(a)], [Path(b)], 0.05)


# --- measured, beside a CPU burner on each core --------------------------------------------------------------

def _bench(url: str, out: Path, trace: Path, *extra: str) -> BenchResult:
    from stackpin.bench.resultfile import read_result

    code, text, err = cli(["bench", "run", "--endpoint", url, "--trace", str(trace), "--lock", str(TUNED),
                           "--delay-scale", "0", "--lag-limit", "50ms", "--out", str(out), *extra])
    assert code == 0, text + err
    return read_result(out)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight short sessions of two or three turns: about twenty requests an agent count."""
    import subprocess
    import sys

    from tests.helpers import ROOT

    path = tmp_path_factory.mktemp("trace") / "agents.jsonl"
    params = ["first_input.median=800", "turn_input.median=200", "output.median=30", "output.min=20",
              "output.max=60", "turns.median=2", "turns.max=3"]
    subprocess.run([sys.executable, "-m", "stackpin", "trace", "gen", "--sessions", "8", "--seed", "1",
                    *[x for p in params for x in ("--param", p)], "--out", str(path)], cwd=ROOT, check=True,
                   capture_output=True)
    return path


def test_the_same_stack_benched_quiet_then_beside_a_burner_is_never_a_regression(tmp_path: Path,
                                                                                  trace: Path) -> None:
    """The issue's first reproduction, measured: one simulator of gb300-tuned, benched as the host runs, then
    again beside a CPU burner on each core. Whatever the burner does to the second run (invalid points,
    stretched timestamps), the comparison is no change or inconclusive, never a regression, and rollback
    --if-regressed records nothing."""
    from stackpin.sim.server import serve_in_thread

    with serve_in_thread(TUNED, speed=1.0, share=18) as sim:
        _bench(sim.url, tmp_path / "a.json", trace, "--agents", "1,8")
        with cpu_burners():
            _bench(sim.url, tmp_path / "b.json", trace, "--agents", "1,8")
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    code, out, err = cli(["bench", "compare", a, b, "--exit-code", "--threshold", "20%"])
    assert code in (0, EXIT_INCONCLUSIVE), out + err
    code, out, err = cli(["rollback", "dsv41-flash", "--if-regressed", "--threshold", "20%",
                          *history(tmp_path, a, b)])
    assert code in (0, EXIT_INCONCLUSIVE) and "no rollback" in err, out + err
    assert revisions(tmp_path) == [1, 2]


def test_a_real_twofold_slowdown_is_a_regression_beside_a_burner(tmp_path: Path, trace: Path) -> None:
    """Both sides beside the burner, B's simulator twice as slow (sim serve --fault slow=2): a regression
    wherever both single-agent points were valid; where the host left one invalid, the comparison says
    inconclusive and the bench is taken again at half the simulator's speed (as the demo does), never a
    pass. The test needs one valid comparison in three tries."""
    from stackpin.sim.faults import FaultSpec
    from stackpin.sim.server import serve_in_thread

    verdicts = []
    with cpu_burners():
        for attempt, speed in enumerate((1.0, 0.5, 0.25)):
            with serve_in_thread(TUNED, speed=speed, share=18) as fast, \
                    serve_in_thread(TUNED, speed=speed, share=18, faults=FaultSpec(slow=2.0)) as slow:
                a = _bench(fast.url, tmp_path / f"a{attempt}.json", trace, "--agents", "1", "--slo", "none")
                b = _bench(slow.url, tmp_path / f"b{attempt}.json", trace, "--agents", "1", "--slo", "none")
            verdict = compare([a], [b], threshold=0.2).verdict
            verdicts.append(verdict)
            assert verdict in (Verdict.regression, Verdict.inconclusive), verdicts
            if verdict is Verdict.regression:
                break
    assert verdicts[-1] is Verdict.regression, f"no valid comparison in three tries: {verdicts}"
