"""`stackpin bench compare`, `bench attach`, the history's BENCH column and `rollback --if-regressed`.

Results here are built by the test from seeded samples through the same code that builds a measured
point (stackpin.bench.stats), so the compare logic is tested on known effects; one test measures two
real loopback servers end to end."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.bench.binding import controls
from stackpin.bench.result import (
    BenchResult,
    ClientInfo,
    Request,
    Slo,
    StackRef,
    controls_fingerprint,
    result_json,
)
from stackpin.bench.resultfile import read_result
from stackpin.bench.stats import build_point, score
from stackpin.cli.main import main
from stackpin.lock.lockfile import read_lock
from tests.sse_server import Server, serve_in_thread
from tests.test_bench_run import write_trace

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "lockfiles" / "gb300-launch.lock.yaml"
TUNED = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
SLO = Slo(tps=50, ttft_s=2.0)


def make_result(lock_path: Path, tps: float, ttft: float, seed: int, slo: Slo | None = SLO,
                trace_digest: str = "sha256:" + "a" * 64, agents: tuple[int, ...] = (1, 4, 5),
                gpus: int = 72, fail_from: int | None = 5, requests: int = 160) -> BenchResult:
    """Per-request speeds ~ N(tps, 5%) and TTFTs ~ N(ttft, 5%), `requests` an agent count, each agent's
    turns back to back; from `fail_from` agents on, TTFT is 5x (past SLO's 2 s for a TTFT of 0.5 s): the
    curve crosses the SLO between two adjacent counts, so its edge is measured, not a bound."""
    rng = random.Random(seed)
    lock = read_lock(lock_path)
    points = []
    for count in agents:
        log, clocks = [], [0.0] * count
        slow = 5.0 if fail_from is not None and count >= fail_from else 1.0
        for i in range(requests):
            agent = i % count
            speed = rng.gauss(tps, tps * 0.05)
            first = abs(rng.gauss(ttft, ttft * 0.05)) * slow
            start = clocks[agent]
            log.append(Request(agent=agent, session=f"s{i}", turn=0, start_s=start, ttft_s=first,
                               end_s=start + first + 100 / speed, prompt_tokens=1000, output_tokens=100,
                               itl_mean_s=1 / speed))
            clocks[agent] = start + first + 100 / speed
        log.sort(key=lambda r: (r.start_s, r.agent))
        points.append(build_point(count, max(clocks), log, gpus, slo))
    c = controls(lock, trace_digest, agents, slo)
    return BenchResult(
        stack=StackRef(digest=lock.stack_digest, name=lock.metadata.name, platform="gb300-nvl72", gpus=gpus),
        controls=c, fingerprint=controls_fingerprint(c), endpoint="http://127.0.0.1:1", started="2026-01-01T00:00:00Z",
        finished="2026-01-01T00:01:00Z", client=ClientInfo(workers=1, cpu_seconds=0.1, saturated=False),
        points=tuple(points), score=score(points, slo) if slo else None)


def save(tmp_path: Path, name: str, result: BenchResult) -> str:
    path = tmp_path / name
    path.write_text(result_json(result))
    return str(path)


def cli(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


def metrics(out: str) -> dict[str, dict[str, object]]:
    return {m["name"]: m for m in json.loads(out)["metrics"]}


def test_a_slower_stack_is_a_regression_and_exit_code_says_so(tmp_path: Path) -> None:
    a = save(tmp_path, "a.json", make_result(LAUNCH, tps=100, ttft=0.5, seed=1))
    b = save(tmp_path, "b.json", make_result(TUNED, tps=80, ttft=0.5, seed=2))
    code, out, err = cli(["bench", "compare", a, b, "-o", "json"])
    assert code == 0, err
    single = metrics(out)["single-agent tok/s"]
    assert single["verdict"] == "regression" and single["basis"] == "requests"
    assert -0.25 < single["change"] < -0.15 and single["low"] < single["change"] < single["high"] < 0
    assert metrics(out)["TTFT p90 at 5 agents"]["verdict"] == "no significant change"
    assert json.loads(out)["verdict"] == "regression"
    code, out, _ = cli(["bench", "compare", a, b, "--exit-code"])
    assert code == 1 and "verdict: regression (threshold 5%)" in out
    code, out, _ = cli(["bench", "compare", b, a, "--exit-code"])  # the other way round: an improvement
    assert code == 0 and "verdict: improvement" in out


def test_same_distribution_is_no_significant_change_and_output_is_deterministic(tmp_path: Path) -> None:
    a = save(tmp_path, "a.json", make_result(LAUNCH, tps=100, ttft=0.5, seed=1))
    b = save(tmp_path, "b.json", make_result(TUNED, tps=100, ttft=0.5, seed=2))
    first = cli(["bench", "compare", a, b, "-o", "json"])
    assert first == cli(["bench", "compare", a, b, "-o", "json"])
    assert all(m["verdict"] == "no significant change" for m in metrics(first[1]).values())


def test_ttft_is_lower_is_better_and_the_threshold_is_configurable(tmp_path: Path) -> None:
    a = save(tmp_path, "a.json", make_result(LAUNCH, tps=100, ttft=0.5, seed=1))
    b = save(tmp_path, "b.json", make_result(TUNED, tps=100, ttft=0.6, seed=2))
    code, out, _ = cli(["bench", "compare", a, b, "-o", "json"])
    assert metrics(out)["TTFT p90 at 5 agents"]["verdict"] == "regression"
    code, out, _ = cli(["bench", "compare", a, b, "-o", "json", "--threshold", "50%"])
    assert metrics(out)["TTFT p90 at 5 agents"]["verdict"] == "no significant change"


def test_repeated_runs_give_the_interval(tmp_path: Path) -> None:
    runs_a = [save(tmp_path, f"a{i}.json", make_result(LAUNCH, tps=100 + i, ttft=0.5, seed=i)) for i in range(3)]
    runs_b = [save(tmp_path, f"b{i}.json", make_result(TUNED, tps=70 + i, ttft=0.5, seed=10 + i)) for i in range(3)]
    args = ["bench", "compare", "-o", "json"] + [x for r in runs_a for x in ("--a", r)] + \
        [x for r in runs_b for x in ("--b", r)]
    code, out, err = cli(args)
    assert code == 0, err
    single = metrics(out)["single-agent tok/s"]
    assert single["basis"] == "runs" and single["verdict"] == "regression"
    assert json.loads(out)["runs"] == [3, 3]


@pytest.mark.parametrize(("change", "field"), [
    ({"trace_digest": "sha256:" + "b" * 64}, "trace_digest"),
    ({"slo": Slo(tps=80, ttft_s=2.0)}, "slo"),
])
def test_different_controls_are_refused_naming_the_field_unless_forced(tmp_path: Path, change: dict[str, object],
                                                                      field: str) -> None:
    a = save(tmp_path, "a.json", make_result(LAUNCH, tps=100, ttft=0.5, seed=1))
    b = save(tmp_path, "b.json", make_result(TUNED, tps=100, ttft=0.5, seed=2, **change))  # type: ignore[arg-type]
    code, out, err = cli(["bench", "compare", a, b])
    assert code == 2 and f"controls differ between A and B: {field}:" in err and not out
    code, out, err = cli(["bench", "compare", a, b, "--force"])
    assert code == 0 and f"although {field} differ" in err


def test_a_result_that_is_not_a_result_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "BenchResult"}')
    code, _, err = cli(["bench", "compare", str(bad), str(bad)])
    assert code == 2 and str(bad) in err and "Traceback" not in err


def test_measured_end_to_end_a_slower_server_regresses(tmp_path: Path) -> None:
    # 8 sessions of 3 turns: 24 requests at one agent, past compare's minimum of steady ones (MIN_REQUESTS)
    trace = write_trace(tmp_path / "t.jsonl", sessions=8, turns=3, output=30)
    out = {}
    with serve_in_thread(Server(itl_s=0.001)) as fast, serve_in_thread(Server(itl_s=0.004)) as slow:
        for name, server, lock in (("a", fast, LAUNCH), ("b", slow, TUNED)):
            code, _, err = cli(["bench", "run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(lock),
                                "--agents", "1,2", "--out", str(tmp_path / f"{name}.json")])
            assert code == 0, err
            out[name] = str(tmp_path / f"{name}.json")
    code, text, _ = cli(["bench", "compare", out["a"], out["b"], "--exit-code"])
    assert code == 1 and "single-agent tok/s" in text and "regression" in text


def history_args(tmp_path: Path) -> list[str]:
    return ["--history", str(tmp_path / "history")]


def promote_both(tmp_path: Path) -> None:
    for lock in (LAUNCH, TUNED):
        code, _, err = cli(["promote", str(lock), "-m", lock.name, *history_args(tmp_path),
                            "--deployments", str(tmp_path / "deployments")])
        assert code == 0, err


def test_attach_checks_the_stack_and_never_overwrites_silently(tmp_path: Path) -> None:
    promote_both(tmp_path)
    a = save(tmp_path, "a.json", make_result(LAUNCH, tps=100, ttft=0.5, seed=1))
    a2 = save(tmp_path, "a2.json", make_result(LAUNCH, tps=90, ttft=0.5, seed=3))
    code, _, err = cli(["bench", "attach", "dsv41-flash@2", a, *history_args(tmp_path)])
    assert code == 2 and "measured stack gb300-launch" in err and "revision 2" in err
    code, out, err = cli(["bench", "attach", "dsv41-flash@1", a, *history_args(tmp_path)])
    assert code == 0 and out.startswith("attached ")
    stored = next((tmp_path / "history").rglob("000001.bench.json"))
    assert stored.read_text() == Path(a).read_text()
    code, out, _ = cli(["bench", "attach", "dsv41-flash@1", a, *history_args(tmp_path)])
    assert code == 0 and out.startswith("already attached")
    code, _, err = cli(["bench", "attach", "dsv41-flash@1", a2, *history_args(tmp_path)])
    assert code == 2 and "--replace" in err and stored.read_text() == Path(a).read_text()
    code, out, _ = cli(["bench", "attach", "dsv41-flash@1", a2, "--replace", *history_args(tmp_path)])
    assert code == 0 and out.startswith("replaced") and stored.read_text() == Path(a2).read_text()
    # the history is still whole: attachments are not revisions
    code, out, err = cli(["history", "dsv41-flash", *history_args(tmp_path), "-o", "json"])
    assert code == 0, err
    revisions = json.loads(out)["revisions"]
    assert [r["revision"] for r in revisions] == [1, 2]
    assert revisions[0]["bench"]["singleAgentTps"] == pytest.approx(json.loads(Path(a2).read_text())["score"][
        "single_agent_tps"]) and revisions[1]["bench"] is None


def test_a_run_of_a_revision_names_it(tmp_path: Path) -> None:
    promote_both(tmp_path)
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=1)
    with serve_in_thread(Server()) as server:
        code, _, err = cli(["bench", "run", "--endpoint", server.url, "--trace", str(trace), "--lock", "dsv41-flash@1",
                            *history_args(tmp_path), "--agents", "1", "--out", str(tmp_path / "r.json")])
    assert code == 0, err
    stack = read_result(tmp_path / "r.json").stack
    assert (stack.deployment, stack.revision, stack.name) == ("dynamo/dsv41-flash@gb300-nvl72", 1, "gb300-launch")
    code, out, err = cli(["bench", "attach", "dsv41-flash@1", str(tmp_path / "r.json"), *history_args(tmp_path)])
    assert code == 0 and "1 agent" in out


def test_rollback_if_regressed(tmp_path: Path) -> None:
    promote_both(tmp_path)
    deployments = ["--deployments", str(tmp_path / "deployments")]
    code, _, err = cli(["rollback", "dsv41-flash", "--if-regressed", *history_args(tmp_path), *deployments])
    assert code == 0 and "no rollback: revision 1 and 2" in err and "has no bench result" in err
    a = save(tmp_path, "a.json", make_result(LAUNCH, tps=100, ttft=0.5, seed=1))
    same = save(tmp_path, "same.json", make_result(TUNED, tps=100, ttft=0.5, seed=2))
    slow = save(tmp_path, "slow.json", make_result(TUNED, tps=70, ttft=0.5, seed=2))
    assert cli(["bench", "attach", "dsv41-flash@1", a, *history_args(tmp_path)])[0] == 0
    assert cli(["bench", "attach", "dsv41-flash@2", same, *history_args(tmp_path)])[0] == 0
    code, out, err = cli(["rollback", "dsv41-flash", "--if-regressed", *history_args(tmp_path), *deployments])
    assert code == 0 and "no rollback: revision 2 does not regress against revision 1" in err
    assert "single-agent tok/s" in out and "recorded" not in out
    assert cli(["bench", "attach", "dsv41-flash@2", slow, "--replace", *history_args(tmp_path)])[0] == 0
    code, out, err = cli(["rollback", "dsv41-flash", "--if-regressed", *history_args(tmp_path), *deployments])
    assert code == 0, err
    assert "verdict: regression" in out and "revision 3 of dynamo/dsv41-flash@gb300-nvl72: rollback to 1" in out
    code, out, _ = cli(["history", "dsv41-flash", *history_args(tmp_path)])
    assert "BENCH" in out.splitlines()[1] and "Roll back to revision 1: revision 2 regressed against it" in out
    assert "1 agent 100 tok/s" in out


def test_stacks_served_on_different_gpu_counts_compare_agents_per_gpu(tmp_path: Path) -> None:
    # A share of a stack (sim serve --share) or another topology: the same agent count is another load
    # per GPU, so max agents compare per GPU and TTFT at one agent count is left out, with a note.
    a_result = make_result(LAUNCH, tps=100, ttft=0.5, seed=1)
    b_result = make_result(TUNED, tps=100, ttft=0.5, seed=2, gpus=4)
    a, b = save(tmp_path, "a.json", a_result), save(tmp_path, "b.json", b_result)
    code, out, err = cli(["bench", "compare", a, b, "-o", "json"])
    assert code == 0, err
    found = metrics(out)
    assert json.loads(out)["gpus"] == [72, 4]
    assert not any(name.startswith("TTFT") for name in found) and "max agents under SLO" not in found
    per_gpu = found["max agents per GPU under SLO"]
    assert per_gpu["a"] == a_result.score.max_agents / 72 and per_gpu["b"] == b_result.score.max_agents / 4
    assert per_gpu["verdict"] == "improvement"
    code, out, err = cli(["bench", "compare", a, b])
    assert code == 0 and "max agents per GPU under SLO" in out
    assert "A ran on 72 GPUs, B on 4: agent counts compare per GPU" in err


def late(result: BenchResult, seconds: float) -> BenchResult:
    """The result as a host that stamped every timestamp up to `seconds` late would have left it known."""
    points = tuple(p.model_copy(update={"loop_lag_p99_s": seconds}) for p in result.points)
    return result.model_copy(update={"points": points})


@pytest.mark.parametrize(("ttft_b", "lag", "verdict"), [
    (0.42, 0.0, "improvement"),             # on time: the -16% is measured
    (0.42, 0.08, "no significant change"),  # late: 1%..27% better whatever it hid (a gain unconfirmed)
    (0.42, 0.15, "inconclusive"),           # later still: the lateness could hide a regression past 5%
    (0.50, 0.08, "inconclusive"),           # no change measured, yet the lateness could hide one
    (0.60, 0.08, "inconclusive"),           # +20% measured, yet the lateness could hide none
])
def test_a_late_host_turns_only_what_it_could_hide(ttft_b: float, lag: float, verdict: str) -> None:
    from stackpin.bench.compare import compare

    a = [late(make_result(LAUNCH, tps=100, ttft=0.5, seed=s, agents=(1,), fail_from=None), lag) for s in (1, 2)]
    b = [late(make_result(TUNED, tps=130, ttft=ttft_b, seed=s, agents=(1,), fail_from=None), lag) for s in (3, 4)]
    ttft = {m.name: m for m in compare(a, b).metrics}["TTFT p90 at 1 agent"]
    assert ttft.verdict.value == verdict, ttft.why
    assert ("lateness" in ttft.why) == (lag > 0), ttft.why
