"""Measured draft acceptance (issue 39, part 4): the simulator's /metrics counts what it streamed, bench run
records each point's acceptance from the endpoint's counters (or why there is none), and compare refuses two
sides that drafted differently unless told. Everything on loopback."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from stackpin.bench.acceptance import Acceptance, AcceptanceDiffers, acceptance_of, check_acceptance
from stackpin.bench.compare import compare
from stackpin.bench.result import BenchResult, result_json
from stackpin.bench.resultfile import read_result
from stackpin.bench.specmetrics import difference, parse
from stackpin.cli.main import main
from stackpin.sim.engine import reach_probabilities
from stackpin.sim.server import serve_in_thread
from stackpin.sim.stack import SimStack, load_stack
from tests.sse_server import Server
from tests.sse_server import serve_in_thread as serve_plain
from tests.test_bench_compare import TUNED, make_result
from tests.test_bench_run import write_trace


def _one_engine(stack: SimStack, **changes: object) -> SimStack:
    pool = replace(stack.decode, engines=1, **changes)  # type: ignore[arg-type]
    return replace(stack, pools=(pool,))


def _stream(url: str, words: str, max_tokens: int) -> list[int]:
    """Tokens of each content event of one streamed answer (the simulator's words are `t `)."""
    body = {"messages": [{"role": "user", "content": words}], "max_tokens": max_tokens, "stream": True}
    with httpx.Client(timeout=60) as client:
        text = client.post(url + "/v1/chat/completions", json=body).text
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    return [ev["choices"][0]["delta"]["content"].count("t ") for ev in events if ev["choices"]]


def test_the_simulators_counters_are_what_it_streamed() -> None:
    stack = _one_engine(load_stack(TUNED), adaptive=False)
    k = stack.decode.spec_k
    with serve_in_thread(stack, speed=400) as sim:
        before = parse(httpx.get(sim.url + "/metrics", timeout=10).text)
        assert before.engine == "vllm" and before.totals["drafts"] == 0
        events = _stream(sim.url, "a b c", 3000)
        page = httpx.get(sim.url + "/metrics", timeout=10)
        assert sim.server.sim is not None
        alpha = sim.server.sim.decoders[0].alpha
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="deepseek-ai/' in page.text
    measured = difference(before, parse(page.text), "dspark")
    assert measured is not None
    # The first event is the prefill's token; every later one is one decode step that verified k drafts.
    assert sum(events) == 3000 and events[0] == 1
    decode = events[1:]
    assert measured.drafts == len(decode) and measured.draft_tokens == k * len(decode)
    # Each step gives 1 + its accepted drafts; the last step's are counted before max_tokens cuts them.
    streamed_accepted = sum(decode) - len(decode)
    assert streamed_accepted <= measured.accepted <= streamed_accepted + k
    assert measured.accepted == sum(measured.accepted_per_position)
    assert list(measured.accepted_per_position) == sorted(measured.accepted_per_position, reverse=True)
    assert measured.reached_per_position[0] == measured.drafts  # k fixed: every draft reaches every position
    reached = (measured.drafts, *measured.accepted_per_position[:-1])
    assert measured.rates == pytest.approx(tuple(n / d for n, d in zip(measured.accepted_per_position, reached,
                                                                        strict=True)))
    # The draws follow the step model's probabilities (a low-discrepancy sequence: within a percent or two).
    reach = reach_probabilities(alpha, k)
    model_rates = [reach[0], *(b / a for a, b in zip(reach, reach[1:], strict=False))]
    assert measured.rates == pytest.approx(model_rates, abs=0.03)


def test_adaptive_k_counts_the_drafts_that_reached_each_position() -> None:
    stack = _one_engine(load_stack(TUNED), adaptive=True)
    with serve_in_thread(stack, speed=400) as sim:
        before = parse(httpx.get(sim.url + "/metrics", timeout=10).text)
        _stream(sim.url, "a b c", 1500)
        after = parse(httpx.get(sim.url + "/metrics", timeout=10).text)
        alpha = sim.server.sim.decoders[0].alpha if sim.server.sim else 0.0
    measured = difference(before, after, None)
    assert measured is not None and measured.drafts > 0
    assert measured.draft_tokens is not None and measured.draft_tokens <= stack.decode.spec_k * measured.drafts
    reach = reach_probabilities(alpha, stack.decode.spec_k)
    model_rates = [reach[0], *(b / a for a, b in zip(reach, reach[1:], strict=False))]
    assert measured.rates == pytest.approx(model_rates[: len(measured.rates)], abs=0.05)


def test_a_stack_without_drafts_serves_no_spec_counters() -> None:
    stack = _one_engine(load_stack(TUNED), spec_method=None, spec_k=0, adaptive=False)
    with serve_in_thread(stack, speed=400) as sim:
        _stream(sim.url, "a b", 20)
        reading = parse(httpx.get(sim.url + "/metrics", timeout=10).text)
    assert reading.engine == "" and not reading.totals


def test_vllm_and_sglang_pages_parse_as_their_counters() -> None:
    # Lines as prometheus_client 0.26.0 (vLLM 0.31.0's and SGLang 0.5.21's) writes them; two engines summed.
    vllm = "\n".join([
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30.0',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 70.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a \\"q\\" }",position="0"} 35.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 1.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 24.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 10.0'])
    reading = parse(vllm)
    zero = parse("")
    got = difference(zero, reading, "mtp")
    assert got == Acceptance(method="mtp", drafts=40, draft_tokens=120, accepted_per_position=(36, 24, 10),
                             accepted_tokens=70)
    assert got.rates == pytest.approx((0.9, 24 / 36, 10 / 24)) and got.mean_length == pytest.approx(1 + 70 / 40)
    sglang = "\n".join([
        'sglang:spec_verify_calls_total{model_name="m",tp_rank="0"} 100.0',
        'sglang:generation_tokens_total{is_streaming="true",model_name="m"} 290.0',
        'sglang:num_requests_total{is_streaming="true",model_name="m"} 10.0',
        'sglang:spec_num_draft_tokens{model_name="m"} 4.0'])
    got = difference(zero, parse(sglang), "eagle")
    assert got is not None and got.drafts == 100 and got.draft_tokens == 300 and got.accepted_per_position == ()
    assert got.mean_length == pytest.approx(1 + (290 - 10 - 100) / 100) and got.rates == ()
    # A counter that went backwards (a restarted server) says nothing about the span.
    assert difference(reading, parse(vllm.replace(" 30.0", " 3.0")), None) is None


def test_bench_run_records_each_points_acceptance_from_the_simulator(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=4, turns=2, output=200)
    with serve_in_thread(TUNED, speed=20) as sim:
        result = CliRunner().invoke(main, ["bench", "run", "--endpoint", sim.url, "--trace", str(trace), "--lock",
                                           str(TUNED), "--agents", "1,2", "--slo", "none", "--delay-scale", "0",
                                           "--out", str(tmp_path / "r.json")])
        assert result.exit_code == 0, result.stderr
        alpha = sim.server.sim.decoders[0].alpha if sim.server.sim else 0.0
    run = read_result(tmp_path / "r.json")
    assert run.acceptance_from == f"vllm's spec-decode counters at {sim.url}/metrics"
    for point in run.points:
        assert point.acceptance is not None and point.acceptance.method == "dspark"
        assert point.acceptance.drafting == "dspark, draft sampling probabilistic, rejection sampling block"
        # 200 tokens a request: the prefill's first, then a draft a decode step.
        tokens = sum(r.output_tokens for r in point.request_log)
        assert point.acceptance.drafts + point.acceptance.accepted >= tokens - point.requests
    total = acceptance_of(run)
    assert total is not None and total.drafts == sum(p.acceptance.drafts for p in run.points if p.acceptance)
    stack = load_stack(TUNED)
    assert total.rates[0] == pytest.approx(reach_probabilities(alpha, stack.decode.spec_k)[0], abs=0.05)


def test_an_endpoint_without_metrics_is_recorded_as_not_exposing_them(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=1)
    with serve_plain(Server()) as server:
        result = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace),
                                           "--lock", str(TUNED), "--agents", "1", "--slo", "none",
                                           "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.stderr
    run = read_result(tmp_path / "r.json")
    assert run.acceptance_from == f"not exposed: GET {server.url}/metrics answered 404"
    assert all(p.acceptance is None for p in run.points) and acceptance_of(run) is None


