"""A point the client could not keep up with is not a measurement (issue 20, section 3): marked invalid
with the reason, printed without numbers, left out of the score, the SLO search, compare and plan, and
recomputed on read like every other figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.bench.resultfile import read_result
from stackpin.bench.stats import build_point, invalid_reason, next_search, score
from stackpin.cli.main import main
from tests import benchdata
from tests.sse_server import Server, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"


def test_the_reasons_name_what_could_not_keep_up() -> None:
    assert invalid_reason(0.5, 0.002) is None
    assert invalid_reason(0.95, 0.0, busy_limit=2.0) is None
    assert "client saturated: its busiest process used 95% of a CPU" in (invalid_reason(0.95, 0.0) or "")
    assert "event-loop lag p99 12.0 ms" in (invalid_reason(0.2, 0.012) or "")
    assert invalid_reason(0.2, 0.012, lag_limit_s=0.05) is None
    # stackpin's simulator running behind its clock makes every timestamp late too: the same limit.
    assert "simulator behind its clock: 20.0 ms per step" in (invalid_reason(0.2, 0.001, server_late_s=0.02) or "")
    assert invalid_reason(0.2, 0.001, server_late_s=0.002) is None


def test_the_search_stops_within_its_resolution() -> None:
    points = benchdata.launch().points  # 128 held the SLO, 512 did not
    assert next_search(points, benchdata.SLO) == 320
    assert next_search(points, benchdata.SLO, resolution=2.99) == 320
    assert next_search(points, benchdata.SLO, resolution=3.0) is None  # 512 - 128 is 3 x 128


def test_an_invalid_point_is_measured_again(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"session_id": "s", "input_length": 30, "output_length": 5}) + "\n")
    attempts = {}
    with serve_in_thread(Server()) as server:
        for retries in (0, 2):
            out = tmp_path / f"r{retries}.json"
            # A lag limit no event loop holds: every measurement is invalid, so each retry is spent.
            run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace),
                                            "--lock", str(LOCK), "--agents", "1", "--slo", "none", "--lag-limit",
                                            "0", "--retries", str(retries), "--out", str(out)])
            assert run.exit_code == 0, run.output
            assert run.output.count("1 agent(s) not measured (client timestamps late") == retries
            attempts[retries] = read_result(out).points[0].attempts
    assert attempts == {0: 1, 2: 3}


def test_an_invalid_point_is_no_evidence_for_the_score_or_the_search() -> None:
    good = benchdata.launch()
    best = score(good.points, benchdata.SLO).max_agents  # 128 of 1, 8, 32, 128, 512, 2048 held the SLO
    below = max(p.agents for p in good.points if p.agents < best)
    above = min(p.agents for p in good.points if p.agents > best)
    assert next_search(good.points, benchdata.SLO) == (best + above) // 2
    # The same point measured by a client that could not keep up says nothing either way.
    points = [build_point(p.agents, p.duration_s, p.request_log, good.stack.gpus, benchdata.SLO, busy=0.97)
              if p.agents == best else p for p in good.points]
    assert next(p for p in points if p.agents == best).slo_met is None
    assert score(points, benchdata.SLO).max_agents == below
    assert next_search(points, benchdata.SLO) == (below + above) // 2


def test_bench_run_prints_no_number_for_an_invalid_point_and_compare_leaves_it_out(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"session_id": f"s{i}", "input_length": 30, "output_length": 20}) + "\n"
                             for i in range(4)))
    out = tmp_path / "r.json"
    with serve_in_thread(Server(itl_s=0.002)) as server:
        # A limit no event loop holds: every point is invalid, as on a host far too busy.
        run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace), "--lock",
                                        str(LOCK), "--agents", "2", "--slo", "none", "--lag-limit", "0",
                                        "--out", str(out)])
    assert run.exit_code == 0, run.output
    row = next(line for line in run.stdout.splitlines() if line.startswith("2 "))
    assert "invalid" in row and "ms" not in row and "s " not in row.split("invalid")[1]
    assert "warning: 2 agents: invalid, client timestamps late" in run.output
    assert "fewer agents, a lower simulator --speed or more --workers" in run.output
    assert "single agent 0.0" not in run.output  # nothing measured prints no number
    result = read_result(out)
    assert result.points[0].invalid and result.client.lag_limit_s == 0
    # Editing the mark away is caught on read: it is recomputed from the point's client figures.
    data = json.loads(out.read_text())
    data["points"][0]["invalid"] = None
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    refused = CliRunner().invoke(main, ["bench", "compare", str(out), str(edited)])
    assert refused.exit_code == 2 and "points.0.invalid" in refused.output
    # compare finds no measured point in common: it says so rather than compare invalid numbers.
    compared = CliRunner().invoke(main, ["bench", "compare", str(out), str(out)])
    assert "2 agents" not in compared.stdout or "invalid" in compared.stdout


def test_no_valid_point_no_score(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"session_id": "s", "input_length": 30, "output_length": 10}) + "\n")
    out = tmp_path / "r.json"
    with serve_in_thread(Server()) as server:
        run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace), "--lock",
                                        str(LOCK), "--agents", "1", "--slo", "tps=5,ttft=10s", "--lag-limit", "0",
                                        "--out", str(out)])
    assert run.exit_code == 0, run.output
    assert "score: none: no point is a measurement" in run.output and read_result(out).score is None


def _stats(late_s: object, steps: object) -> dict[str, object]:
    return {"virtual_s": 1.0, "engines": [{"role": "worker", "steps": steps, "late_s": late_s}]}


def test_a_simulator_late_behind_its_clock_makes_the_point_invalid_and_hostile_stats_say_nothing(
        tmp_path: Path) -> None:
    # The suite's lag limit (tests/conftest.py: 10 s, which no client here reaches) is the simulator's too.
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"session_id": "s", "input_length": 30, "output_length": 5}) + "\n")
    from stackpin.lock.lockfile import read_lock

    info = {"simulated": True, "model": "roofline", "stack_digest": read_lock(LOCK).stack_digest, "speed": 1}
    cases = {
        # 2,000 s late over 100 steps while the point ran: 20 s a step, past the 10 s limit.
        "late": ([_stats(0.0, 0), _stats(2000.0, 100)], 20.0),
        "on time": ([_stats(0.0, 0), _stats(100.0, 100)], 1.0),
        # Not a simulator's figures: negative, not finite, not numbers, a server gone backwards.
        "negative": ([_stats(0.0, 0), _stats(-5.0, 100)], None),
        "nan": ([_stats(0.0, 0), {"engines": [{"steps": 100, "late_s": "NaN"}]}], None),
        "backwards": ([_stats(5.0, 100), _stats(1.0, 200)], None),
        "garbage": (["not an object", [1, 2]], None),
    }
    for name, (answers, late) in cases.items():
        out = tmp_path / f"{name}.json"
        with serve_in_thread(Server(sim_info=info, sim_stats=list(answers))) as server:
            run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace), "--lock",
                                            str(LOCK), "--agents", "1", "--slo", "none", "--retries", "0",
                                            "--busy-limit", "100", "--out", str(out)])
        assert run.exit_code == 0, (name, run.output)
        (point,) = read_result(out).points
        assert point.server_late_s == (pytest.approx(late) if late is not None else None), name
        assert ("simulator behind its clock" in (point.invalid or "")) == (name == "late"), (name, point.invalid)
