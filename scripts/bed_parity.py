"""stackpin's own simulator against the Dynamo bed (NVIDIA Dynamo's frontend, KV router and mocker), same
lock, same trace, same agent counts: per-agent tok/s and TTFT side by side, for docs/sim.md.

    .venv/bin/python scripts/bed_parity.py [--locks gb300-tuned:9,gb300-launch:2] [--agents 1,4,8]

LOCK:SHARE serves that share of lockfiles/LOCK.lock.yaml on both. Both run at --speed 1 (the bed's
frontend time does not scale with --speed). A point whose client could not keep up (bench run's
"client saturated" or late timestamps) is printed as invalid, not as a number. Where the bed cannot
follow a lock (its mocker's 1 ms decode floor), what it says (GET /stackpin/sim) is printed under the
table. Needs the bed's environment (make dynamo-env).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACKPIN = [sys.executable, "-m", "stackpin"]


def _serve(lock: Path, share: int, backend: str, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([*STACKPIN, "sim", "serve", str(lock), "--share", str(share), "--port", str(port),
                             "--backend", backend], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stackpin/sim", timeout=2).read()
            return proc
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"{backend} bed for {lock.name} exited: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.3)
    proc.terminate()
    sys.exit(f"{backend} bed for {lock.name} did not start")


def _bench(lock: Path, port: int, trace: Path, agents: str, out: Path, delay_scale: str) -> dict:
    done = subprocess.run([*STACKPIN, "bench", "run", "--endpoint", f"http://127.0.0.1:{port}", "--trace", str(trace),
                           "--lock", str(lock), "--agents", agents, "--delay-scale", delay_scale,
                           "--cache-salt", "parity",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr.strip().splitlines()[-1])
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locks", default="gb300-tuned:9,gb300-launch:2,gb300-disagg-wide-ep:2")
    parser.add_argument("--agents", default="1,4,8")
    parser.add_argument("--sessions", type=int, default=16)
    # A fifth of the trace's tool delays: agents that think a little between turns, as the table in
    # docs/sim.md was measured.
    parser.add_argument("--delay-scale", default="0.2")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bed-parity-"))
    trace = work / "trace.jsonl"
    subprocess.run([*STACKPIN, "trace", "gen", "--sessions", str(args.sessions), "--seed", "7", "--param",
                    "turns.max=4", "--param", "max_context=32768", "--param", "output.median=150", "--out",
                    str(trace)], cwd=ROOT, check=True, capture_output=True)
    print(f"trace: stackpin trace gen --sessions {args.sessions} --seed 7 --param turns.max=4 "
          f"--param max_context=32768 --param output.median=150; --delay-scale {args.delay_scale}; speed 1")
    print(f"{'stack':22} {'agents':>6}  {'tok/s/agent sim':>15} {'bed':>7} {'bed/sim':>7}  "
          f"{'TTFT p50 sim':>12} {'bed':>7} {'bed/sim':>7}")
    notes: list[str] = []
    for item in args.locks.split(","):
        name, _, share = item.partition(":")
        lock = ROOT / "lockfiles" / f"{name}.lock.yaml"
        results = {}
        for backend, port in (("stackpin", 28111), ("dynamo", 28112)):
            server = _serve(lock, int(share or 1), backend, port)
            try:
                if backend == "dynamo":
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stackpin/sim", timeout=5) as answer:
                        said = json.loads(answer.read())["substitutions"]
                    notes += [f"{name}: {line}" for line in said if "floors a decode step" in line]
                results[backend] = _bench(lock, port, trace, args.agents, work / f"{name}-{backend}.json",
                                          args.delay_scale)
            finally:
                server.terminate()
                server.wait(timeout=30)
        sim, bed = results["stackpin"], results["dynamo"]
        invalid = [b for b, r in results.items() if r["client"]["saturated"]]
        for p, q in zip(sim["points"], bed["points"], strict=True):
            if invalid:
                print(f"{name + ':' + share:22} {p['agents']:>6}  invalid: the client could not keep up on "
                      f"{', '.join(invalid)} ({results[invalid[0]]['client']['note']})")
                continue
            a, b = p["agent_tps"]["mean"], q["agent_tps"]["mean"]
            t, u = p["ttft_s"]["p50"], q["ttft_s"]["p50"]
            print(f"{name + ':' + share:22} {p['agents']:>6}  {a:>15.1f} {b:>7.1f} {b / a:>7.3f}  "
                  f"{t * 1000:>10.1f}ms {u * 1000:>5.1f}ms {u / t:>7.3f}")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
