"""The simulator's cost: output tokens it streams per CPU second of its own process.

`stackpin sim serve` (gb300-tuned, speed 1000 so the simulated rack outruns one CPU core) is driven
by a minimal raw-socket asyncio client in this process (64 concurrent streams, 2,000-token answers,
1,000-token prompts); the server's CPU seconds are read from /proc/PID/stat. No alternative simulator
is installed to put beside it (Dynamo's mocker needs the dynamo wheels); the row stands alone.

Run from the repository root: `python bench/bench_sim.py [REPEATS]` (default 3).
Aim: at least 100,000 streamed tokens per server CPU second, so that tests and the demo stream
hundreds of thousands of simulated tokens in seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.process import free_port, stop  # noqa: E402

STREAMS, TOKENS, PROMPT = 64, 2000, 1000
AIM = 100_000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one(port: int, i: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    words = " ".join(f"p{i}_{j}" for j in range(PROMPT))
    body = json.dumps({"messages": [{"role": "user", "content": words}], "max_tokens": TOKENS, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    data = await reader.read()
    writer.close()
    usage = data.rfind(b'"completion_tokens": ')
    return int(data[usage + 21:data.index(b",", usage)])


async def drive(port: int) -> int:
    return sum(await asyncio.gather(*(one(port, i) for i in range(STREAMS))))


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "stackpin", "sim", "serve", "lockfiles/gb300-tuned.lock.yaml",
                             "--port", str(port), "--speed", "1000"], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                asyncio.run(asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        rates, walls = [], []
        for _ in range(repeats):
            before, start = cpu_seconds(proc.pid), time.perf_counter()
            tokens = asyncio.run(drive(port))
            wall, cpu = time.perf_counter() - start, cpu_seconds(proc.pid) - before
            assert tokens == STREAMS * TOKENS, tokens
            rates.append(tokens / cpu)
            walls.append(tokens / wall)
    finally:
        stop(proc)
    rate = statistics.median(rates)
    print(f"{STREAMS} streams x {TOKENS} tokens, median of {repeats}: {rate:,.0f} tokens per server CPU second, "
          f"{statistics.median(walls):,.0f} tokens per wall second")
    print(f"aim: >= {AIM:,} streamed tokens per server CPU second: {'met' if rate >= AIM else 'NOT met'}")


if __name__ == "__main__":
    main()
