"""The replay client's own cost: streamed tokens per CPU second and timestamp error, and the same
trace through `aiperf` side by side.

A fast loopback server (tests/sse_server.py, its own process: one SSE event per token, no pauses)
streams 256-token answers to 16 concurrent agents with zero tool delays; each client is a whole
process whose CPU time (user + system, its child processes included) is read from wait4. Both
clients run the same single-turn trace at two sizes, and the cost per million tokens is the
difference between the two runs over the difference in tokens: the marginal cost of streaming,
without either tool's start-up. Aim: ours under half of aiperf's.

Multi-turn: a trace from `stackpin trace gen` (32 sessions of 4 turns, 256-token answers, zero
delays) through both clients against the same server, once each: aiperf must accept it (its
`hash_ids` name each turn's new tokens, as aiperf reads them) and both must send the same accumulated
prompts, so the server-counted prompt tokens per request (ISL mean) of both are compared with the
trace's own `prompt_lengths` (previous prompt + answer + new tokens), and so is each request's: "same
as trace" counts the requests whose prompt tokens equal their (session, turn)'s prompt length. (aiperf
stops at its request count and may start a session over before the last one's last turn: its ISL
mean is then over a slightly different set of turns.)

Timestamp error: a server that paces tokens 5 ms apart; the client's ITL median and p99 minus 5 ms
(an upper bound: the server's own timer jitter is in it), and the client's event-loop lag p99.

aiperf 0.13.0 is installed by this script into .bench/aiperf-venv (ignored by git) on first run, and
skipped with a note if it cannot be installed or run. It needs a tokenizer to build prompts from
hash_ids: a word-level one is built locally and put in a private Hugging Face cache (offline).

Run from the repository root: `python bench/bench_client.py [REPEATS]` (default 3).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
VENV = ROOT / ".bench" / "aiperf-venv"
AIPERF_VERSION = "0.13.0"
AGENTS = 16
OUTPUT = 256
SIZES = (192, 576)  # sessions (a multiple of AGENTS) (one turn each): the small run and the large run
PACE_MS = 5.0
MULTI_SESSIONS = 32  # stackpin trace gen: small contexts and fixed answers, so the run stays short
MULTI_PARAMS = ("first_input.median=600", "first_input.min=100", "first_input.max=3000", "turn_input.median=200",
                "turn_input.max=2000", "turns.min=4", "turns.max=4", f"output.median={OUTPUT}", "output.sigma=0",
                "delay_ms.max=0")
AIM = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(itl_ms: float = 0.0) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.sse_server", "--port", str(port), "--itl-ms", str(itl_ms)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # "listening ..."
    return proc, f"http://127.0.0.1:{port}"


def write_trace(path: Path, sessions: int, output: int = OUTPUT) -> Path:
    # One turn a session: the new tokens are the whole prompt, one (partial) hash block of them.
    path.write_text("".join(json.dumps({"session_id": f"s{i}", "input_length": 100, "output_length": output,
                                        "hash_ids": [i]}) + "\n" for i in range(sessions)))
    return path


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> tuple[float, float, str]:
    """Run `cmd`; its wall seconds, CPU seconds (user + sys of it and its waited-for children), stderr tail."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {err[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime, err


def ours(url: str, trace: Path, out: Path, agents: int = AGENTS) -> tuple[float, float, dict[str, object]]:
    # The one point asked for, measured once: an SLO search would add a single-agent point, and a point whose
    # client is saturated (as it is meant to be here, with zero delays) would be measured again (--retries).
    cmd = [sys.executable, "-m", "stackpin", "bench", "run", "--endpoint", url, "--trace", str(trace), "--lock",
           str(LOCK), "--agents", str(agents), "--delay-scale", "0", "--slo", "none", "--retries", "0",
           "--out", str(out)]
    wall, cpu, _ = timed(cmd)
    return wall, cpu, json.loads(out.read_text())


def tokens_of(result: dict[str, object]) -> int:
    points = result["points"]
    assert isinstance(points, list)
    return sum(r["output_tokens"] for p in points for r in p["request_log"] if not r["error"])


# --- aiperf ----------------------------------------------------------------------------------------

def install_aiperf() -> Path | None:
    exe = VENV / "bin" / "aiperf"
    if exe.exists():
        return exe
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", f"aiperf=={AIPERF_VERSION}"], check=True,
                       capture_output=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"note: aiperf {AIPERF_VERSION} could not be installed ({type(exc).__name__}); skipped")
        return None
    return exe if exe.exists() else None


