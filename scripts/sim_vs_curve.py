"""Hold a bench result measured against `stackpin sim serve` to the analytic curve, point by point.

    .venv/bin/python scripts/sim_vs_curve.py RESULT.json LOCK TRACE DURATION [--share N]

For each point: the client's figures; the same inside the steady window [DURATION/4, DURATION] of the
point (tokens spread evenly between a request's first token and its end, so the drain after
`--duration` and the cold start are left out); the batch the window held (decoding sequences per
decode engine = throughput / per-agent speed, Little's law); and the curve's per-agent tok/s at that
batch (`stackpin.sim.curve.agent_tps_at`). docs/sim.md shows a run.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from stackpin.bench.result import Point, read_result
from stackpin.bench.traceio import read_trace
from stackpin.sim.curve import agent_tps_at, curve, workload_of
from stackpin.sim.stack import load_stack, share_of


def window(point: Point, duration: float, skip: float = 0.25) -> tuple[float, float]:
    """(output tok/s, mean per-agent tok/s) inside [skip x duration, duration] of the point."""
    t0 = min(r.start_s for r in point.request_log)
    lo, hi = t0 + skip * duration, t0 + duration
    total = 0.0
    tokens: dict[int, float] = defaultdict(float)
    seconds: dict[int, float] = defaultdict(float)
    for r in point.request_log:
        if r.error or r.ttft_s is None or r.end_s is None:
            continue
        first, end = r.start_s + r.ttft_s, r.end_s
        total += 1 if lo <= first <= hi else 0
        if r.output_tokens > 1 and end > first:
            overlap = max(0.0, min(end, hi) - max(first, lo))
            share = (r.output_tokens - 1) * overlap / (end - first)
            total += share
            tokens[r.agent] += share
            seconds[r.agent] += overlap
    rates = [tokens[a] / seconds[a] for a in seconds if seconds[a] > 0]
    return total / (hi - lo), sum(rates) / len(rates) if rates else 0.0


def main(argv: list[str]) -> None:
    result_path, lock, trace, duration = Path(argv[0]), Path(argv[1]), Path(argv[2]), float(argv[3])
    share = int(argv[argv.index("--share") + 1]) if "--share" in argv else 1
    stack = share_of(load_stack(lock), share)
    points = curve(stack, workload_of(read_trace(trace)))
    result = read_result(result_path)
    gpus = result.stack.gpus
    print("agents  tok/s/agent  tok/s/GPU  | window: tok/s/agent  tok/s/GPU  batch  curve tok/s/agent  off")
    for p in result.points:
        tps, agent = window(p, duration)
        batch = tps / (stack.decode.engines * agent) if agent else 0.0
        expected = agent_tps_at(points, batch) if batch else 0.0
        off = f"{agent / expected - 1:+.1%}" if expected else "-"
        print(f"{p.agents:>6}  {p.agent_tps.mean:>11.1f}  {p.output_tps_per_gpu:>9.1f}  | {agent:>19.1f}  "
              f"{tps / gpus:>9.1f}  {batch:>5.1f}  {expected:>17.1f}  {off}")


if __name__ == "__main__":
    main(sys.argv[1:])
