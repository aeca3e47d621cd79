"""Hold a bench result measured against `stackpin sim serve` to the analytic curve, point by point.

    .venv/bin/python scripts/sim_vs_curve.py RESULT.json LOCK TRACE DURATION [--share N]

For each point: the client's figures; the same inside the steady window of the point (stackpin/bench/window.py: the
cold start and the drain after `--duration` left out); the batch the window held (decoding sequences per
decode engine = throughput / per-agent speed, Little's law); and the curve's per-agent tok/s at that
batch (`stackpin.sim.curve.agent_tps_at`). docs/sim.md shows a run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stackpin.bench.resultfile import read_result
from stackpin.bench.traceio import read_trace
from stackpin.bench.window import steady
from stackpin.sim.curve import agent_tps_at, curve, workload_of
from stackpin.sim.stack import load_stack, share_of


def main(argv: list[str]) -> None:
    result_path, lock, trace, duration = Path(argv[0]), Path(argv[1]), Path(argv[2]), float(argv[3])
    share = int(argv[argv.index("--share") + 1]) if "--share" in argv else 1
    stack = share_of(load_stack(lock), share)
    points = curve(stack, workload_of(read_trace(trace)))
    result = read_result(result_path)
    gpus = result.stack.gpus
    print("agents  tok/s/agent  tok/s/GPU  | window: tok/s/agent  tok/s/GPU  batch  curve tok/s/agent  off")
    for p in result.points:
        window = steady(p, duration)
        tps, agent = window.output_tps, window.agent_tps
        batch = tps / (stack.decode.engines * agent) if agent else 0.0
        expected = agent_tps_at(points, batch) if batch else 0.0
        off = f"{agent / expected - 1:+.1%}" if expected else "-"
        print(f"{p.agents:>6}  {p.agent_tps.mean:>11.1f}  {p.output_tps_per_gpu:>9.1f}  | {agent:>19.1f}  "
              f"{tps / gpus:>9.1f}  {batch:>5.1f}  {expected:>17.1f}  {off}")


if __name__ == "__main__":
    main(sys.argv[1:])
