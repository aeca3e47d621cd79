"""The Dynamo bed for real: NVIDIA Dynamo 1.6.1's own frontend, KV router and mocker processes (from
.dynamobed/, `make dynamo-env`), on loopback. They stand in for a rack's frontend and vLLM workers: the
mocker schedules like vLLM but only sleeps each step, for the time stackpin's step model gives. The
cross-checks hold stackpin's client to the frontend's own accounting of the same requests."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from stackpin.bench.resultfile import read_result
from stackpin.bench.stream import Connection, Endpoint, Outcome
from stackpin.cli.main import main
from stackpin.errors import StackpinError
from stackpin.sim.dynamo import BedPlan, Mocker, plan
from stackpin.sim.dynamo_bed import find_env, running
from tests.helpers import cpu_burners
from tests.lockkit import shipped_locks
from tests.ownenv import own_env

ROOT = Path(__file__).resolve().parent.parent
ENV = Path(os.environ.get("STACKPIN_DYNAMO_ENV", ROOT / ".dynamobed" / "dynamo-1.6.1"))
UNAVAILABLE = ROOT / ".dynamobed" / "UNAVAILABLE"
LOCKS = shipped_locks()
LOCKFILES = ROOT / "lockfiles"


@pytest.fixture(scope="module")
def env() -> Path:
    python = own_env(ENV / "bin" / "python", UNAVAILABLE, "Dynamo bed", "dynamo-env", "STACKPIN_REQUIRE_DYNAMO")
    return python.parent.parent


def _metrics(frontend: str) -> dict[str, float]:
    """The frontend's Prometheus counters and sums, by name and labels."""
    with urllib.request.urlopen(frontend + "/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def _one(metrics: dict[str, float], prefix: str) -> float:
    found = [v for k, v in metrics.items() if k.startswith(prefix)]
    assert len(found) == 1, (prefix, found)
    return found[0]


def _delta(before: dict[str, float], after: dict[str, float], prefix: str) -> float:
    """A counter's or sum's growth; a series the frontend had not listed yet counts from 0."""
    return sum(v for k, v in after.items() if k.startswith(prefix)) - sum(
        v for k, v in before.items() if k.startswith(prefix))


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, parent, process group, start time) of a process from /proc, None when there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _parent(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def _processes() -> dict[int, tuple[str, int, int, int]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))):
            found[int(entry.name)] = stat
    return found


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _argv0(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") or [b""])[0].decode(errors="replace")
    except OSError:
        return ""


def _environ(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _listening_sockets(port: int) -> set[str]:
    """The inodes of the sockets listening on 127.0.0.1:`port` (/proc/net/tcp). By inode, not by trying
    the port: once a bed let it go, another test's server may take it, and that is no bed's socket."""
    local = f"0100007F:{port:04X}"
    with open("/proc/net/tcp", encoding="ascii") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return {row[9] for row in rows if row[1] == local and row[3] == "0A"}  # 0A: LISTEN


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_shipped_lock_serves_on_the_bed(env: Path, name: str) -> None:
    lock = LOCKS[name]
    bed_plan = plan(lock)  # the whole stack: every replica a mocker worker
    with running(bed_plan, env) as bed:
        sockets = _listening_sockets(int(bed.frontend.rsplit(":", 1)[1]))
        assert sockets
        info = httpx.get(bed.url + "/stackpin/sim").json()
        assert info["simulated"] is True and info["backend"] == "dynamo 1.6.1"
        assert info["stack_digest"] == lock.stack_digest and info["serving"] == bed.frontend
        # Anything else on the bed's address is the frontend's (a redirect: no proxy on the path).
        models = httpx.get(bed.url + "/v1/models", follow_redirects=True).json()
        assert [m["id"] for m in models["data"]] == [lock.resolved.model.id]
        words = " ".join(f"w{i}" for i in range(700))
        reply = httpx.post(bed.frontend + "/v1/chat/completions", timeout=60, json={
            "model": lock.resolved.model.id, "messages": [{"role": "user", "content": words}], "max_tokens": 5,
            "ignore_eos": True, "stream": False}).json()
        assert reply["usage"]["prompt_tokens"] == 700 and reply["usage"]["completion_tokens"] == 5
        # The frontend learned the lock's shape from the workers it discovered (each pool's own).
        metrics = _metrics(bed.frontend)
        pools = bed_plan.stack.pools
        block = int(bed_plan.mockers[-1].args[bed_plan.mockers[-1].args.index("--block-size") + 1])
        assert _one(metrics, "dynamo_frontend_model_kv_cache_block_size") == block
        assert _one(metrics, "dynamo_frontend_model_max_num_seqs") in {p.max_num_seqs for p in pools}
        assert _one(metrics, "dynamo_frontend_model_total_kv_blocks") in {p.kv_tokens // block for p in pools}
        pids = [p.popen.pid for p in bed.processes]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not _listening_sockets(int(bed.frontend.rsplit(":", 1)[1])) & sockets


def _trace(path: Path) -> Path:
    out = CliRunner().invoke(main, ["trace", "gen", "--sessions", "8", "--seed", "3", "--param", "turns.max=4",
                                    "--param", "max_context=20000", "--param", "output.median=60", "--out", str(path)])
    assert out.exit_code == 0, out.output
    return path


def test_the_client_agrees_with_the_frontends_own_accounting(env: Path, tmp_path: Path) -> None:
    """TTFT and ITL as stackpin's client measured them against the frontend's histograms of the same
    requests, and every token count against its counters; every prompt is the trace's size."""
    # One agent replaying one long session, every turn sent the instant the last answer ended, on the
    # connection it kept alive: the case whose first token the frontend's Nagle held (see the timing check).
    trace = tmp_path / "t.jsonl"
    made = CliRunner().invoke(main, ["trace", "gen", "--sessions", "1", "--seed", "3", "--param", "turns.min=14",
                                     "--param", "turns.max=14", "--param", "delay_ms.min=500", "--param",
                                     "max_context=30000", "--param", "output.median=60", "--out", str(trace)])
    assert made.exit_code == 0, made.output
    lock = LOCKFILES / "gb300-tuned.lock.yaml"
    out = tmp_path / "r.json"
    with running(plan(LOCKS["gb300-tuned"], share=9), env) as bed:
        before = _metrics(bed.frontend)
        run = CliRunner().invoke(main, ["bench", "run", "--endpoint", bed.url, "--trace", str(trace), "--lock",
                                        str(lock), "--agents", "1", "--delay-scale", "0", "--out", str(out)])
        assert run.exit_code == 0, run.output
        after = _metrics(bed.frontend)
    result = read_result(out)
    assert result.simulation is not None and result.simulation.backend == "dynamo 1.6.1"
    assert result.served_model == "deepseek-ai/DeepSeek-V4.1-Flash"
    assert result.client.tokenizer is not None
    requests = [r for p in result.points for r in p.request_log]
    assert requests and not any(r.error for r in requests)
    assert all(r.prompt_tokens == r.sent_tokens for r in requests)

    def delta(prefix: str) -> float:  # a series the frontend has not seen yet is not listed: 0
        return _one(after, prefix) - sum(v for k, v in before.items() if k.startswith(prefix))

    assert delta('dynamo_frontend_requests_total{endpoint="chat_completions",error_type="",model="deepseek-ai/'
                 'DeepSeek-V4.1-Flash",request_type="stream"') == len(requests)
    assert delta("dynamo_frontend_input_sequence_tokens_sum") == sum(r.prompt_tokens for r in requests)
    assert delta("dynamo_frontend_output_sequence_tokens_sum") == sum(r.output_tokens for r in requests)
    assert delta("dynamo_frontend_cached_tokens_sum") == sum(r.cached_tokens for r in requests)
    # Timing: the frontend's TTFT histogram (tokenizing and templating included) against the client's clock,
    # from the request's first byte to the first token's. On loopback they agree to a millisecond or two,
    # plus however late the client's own event loop ran. Turns back to back: before the client acknowledged
    # each response at once (stackpin/bench/stream.py), the frontend's Nagle held the first token of each
    # until the client's delayed ACK, and the client's TTFT was ~15 ms over the frontend's here (docs/sim.md).
    client_ttft = sum(r.ttft_s or 0 for r in requests) / len(requests)
    served = delta("dynamo_frontend_time_to_first_token_seconds_count")
    server_ttft = delta("dynamo_frontend_time_to_first_token_seconds_sum") / served
    slack = 0.002 + (result.client.loop_lag_p99_s or 0)
    assert abs(client_ttft - server_ttft) <= slack, (client_ttft, server_ttft)
    gaps = sum((r.output_tokens - 1) for r in requests if r.itl_mean_s is not None)
    client_itl = sum(r.itl_mean_s * (r.output_tokens - 1) for r in requests if r.itl_mean_s is not None) / gaps
    server_itl = delta("dynamo_frontend_inter_token_latency_seconds_sum") / delta(
        "dynamo_frontend_inter_token_latency_seconds_count")
    assert client_itl == pytest.approx(server_itl, rel=0.05, abs=0.0002)
    # Every gap, not only the per-request mean: the frontend's histogram counts one a token, as the
    # client does here (one token an event), and the two means agree.
    gaps = [p.token_gap_s for p in result.points]
    assert all(gaps)
    assert sum(g.count for g in gaps if g) == delta("dynamo_frontend_inter_token_latency_seconds_count")
    gap_mean = sum(g.mean * g.count for g in gaps if g) / sum(g.count for g in gaps if g)
    assert gap_mean == pytest.approx(server_itl, rel=0.05, abs=0.0002)


async def _turns(frontend: str, model: str, reuse: bool, turns: int, salt: int) -> list[Outcome]:
    """`turns` streamed requests sent back to back, each the instant the last answer ended: on one kept-alive
    connection, or each on a new one. Every prompt is new (no prefix-cache hit), all of one size."""
    connection = Connection(Endpoint.parse(frontend))
    outcomes = []
    try:
        for turn in range(turns):
            if not reuse:
                connection.close()
            words = " ".join(f"w{(salt * 1000 + turn * 50 + i) % 32768}" for i in range(300))
            outcomes.append(await connection.chat({
                "model": model, "messages": [{"role": "user", "content": words}], "max_tokens": 100,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}, 60))
    finally:
        connection.close()
    return outcomes


def test_a_reused_connection_sees_tokens_when_the_frontend_sends_them(env: Path) -> None:
    """Back-to-back turns on a reused connection against fresh connections, each against the frontend's
    own TTFT and inter-token histograms over the same requests. Dynamo 1.6.1's frontend leaves Nagle's
    algorithm on, so a client that delays its ACK of the response head (Linux does, in its interactive
    mode, when a request follows the last answer at once) got the first token some 27 ms late and the
    next ones in a burst: per-request ITL 11-15% below the frontend's on a reused connection, never on a
    fresh one (docs/sim.md). Ratios of the same run, beside a CPU burner: never a raw timing."""
    lock = LOCKS["gb300-tuned"]
    # Per way of sending: [client's first-to-last-token time, frontend's inter-token sum, client TTFT sum,
    # frontend TTFT sum, requests], over the same requests.
    sums = {False: [0.0] * 5, True: [0.0] * 5}
    with running(plan(lock, share=9), env) as bed, cpu_burners():
        for salt, reuse in enumerate((False, True, False, True)):  # alternated: drift on the host hits both
            before = _metrics(bed.frontend)
            outcomes = asyncio.run(_turns(bed.frontend, lock.resolved.model.id, reuse, 8, salt))
            after = _metrics(bed.frontend)
            assert not [o.error for o in outcomes if o.error]
            assert _delta(before, after, "dynamo_frontend_time_to_first_token_seconds_count") == len(outcomes)
            for i, value in enumerate((
                    sum((o.last_token or 0) - (o.first_token or 0) for o in outcomes),
                    _delta(before, after, "dynamo_frontend_inter_token_latency_seconds_sum"),
                    sum((o.first_token or 0) - o.start for o in outcomes),
                    _delta(before, after, "dynamo_frontend_time_to_first_token_seconds_sum"), len(outcomes))):
                sums[reuse][i] += value
    # The client's per-request ITL, (last token - first token) / (tokens - 1), summed over its gaps, against
    # the frontend's inter-token sum over the same gaps; the client's TTFT beyond the frontend's, per request.
    itl = {reuse: s[0] / s[1] for reuse, s in sums.items()}
    late = {reuse: (s[2] - s[3]) / s[4] for reuse, s in sums.items()}
    # Fresh connections agree with the frontend (the reference), and a reused one agrees with them: ITL
    # within 4% (the fault took 11-15% off it), the first token within 8 ms of theirs (it came ~27 ms late).
    assert itl[False] == pytest.approx(1.0, abs=0.04), (itl, late)
    assert itl[True] == pytest.approx(itl[False], abs=0.04), (itl, late)
    assert late[True] - late[False] < 0.008, (itl, late)


def _frontend_itl(plan_: BedPlan, env: Path, model: str, salt: int) -> float:
    """The frontend's own mean inter-token latency over one agent's back-to-back turns (batch 1)."""
    with running(plan_, env) as bed:
        before = _metrics(bed.frontend)
        outcomes = asyncio.run(_turns(bed.frontend, model, True, 4, salt))
        after = _metrics(bed.frontend)
    assert not [o.error for o in outcomes if o.error]
    return _delta(before, after, "dynamo_frontend_inter_token_latency_seconds_sum") / _delta(
        before, after, "dynamo_frontend_inter_token_latency_seconds_count")


def test_the_mocker_floors_decode_steps_as_the_plan_says(env: Path) -> None:
    """Vera Rubin tuned decodes under 1 ms a token at batch 1 by its step model, under the pinned mocker's
    1 ms floor: the bed serves it that much slower, as the plan states. The control is the same steps
    with the floor out of their way (the table doubled, --decode-speedup-ratio 2 halving it back: the
    mocker floors before it divides), so the figure is a ratio of two beds of the same run, beside a
    CPU burner, never a raw timing."""
    lock = LOCKS["vera-rubin-tuned"]
    floored = plan(lock, share=9)
    [slow] = floored.floored
    control = dataclasses.replace(floored, mockers=tuple(
        Mocker(m.role, m.workers, (*m.args, "--decode-speedup-ratio", "2.0"), dataclasses.replace(
            m.table, decode_itl=tuple(tuple(2 * v for v in row) for row in m.table.decode_itl)))
        for m in floored.mockers))
    with cpu_burners():
        served, followed = (_frontend_itl(p, env, lock.resolved.model.id, salt)
                            for salt, p in enumerate((floored, control)))
    lost = 1 - followed / served  # per-token speed the floor takes at batch 1
    assert lost == pytest.approx(slow.slower[0][1], abs=0.05), (served, followed, slow)  # as stated


def test_sim_serve_warns_of_the_floor_and_bench_results_carry_it(env: Path, tmp_path: Path) -> None:
    lock = LOCKFILES / "vera-rubin-tuned.lock.yaml"
    said = plan(LOCKS["vera-rubin-tuned"], share=9).floored[0].describe("1.6.1")
    proc = subprocess.Popen([sys.executable, "-m", "stackpin", "sim", "serve", str(lock), "--backend", "dynamo",
                             "--share", "9", "--port", "0", "--dynamo-env", str(env)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        warning, announced = proc.stderr.readline(), proc.stderr.readline()
        assert warning == f"stackpin sim: warning: {said}\n"
        fastest = plan(LOCKS["vera-rubin-tuned"], share=9).floored[0].fastest_ms
        assert f"{fastest:.3f} ms per token (batch 1)" in warning and f"up to ~{1 - fastest:.0%} slower" in warning
        found = re.search(r"on (http://127\.0\.0\.1:\d+) ", announced)
        assert found, announced
        assert said in httpx.get(found.group(1) + "/stackpin/sim").json()["substitutions"]
        trace, out = tmp_path / "t.jsonl", tmp_path / "r.json"
        made = CliRunner().invoke(main, ["trace", "gen", "--sessions", "2", "--seed", "3", "--param", "turns.max=2",
                                         "--param", "output.median=30", "--out", str(trace)])
        assert made.exit_code == 0, made.output
        run = CliRunner().invoke(main, ["bench", "run", "--endpoint", found.group(1), "--trace", str(trace), "--lock",
                                        str(lock), "--agents", "1", "--delay-scale", "0", "--slo", "none", "--out",
                                        str(out)])
        assert run.exit_code == 0, run.output
        simulation = read_result(out).simulation
        assert simulation is not None and said in simulation.substitutions
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=120)


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_every_dynamo_process(env: Path, how: signal.Signals) -> None:
    """What stopping means: stackpin exits 130 (143 on SIGTERM), and every process it started (the event
    broker, the frontend, the mockers, the janitor), anything in their process groups, the frontend's
    listening socket and the bed's temporary directory are gone. Each is
    identified by what it is (process id and start time, process group, socket inode), never by a name or
    a port that another test's processes may hold by then, and nothing is timed but a bound on a hang."""
    proc = subprocess.Popen([sys.executable, "-m", "stackpin", "sim", "serve", str(LOCKFILES / "gb300-tuned.lock.yaml"),
                             "--backend", "dynamo", "--share", "9", "--port", "0", "--dynamo-env", str(env)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the announcement, once the bed answers (or the error, when it cannot start)
    found = re.search(r"on (http://127\.0\.0\.1:\d+) .*frontend at http://127\.0\.0\.1:(\d+)", line)
    assert found, line
    frontend_port = int(found.group(2))
    assert httpx.get(found.group(1) + "/stackpin/sim").json()["simulated"] is True
    started = {pid: stat for pid, stat in _processes().items() if stat[1] == proc.pid}
    bed = [pid for pid in started if _argv0(pid).startswith(str(env))]  # the janitor runs stackpin's Python
    frontend = [pid for pid in _processes_naming(f"--http-port {frontend_port}") if pid in started]
    assert len(bed) == 3 and len(started) == 4 and len(frontend) == 1, started  # the broker, the frontend,
    # gb300-tuned's one mocker, and the janitor that cleans up after a kill -9
    assert all(stat[2] == pid for pid, stat in started.items())  # each leads a group of its own
    directories = {Path(a.split("=", 1)[1]).parent for pid in bed for a in _environ(pid)
                   if a.startswith("DYN_FILE_KV=")}
    assert len(directories) == 1 and all(d.is_dir() for d in directories), directories
    sockets = _listening_sockets(frontend_port)
    assert sockets
    os.killpg(proc.pid, how)  # as a terminal's Ctrl-C (the whole group), or a supervisor's SIGTERM
    _, err = proc.communicate(timeout=120)  # a bound on a hang: stopping waits 10 s at most, then kills
    assert proc.returncode == 128 + how, err
    assert not [d for d in directories if d.exists()]
    # stackpin waited for each process it started before it exited: none is left, not even as a zombie.
    assert not [pid for pid, stat in started.items() if (_stat(pid) or ("", 0, 0, -1))[3] == stat[3]]
    # Their groups were killed too; a member that outlived its leader is reaped by init, not by stackpin.
    deadline = time.monotonic() + 10
    while (left := [p for p, s in _processes().items() if s[2] in started and s[0] != "Z"]) and (
            time.monotonic() < deadline):
        time.sleep(0.1)
    assert not left
    assert not _listening_sockets(frontend_port) & sockets


def test_a_mocker_that_fails_is_one_line_and_nothing_is_left(env: Path) -> None:
    good = plan(LOCKS["gb300-tuned"], share=9)
    bad = good.mockers[0]
    args = list(bad.args)
    args[args.index("--num-workers") + 1] = "0"  # the mocker refuses: --num-workers must be at least 1
    broken = type(good)(**{**good.__dict__, "mockers": (Mocker(bad.role, 0, tuple(args), bad.table),)})
    with pytest.raises(StackpinError, match=r"the Dynamo mocker \(worker\) exited with \d+") as caught:
        with running(broken, env):
            pass
    assert "\n" not in str(caught.value)
    # None of this process's children is a Dynamo process any more (other test workers may run beds).
    assert [pid for pid in _processes_naming("dynamo.") if _parent(pid) == os.getpid()] == []


def test_a_missing_environment_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StackpinError, match="is not installed at .*make dynamo-env"):
        find_env(str(tmp_path / "nothing"))
    result = CliRunner().invoke(main, ["sim", "serve", str(LOCKFILES / "gb300-tuned.lock.yaml"), "--backend", "dynamo",
                                       "--dynamo-env", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    faulty = CliRunner().invoke(main, ["sim", "serve", str(LOCKFILES / "gb300-tuned.lock.yaml"), "--backend", "dynamo",
                                       "--fault", "error=0.1"])
    assert faulty.exit_code == 2 and "injects no faults" in faulty.output