def word_tokenizer(home: Path) -> str:
    """A word-level tokenizer (whitespace-separated words) in a private HF cache, as `local/wordtok`."""
    snapshot = home / "hub" / "models--local--wordtok" / "snapshots" / ("0" * 40)
    if not (snapshot / "tokenizer.json").exists():
        code = ("import sys\nfrom tokenizers import Tokenizer, models, pre_tokenizers\n"
                "from transformers import PreTrainedTokenizerFast\n"
                "vocab = {'[UNK]': 0, 't': 1, **{f'w{i}': i for i in range(2, 1000)}}\n"
                "tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token='[UNK]'))\n"
                "tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()\n"
                "PreTrainedTokenizerFast(tokenizer_object=tok, unk_token='[UNK]').save_pretrained(sys.argv[1])\n")
        snapshot.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(VENV / "bin" / "python"), "-c", code, str(snapshot)], check=True, capture_output=True)
        (snapshot.parent.parent / "refs").mkdir(exist_ok=True)
        (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    return "local/wordtok"


def theirs(exe: Path, url: str, trace: Path, sessions: int, work: Path) -> tuple[float, float, int]:
    wall, cpu, data = aiperf_run(exe, url, trace, sessions, work)
    count = data["request_count"]["avg"] if "request_count" in data else sessions
    osl = data["output_sequence_length"]["avg"]
    return wall, cpu, int(round(count * osl))


def aiperf_run(exe: Path, url: str, trace: Path, sessions: int, work: Path,
               extra: tuple[str, ...] = ()) -> tuple[float, float, dict[str, Any]]:
    """One `aiperf profile` of `trace` (`sessions` requests): wall s, CPU s, its profile_export_aiperf.json."""
    home = ROOT / ".bench" / "aiperf-hf"
    tokenizer = word_tokenizer(home)
    out = work / f"aiperf-{sessions}-{time.monotonic_ns()}"
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    cmd = [str(exe), "profile", "--model", "test-model", "--url", url, "--endpoint-type", "chat", "--streaming",
           "--input-file", str(trace), "--custom-dataset-type", "mooncake_trace", "--tokenizer", tokenizer,
           "--concurrency", str(AGENTS), "--request-count", str(sessions), "--use-server-token-count",
           "--use-legacy-max-tokens", "--extra-inputs", "ignore_eos:true", "--output-artifact-dir", str(out),
           "--ui-type", "none", *extra]
    wall, cpu, _ = timed(cmd, env=env, cwd=work)
    data: dict[str, Any] = json.loads((out / "profile_export_aiperf.json").read_text())
    data["_dir"] = out  # its per-request records (profile_export.jsonl) are next to it
    return wall, cpu, data


def marginal(small: tuple[float, int], large: tuple[float, int]) -> float:
    """CPU seconds per million tokens between two run sizes."""
    return (large[0] - small[0]) / (large[1] - small[1]) * 1e6


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"client cost: {AGENTS} agents, {OUTPUT}-token answers, one SSE event per token, zero delays, "
          f"median of {repeats}")
    server, url = start_server()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
            work = Path(tmp)
            traces = {n: write_trace(work / f"trace-{n}.jsonl", n) for n in SIZES}
            rows: dict[str, dict[int, tuple[float, float, int]]] = {"stackpin": {}, "aiperf": {}}
            saturated = []
            for n in SIZES:
                runs = []
                for _ in range(repeats):
                    wall, cpu, result = ours(url, traces[n], work / "r.json")
                    runs.append((wall, cpu, tokens_of(result)))
                    client = result["client"]
                    assert isinstance(client, dict)
                    saturated.append(client["saturated"])
                rows["stackpin"][n] = tuple(statistics.median(x) for x in zip(*runs, strict=True))  # type: ignore[assignment]
            exe = install_aiperf()
            if exe is not None:
                try:
                    for n in SIZES:
                        runs = [theirs(exe, url, traces[n], n, work) for _ in range(repeats)]
                        rows["aiperf"][n] = tuple(statistics.median(x) for x in zip(*runs, strict=True))  # type: ignore[assignment]
                except (RuntimeError, OSError, KeyError, ValueError, subprocess.SubprocessError) as exc:
                    print(f"note: aiperf could not be run, skipped: {str(exc)[:300]}")
                    rows["aiperf"] = {}
            print(f"{'client':10} {'sessions':>8} {'tokens':>8} {'wall s':>7} {'cpu s':>7} {'tok/s':>9} "
                  f"{'tok/cpu-s':>10}")
            for name, by_size in rows.items():
                for n, (wall, cpu, tokens) in sorted(by_size.items()):
                    print(f"{name:10} {n:>8} {tokens:>8.0f} {wall:>7.2f} {cpu:>7.2f} {tokens / wall:>9.0f} "
                          f"{tokens / cpu:>10.0f}")
            per_million = {name: marginal((by[SIZES[0]][1], by[SIZES[0]][2]), (by[SIZES[1]][1], by[SIZES[1]][2]))
                           for name, by in rows.items() if len(by) == 2}
            for name, value in per_million.items():
                print(f"{name}: {value:.2f} CPU s per million streamed tokens (marginal), "
                      f"{1e6 / value:,.0f} streamed tokens/s per CPU core")
            print(f"stackpin reported itself saturated in {sum(map(bool, saturated))} of {len(saturated)} runs "
                  "(zero delays: the client is meant to be the busy side here)")
            if "aiperf" in per_million:
                ratio = per_million["stackpin"] / per_million["aiperf"]
                print(f"aim: stackpin / aiperf CPU per million streamed tokens = {ratio:.2f} < {AIM}: "
                      f"{'met' if ratio < AIM else 'NOT met'}")
            else:
                print("note: no aiperf comparison in this run")
        multi_turn(url)
    finally:
        server.terminate()
        server.wait()
    timestamp_error(repeats)
    print(f"(host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; max RSS of this script "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB)")


