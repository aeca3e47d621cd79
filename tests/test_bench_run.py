"""`stackpin bench run` against real HTTP servers on loopback (tests/sse_server.py): faults recorded
per request, the grown context, the SLO search, workers, Ctrl-C, the simulator handshake."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.bench.resultfile import read_result
from stackpin.cli.main import main
from tests.sse_server import Server, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"


def write_trace(path: Path, sessions: int, turns: int, output: int = 8, first: int = 600, then: int = 100,
                delay: int = 0) -> Path:
    """Sessions whose context grows: each turn adds `new` tokens whose own 512-token blocks its hash_ids
    name (AIPerf's multi-turn reading); the client sends previous turns and answers before them."""
    lines = []
    for s in range(sessions):
        next_id = s * 1000
        for t in range(turns):
            new = first if t == 0 else then
            blocks = -(-new // 512)
            lines.append(json.dumps({"session_id": f"s{s}", "input_length": new, "output_length": output,
                                     "delay": 0 if t == 0 else delay,
                                     "hash_ids": list(range(next_id, next_id + blocks))}))
            next_id += blocks
    path.write_text("\n".join(lines) + "\n")
    return path


def bench(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["bench", *args])
    return result.exit_code, result.stdout, result.stderr


def test_every_failure_is_recorded_per_request_and_the_run_finishes(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=6, turns=2)
    faults = {1: "error", 3: "drop", 5: "stall", 7: "malformed"}
    with serve_in_thread(Server(faults=faults)) as server:
        code, out, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                                "--agents", "1,2", "--request-timeout", "0.5s", "--out", str(tmp_path / "r.json")])
    assert code == 0, err
    result = read_result(tmp_path / "r.json")
    log = [r for p in result.points for r in p.request_log]
    errors = sorted(r.error.split(":")[0] for r in log if r.error)
    assert errors == ["bad SSE event", "dropped", "http 500", "stalled"]
    assert sum(p.errors for p in result.points) == 4
    stalled = next(r for r in log if r.error and r.error.startswith("stalled"))
    assert 0.45 < stalled.end_s - stalled.start_s < 2.0  # given up at the deadline, not waited out
    # a failed request that lost its answer ends its session; the malformed one still finished
    malformed = next(r for r in log if r.error and r.error.startswith("bad SSE"))
    assert malformed.output_tokens == 8
    assert "1 agent" not in err


def test_each_turn_sends_the_grown_context_and_the_cache_is_measured(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=2, turns=3, output=8)
    with serve_in_thread(Server()) as server:
        code, _, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                              "--agents", "1,2", "--cache-salt", "x", "--out", str(tmp_path / "r.json"), "-o", "json"])
        bodies = list(server.bodies)
    assert code == 0, err
    first_session = bodies[:3]
    for before, after in zip(first_session, first_session[1:], strict=False):
        sent, grown = before["messages"], after["messages"]
        assert grown[: len(sent)] == sent  # the same bytes again
        assert grown[len(sent)]["role"] == "assistant" and grown[len(sent)]["content"] == "t " * 8
        assert len(grown[-1]["content"].split()) == 100  # the turn's new tokens
        assert all(body["stream"] and body["stream_options"] == {"include_usage": True} and body["ignore_eos"]
                   for body in (before, after))
    assert [b["max_tokens"] for b in bodies[:3]] == [8, 8, 8]
    assert first_session[0]["messages"][0]["content"].split()[:2] == ["xp0r0-b0_0", "xp0r0-b0_1"]
    result = read_result(tmp_path / "r.json")
    one, two = result.points
    assert one.requests == 6 and two.requests == 6 and one.errors == 0
    assert one.request_log[0].cached_tokens == 0 and one.request_log[1].cached_tokens == 512
    assert one.cache_hit_rate is not None and one.cache_hit_rate > 0.3
    # the second agent count replays the sessions with other words: nothing cached from the first
    assert two.request_log[0].cached_tokens == 0
    assert result.stack.gpus == 72 and result.stack.digest.startswith("sha256:")
    assert result.controls.agents == (1, 2) and result.fingerprint.startswith("sha256:")
    assert one.output_tps_per_gpu == pytest.approx(one.output_tps / 72)


def test_each_run_starts_with_a_cold_cache_unless_told_to_share_it(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=1)
    first_cached = []
    with serve_in_thread(Server()) as server:
        for salt in ([], [], ["--cache-salt", "same"], ["--cache-salt", "same"]):
            code, _, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                                  "--agents", "1", *salt, "--out", str(tmp_path / "r.json")])
            assert code == 0, err
            first_cached.append(read_result(tmp_path / "r.json").points[0].request_log[0].cached_tokens)
    assert first_cached == [0, 0, 0, 512]