def test_bench_run_refuses_a_metrics_url_that_is_not_http(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=1)
    result = CliRunner().invoke(main, ["bench", "run", "--endpoint", "http://127.0.0.1:9", "--trace", str(trace),
                                       "--lock", str(TUNED), "--metrics", "file:///etc/passwd",
                                       "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 2 and "--metrics 'file:///etc/passwd': give an http://" in result.stderr
    assert not (tmp_path / "r.json").exists()


def _with_acceptance(result: BenchResult, accepted: tuple[int, ...], drafts: int = 1000) -> BenchResult:
    acceptance = Acceptance(method="dspark", drafts=drafts, draft_tokens=drafts * len(accepted),
                            accepted_per_position=accepted)
    return result.model_copy(update={"points": tuple(p.model_copy(update={"acceptance": acceptance})
                                                     for p in result.points),
                                     "acceptance_from": "vllm's spec-decode counters at http://x/metrics"})


def _write(result: BenchResult, path: Path) -> str:
    path.write_text(result_json(result))
    return str(path)


def test_compare_refuses_sides_that_drafted_differently_unless_told(tmp_path: Path) -> None:
    a = _with_acceptance(make_result(TUNED, 100, 0.5, seed=1), (900, 700, 500))  # mean length 3.1
    b = _with_acceptance(make_result(TUNED, 100, 0.5, seed=2), (800, 500, 250))  # 2.55: 17.7% below
    files = [_write(a, tmp_path / "a.json"), _write(b, tmp_path / "b.json")]
    refused = CliRunner().invoke(main, ["bench", "compare", *files])
    assert refused.exit_code == 2
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: mean acceptance length differs: A 3.10, B 2.55 over the 3 draft positions both "
                           "drafted (A 3.10 (dspark; per position 0.90 0.78 0.71); B 2.55 ")
    assert "17.7% apart, past 10%" in line and "--allow-acceptance-change" in line
    allowed = CliRunner().invoke(main, ["bench", "compare", *files, "--allow-acceptance-change", "-o", "json"])
    assert allowed.exit_code == 0, allowed.stderr
    data = json.loads(allowed.stdout)["acceptance"]
    assert data["meanLengthA"] == pytest.approx(3.1) and data["meanLengthB"] == pytest.approx(2.55)
    assert "compared anyway (--allow-acceptance-change)" in data["notes"][0]
    wider = CliRunner().invoke(main, ["bench", "compare", *files, "--acceptance-threshold", "20%"])
    assert wider.exit_code == 0 and "verdict:" in wider.stdout
    # Every decision goes through compare(): the library refuses the same way (rollback, trial, the gate).
    with pytest.raises(AcceptanceDiffers):
        compare([a], [b])


def test_a_stack_drafting_more_positions_is_the_same_workload() -> None:
    # B drafts 5 tokens a step where A drafts 3 (a retuned num_speculative_tokens): its raw mean length is 14.5%
    # longer (past 10%), but on the 3 positions both drafted its drafts are accepted as A's are: the same workload.
    a = _with_acceptance(make_result(TUNED, 100, 0.5, seed=1), (900, 700, 500))
    b = _with_acceptance(make_result(TUNED, 100, 0.5, seed=2), (900, 700, 500, 300, 150))
    check = check_acceptance([a], [b])
    assert check.a is not None and check.b is not None and check.notes == ()
    assert check.b.mean_length / check.a.mean_length - 1 == pytest.approx(0.145, abs=0.001)
    worse = _with_acceptance(make_result(TUNED, 100, 0.5, seed=2), (900, 500, 300, 200, 100))
    with pytest.raises(AcceptanceDiffers, match="over the 3 draft positions both drafted"):
        check_acceptance([a], [worse])


def test_stacks_drafting_differently_are_stated_not_refused() -> None:
    # A retune of the drafting (block rejection sampling where A had standard) changes acceptance: that is the
    # stack's doing, not another workload's.
    a = _with_acceptance(make_result(TUNED, 100, 0.5, seed=1), (900, 700, 500))
    b = _with_acceptance(make_result(TUNED, 100, 0.5, seed=2), (800, 500, 250))
    a = a.model_copy(update={"points": tuple(p.model_copy(update={"acceptance": p.acceptance.model_copy(
        update={"drafting": "dspark, draft sampling greedy, rejection sampling standard"})}) for p in a.points)})
    b = b.model_copy(update={"points": tuple(p.model_copy(update={"acceptance": p.acceptance.model_copy(
        update={"drafting": "dspark, draft sampling greedy, rejection sampling block"})}) for p in b.points)})
    check = check_acceptance([a], [b])
    assert check.notes == ("the sides draft differently (A dspark, draft sampling greedy, rejection sampling "
                           "standard; B dspark, draft sampling greedy, rejection sampling block): their acceptance "
                           "(A 3.10 (dspark; per position 0.90 0.78 0.71); B 2.55 (dspark; per position "
                           "0.80 0.62 0.50)) is the stacks', so it is not held to one workload's",)
    assert compare([a], [b]).acceptance.notes == check.notes


def test_acceptance_on_one_side_only_is_stated_not_refused(tmp_path: Path) -> None:
    a = _with_acceptance(make_result(TUNED, 100, 0.5, seed=1), (900, 700, 500))
    b = make_result(TUNED, 100, 0.5, seed=2)
    result = CliRunner().invoke(main, ["bench", "compare", _write(a, tmp_path / "a.json"),
                                       _write(b, tmp_path / "b.json")])
    assert result.exit_code == 0, result.stderr
    assert "note: draft acceptance measured on A only (mean length 3.10" in result.stderr
    close = _with_acceptance(make_result(TUNED, 100, 0.5, seed=2), (890, 690, 480))
    check = check_acceptance([a], [close])
    assert check.notes == () and check.b is not None and check.b.mean_length == pytest.approx(3.06)


def test_a_result_written_before_acceptance_was_recorded_still_loads(tmp_path: Path) -> None:
    data = json.loads(result_json(make_result(TUNED, 100, 0.5, seed=1)))
    assert data.pop("acceptance_from") is None
    for point in data["points"]:
        assert point.pop("acceptance") is None
    (tmp_path / "old.json").write_text(json.dumps(data, sort_keys=True, indent=2) + "\n")
    old = read_result(tmp_path / "old.json")
    assert old.acceptance_from is None and acceptance_of(old) is None
    assert old.points == make_result(TUNED, 100, 0.5, seed=1).points


def test_behind_the_dynamo_beds_frontend_no_acceptance_is_counted(tmp_path: Path) -> None:
    # The bed's handshake (GET /stackpin/sim names Dynamo and its frontend); the frontend has no spec counters.
    from stackpin.lock.lockfile import read_lock

    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=1)
    server = Server()
    with serve_plain(server) as running:
        running.sim_info = {"simulated": True, "model": "roofline", "substitutions": [], "speed": 1,
                            "stack_digest": read_lock(TUNED).stack_digest, "backend": "dynamo 1.6.1",
                            "serving": running.url}
        result = CliRunner().invoke(main, ["bench", "run", "--endpoint", running.url, "--trace", str(trace),
                                           "--lock", str(TUNED), "--agents", "1", "--slo", "none",
                                           "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.stderr
    run = read_result(tmp_path / "r.json")
    assert run.simulation is not None and run.simulation.backend == "dynamo 1.6.1"
    assert run.acceptance_from == ("not exposed: dynamo 1.6.1's mocker counts no draft acceptance (the bed charges "
                                   "decode steps per accepted token); not exposed: GET "
                                   f"{running.url}/metrics answered 404")


def test_rollback_and_the_rollout_gate_take_the_acceptance_override(tmp_path: Path) -> None:
    """What refuses two results whose acceptance differs names how to compare them anyway, and every command that
    judges results takes it: rollback --if-regressed (--allow-acceptance-change), the fleet's bench gate
    (gates.bench.allowAcceptanceChange), upgrade trial (recorded in trial.json) and upgrade promote, which
    recomputes the trial's verdict and takes the override on its own command line, never from trial.json."""
    from stackpin.rollout.benchgate import judge
    from stackpin.rollout.fleet import BenchGate
    from stackpin.upgrade.model import Trial
    from tests.test_bench_compare import LAUNCH, history_args, promote_both

    promote_both(tmp_path)
    a = _write(_with_acceptance(make_result(LAUNCH, 100, 0.5, seed=1), (900, 700, 500)), tmp_path / "a.json")
    b = _write(_with_acceptance(make_result(TUNED, 70, 0.5, seed=2), (800, 500, 250)), tmp_path / "b.json")
    for revision, path in ((1, a), (2, b)):
        attached = CliRunner().invoke(main, ["bench", "attach", f"dsv41-flash@{revision}", path,
                                             *history_args(tmp_path)])
        assert attached.exit_code == 0, attached.stderr
    args = ["rollback", "dsv41-flash", "--if-regressed", *history_args(tmp_path),
            "--deployments", str(tmp_path / "deployments")]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2, refused.output
    [line] = refused.stderr.strip().splitlines()
    assert "mean acceptance length differs" in line and "allowAcceptanceChange: true" in line
    allowed = CliRunner().invoke(main, [*args, "--allow-acceptance-change"])
    assert allowed.exit_code == 0, allowed.stderr
    assert "verdict: regression" in allowed.stdout and "rollback to 1" in allowed.stdout
    alone = CliRunner().invoke(main, ["rollback", "dsv41-flash", "--allow-acceptance-change", *history_args(tmp_path)])
    assert alone.exit_code == 2 and "only with --if-regressed" in alone.output
    with pytest.raises(AcceptanceDiffers):
        judge([Path(a)], [Path(b)], 0.05)
    assert judge([Path(a)], [Path(b)], 0.05, allow_acceptance_change=True).verdict == "fail"
    assert BenchGate.model_validate({"trace": "t.jsonl", "allowAcceptanceChange": True}).allow_acceptance_change
    assert "allow_acceptance_change" in Trial.model_fields and not Trial.model_fields["allow_acceptance_change"].default
    for command in (["upgrade", "trial"], ["upgrade", "promote"]):
        assert "--allow-acceptance-change" in CliRunner().invoke(main, [*command, "--help"]).stdout