def multi_turn(url: str) -> None:
    """A generated multi-turn trace through both clients: accepted by aiperf, the same prompts sent."""
    from stackpin.bench.traceio import prompt_lengths, read_trace

    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        work = Path(tmp)
        trace = work / "multi.jsonl"
        params = [arg for p in MULTI_PARAMS for arg in ("--param", p)]
        subprocess.run([sys.executable, "-m", "stackpin", "trace", "gen", "--sessions", str(MULTI_SESSIONS), "--seed",
                        "0", *params, "--out", str(trace)], cwd=ROOT, check=True, capture_output=True)
        turns = read_trace(trace)
        lengths = prompt_lengths(turns)
        expected: dict[tuple[str, int], int] = {}  # (session, turn index) -> the prompt's tokens
        seen: dict[str, int] = {}
        for turn, length in zip(turns, lengths, strict=True):
            seen[turn.session_id] = seen.get(turn.session_id, -1) + 1
            expected[(turn.session_id, seen[turn.session_id])] = length
        print(f"multi-turn: `stackpin trace gen --sessions {MULTI_SESSIONS} --seed 0 --param "
              f"{' --param '.join(MULTI_PARAMS)}`\n  ({len(lengths)} requests, "
              f"4 turns a session, {OUTPUT}-token answers, zero delays), {AGENTS} agents, one run each; "
              f"the trace's ISL mean (prompt_lengths) {statistics.mean(lengths):.1f}")
        print(f"{'client':10} {'requests':>8} {'ISL mean':>9} {'same as trace':>13} {'tokens':>8} {'wall s':>7} "
              f"{'cpu s':>7}")
        wall, cpu, result = ours(url, trace, work / "r.json")
        points = result["points"]
        assert isinstance(points, list)
        log = [r for p in points for r in p["request_log"]]
        ok = [r for r in log if not r["error"]]
        same = sum(expected.get((r["session"], r["turn"])) == r["prompt_tokens"] for r in ok)
        print(f"{'stackpin':10} {len(ok):>8} {statistics.mean(r['prompt_tokens'] for r in ok):>9.1f} {same:>13} "
              f"{tokens_of(result):>8} {wall:>7.2f} {cpu:>7.2f}" + (f"  ({len(log) - len(ok)} errors)" if
                                                                    len(ok) < len(log) else ""))
        exe = install_aiperf()
        if exe is None:
            print("note: no aiperf in this run")
            return
        try:
            # In trace order, each session once (aiperf's default samples sessions with replacement).
            wall, cpu, data = aiperf_run(exe, url, trace, len(lengths), work,
                                         ("--dataset-sampling-strategy", "sequential"))
        except (RuntimeError, OSError, KeyError, ValueError, subprocess.SubprocessError) as exc:
            print(f"aiperf     refused or failed the multi-turn trace: {str(exc)[:300]}")
            return
        count = data["request_count"]["avg"]
        osl = data["output_sequence_length"]["avg"]
        records = [json.loads(line) for line in (data["_dir"] / "profile_export.jsonl").read_text().splitlines()]
        same = sum(expected.get((m["conversation_id"], m["turn_index"])) == r["metrics"].get(
            "input_sequence_length", {}).get("value") for r in records for m in [r["metadata"]])
        print(f"{'aiperf':10} {count:>8.0f} {data['input_sequence_length']['avg']:>9.1f} {same:>13} "
              f"{count * osl:>8.0f} {wall:>7.2f} {cpu:>7.2f}")


def timestamp_error(repeats: int) -> None:
    server, url = start_server(PACE_MS)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
            trace = write_trace(Path(tmp) / "paced.jsonl", 32, output=100)
            p50s, p99s, lags = [], [], []
            for _ in range(repeats):
                _, _, result = ours(url, trace, Path(tmp) / "r.json", agents=8)
                points = result["points"]
                assert isinstance(points, list)
                itls = sorted(r["itl_mean_s"] for r in points[0]["request_log"] if r["itl_mean_s"] is not None)
                p50s.append(statistics.median(itls) * 1000 - PACE_MS)
                p99s.append(itls[int(0.99 * (len(itls) - 1))] * 1000 - PACE_MS)
                client = result["client"]
                assert isinstance(client, dict)
                lags.append(client["loop_lag_p99_s"] * 1000)
        print(f"timestamp error at {PACE_MS:g} ms pacing, 8 agents: request ITL p50 +{statistics.median(p50s):.3f} ms, "
              f"p99 +{statistics.median(p99s):.3f} ms (server timer jitter included); client event-loop lag p99 "
              f"{statistics.median(lags):.3f} ms")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