def test_slo_search_bisects_between_swept_points(tmp_path: Path) -> None:
    # TTFT = 100 ms per open connection: 5 agents hold a median TTFT <= 0.55 s, 6 do not
    trace = write_trace(tmp_path / "t.jsonl", sessions=8, turns=2, output=4)
    with serve_in_thread(Server(ttft_per_connection_s=0.1)) as server:
        code, out, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                                "--agents", "1,8", "--slo", "tps=1,ttft=0.55s,percentile=p50",
                                "--out", str(tmp_path / "r.json")])
    assert code == 0, err
    result = read_result(tmp_path / "r.json")
    assert [(p.agents, p.searched, p.slo_met) for p in result.points] == [
        (1, False, True), (4, True, True), (5, True, True), (6, True, False), (8, False, False)]
    assert result.score is not None and result.score.max_agents == 5
    assert result.score.single_agent_tps == result.points[0].agent_tps.mean
    assert result.score.output_tps_per_gpu_at_slo == result.points[2].output_tps_per_gpu
    assert "score: 5 agent(s) under the SLO" in out


def test_workers_split_the_agents_and_the_results_merge(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=4, turns=2)
    with serve_in_thread(Server()) as server:
        code, _, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                              "--agents", "4", "--workers", "3", "--slo", "none", "--out", str(tmp_path / "r.json")])
    assert code == 0, err
    result = read_result(tmp_path / "r.json")
    (point,) = result.points
    assert sorted({r.agent for r in point.request_log}) == [0, 1, 2, 3]
    assert point.requests == 8 and len(point.agent_tps_samples) == 4
    assert result.client.workers == 3 and result.client.busy_fraction is not None


def test_simulator_is_recognised_and_its_time_scale_undone(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=2, output=20)
    digest = json.loads(json.dumps(read_lock_digest()))
    info = {"simulated": True, "model": "roofline", "substitutions": ["none"], "stack_digest": digest, "speed": 10}
    with serve_in_thread(Server(itl_s=0.004, sim_info=info)) as server:
        code, _, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                              "--agents", "1", "--out", str(tmp_path / "r.json")])
        assert code == 0, err
        result = read_result(tmp_path / "r.json")
        assert result.simulation is not None and result.simulation.speed == 10
        assert result.points[0].itl_s.p50 > 0.035  # 4 ms of wall time is 40 ms of the simulated stack's
        other = {**info, "stack_digest": "sha256:" + "0" * 64}
        server.sim_info = other
        code, _, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                              "--agents", "1", "--out", str(tmp_path / "other.json")])
    assert code == 2 and "simulates stack sha256:000" in err
    assert not (tmp_path / "other.json").exists()


def read_lock_digest() -> str:
    from stackpin.lock.lockfile import read_lock

    return read_lock(LOCK).stack_digest


def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=4, turns=20, output=50)
    out = tmp_path / "r.json"
    with serve_in_thread(Server(itl_s=0.01)) as server:
        proc = subprocess.Popen([sys.executable, "-m", "stackpin", "bench", "run", "--endpoint", server.url,
                                 "--trace", str(trace), "--lock", str(LOCK), "--agents", "2,4", "--workers", "2",
                                 "--slo", "none", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 30
        while server.requests_seen < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # and again, impatiently
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    result = read_result(out)
    assert result.interrupted and "interrupted" in stderr
    assert [p.agents for p in result.points] == [2]
    assert 1 <= result.points[0].requests < 40
    assert all(r.error is None for r in result.points[0].request_log)


@pytest.mark.parametrize(("args", "message"), [
    (["--slo", "tps=80"], "both tps= and ttft= are needed"),
    (["--agents", "0,2"], "agent counts are positive"),
    (["--request-timeout", "soon"], "give seconds"),
])
def test_bad_options_are_one_line_errors(tmp_path: Path, args: list[str], message: str) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=1)
    code, _, err = bench(["run", "--endpoint", "http://127.0.0.1:9", "--trace", str(trace), "--lock", str(LOCK),
                          "--out", str(tmp_path / "r.json"), *args])
    assert code == 2 and message in err and "Traceback" not in err


def test_a_bad_trace_line_is_located(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"session_id": "a", "input_length": 5, "output_length": 3}\n'
                     '{"session_id": "a", "input_length": 5, "output_length": 0}\n')
    code, _, err = bench(["run", "--endpoint", "http://127.0.0.1:9", "--trace", str(trace), "--lock", str(LOCK),
                          "--out", str(tmp_path / "r.json")])
    assert code == 2 and f"{trace}:2:1: output_length:" in err


def test_an_unreachable_endpoint_is_one_line(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=1)
    with serve_in_thread(Server()) as server:
        url = server.url
    code, _, err = bench(["run", "--endpoint", url, "--trace", str(trace), "--lock", str(LOCK),
                          "--out", str(tmp_path / "r.json")])
    assert code == 2 and "cannot reach it" in err


def test_duration_stops_new_turns_and_wraps_the_trace(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=2, output=20)
    with serve_in_thread(Server(itl_s=0.005)) as server:
        code, _, err = bench(["run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                              "--agents", "2", "--duration", "0.8s", "--slo", "none",
                              "--out", str(tmp_path / "r.json")])
    assert code == 0, err
    (point,) = read_result(tmp_path / "r.json").points
    # a 2-turn trace replayed for 0.8 s by 2 agents: sessions again and again (rounds), then no new turn (a
    # turn is stamped when sent, which a busy host's client loop can make late by its lag; nothing more)
    assert point.requests > 4 and {r.session for r in point.request_log} == {"s0"}
    late = max(0.05, 2 * (point.loop_lag_p99_s or 0.0))
    assert max(r.start_s for r in point.request_log) - min(r.start_s for r in point.request_log) < 0.8 + late
