"""The Dynamo bed's frontend against stackpin's client, TTFT by TTFT: one agent replays one session of
fourteen turns with the turns sent back to back (--delay-scale 0) and a tool delay apart (0.2 of the
trace's, every delay at least 100 ms), and each run's mean client TTFT is printed beside the mean of
the frontend's own TTFT histogram (`dynamo_frontend_time_to_first_token_seconds`, from its /metrics)
over the same requests. For docs/sim.md.

    .venv/bin/python scripts/bed_frontend_ttft.py [--lock gb300-tuned --share 9]

Needs the bed's environment (make dynamo-env).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bed_parity import STACKPIN, _serve  # noqa: E402 - the sibling script's server start

TTFT = "dynamo_frontend_time_to_first_token_seconds"


def _frontend(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stackpin/sim", timeout=5) as response:
        return str(json.loads(response.read())["serving"])


def _ttft(frontend: str) -> tuple[float, float]:
    """(sum, count) of the frontend's TTFT histogram so far."""
    with urllib.request.urlopen(frontend + "/metrics", timeout=5) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith((TTFT + "_sum", TTFT + "_count")):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0]] = float(value)
    return values.get(TTFT + "_sum", 0.0), values.get(TTFT + "_count", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", default="gb300-tuned")
    parser.add_argument("--share", type=int, default=9)
    args = parser.parse_args()
    lock = ROOT / "lockfiles" / f"{args.lock}.lock.yaml"
    work = Path(tempfile.mkdtemp(prefix="bed-ttft-"))
    trace = work / "trace.jsonl"
    made = ["trace", "gen", "--sessions", "1", "--seed", "3", "--param", "turns.min=14", "--param", "turns.max=14",
            "--param", "delay_ms.min=500", "--param", "max_context=30000", "--param", "output.median=60"]
    subprocess.run([*STACKPIN, *made, "--out", str(trace)], cwd=ROOT, check=True, capture_output=True)
    print(f"stack {args.lock}, share {args.share}, one agent; trace: stackpin {' '.join(made)}")
    print(f"{'turns sent':<28} {'requests':>8} {'client TTFT':>11} {'frontend TTFT':>13} {'difference':>10}")
    port = 28113
    server = _serve(lock, args.share, "dynamo", port)
    try:
        frontend = _frontend(port)
        for scale, words in (("0", "back to back"), ("0.2", "a tool delay apart (x0.2)")):
            before = _ttft(frontend)
            out = work / f"r{scale}.json"
            done = subprocess.run([*STACKPIN, "bench", "run", "--endpoint", f"http://127.0.0.1:{port}", "--trace",
                                   str(trace), "--lock", str(lock), "--agents", "1", "--slo", "none", "--delay-scale",
                                   scale, "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(done.stderr.strip().splitlines()[-1])
            after = _ttft(frontend)
            requests = [r for p in json.loads(out.read_text())["points"] for r in p["request_log"]]
            client = sum(r["ttft_s"] for r in requests) / len(requests)
            served = (after[0] - before[0]) / (after[1] - before[1])
            print(f"{words:<28} {len(requests):>8} {client * 1000:>9.1f}ms {served * 1000:>11.1f}ms "
                  f"{(client - served) * 1000:>+8.1f}ms")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
