"""python -m stackpin.demo.bench OUTDIR: the demo's measuring half, as a user would run it.

Generates a small AgentPerf-shaped trace, serves each shipped stack on the simulator (`stackpin sim
serve`, a test bed, not hardware), replays the trace against it with `stackpin bench run`, then
compares launch and tuned, plots the curves, writes the HTML report of the GB300 deployment's
history and plans 10,000 agents. Every step is the stackpin command line in a subprocess, printed
before it runs. Last, the published ratios (stackpin/sim/calibration.yaml) next to what the step
model gives (`stackpin sim figures`) and what the client measured against the served simulator.

Each stack is served as a share of its rack (`--share`: every pool keeps that part of its replicas,
so per-GPU and per-agent figures hold) and in faster-than-real simulated time (`--speed`), so two
CPU cores can drive it; the results say both.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"
SLO = "tps=80,ttft=10s"
PLAN_AGENTS = 10_000
# The timestamp precision the demo's figures need, stated to bench run (--lag-limit): they read each
# agent's speed over answers of a median 141 tokens at 80 tok/s or more (1.8 s and longer) and TTFT
# against 10 s, so a timestamp 50 ms late moves either by under 3%. A point whose client ran later than
# that is invalid, left out of every figure. (bench run's own default, 10 ms, is for a real endpoint
# at speed 1; at --speed X every wall millisecond of lag is X of the stack's.)
LAG_LIMIT = "50ms"


@dataclass(frozen=True)
class DemoStack:
    name: str  # the lock's metadata.name, as calibration.yaml names stacks
    share: int  # serve 1/share of the rack
    speed: float  # simulated seconds per wall second
    agents: str  # agent counts to measure, around where the stack crosses the SLO speed
    revision: int | None = None  # the demo history's revision of this stack (for the report)
    workers: int = 1  # client processes: the launch stack's 192 agents need two to keep up


STACKS = (
    DemoStack("gb300-launch", share=2, speed=3, agents="1,64,128,192", revision=1, workers=2),
    DemoStack("gb300-tuned", share=18, speed=4, agents="1,8,16,32,64,96,128", revision=2),
    DemoStack("vera-rubin-tuned", share=18, speed=4, agents="1,8,16,32,64,96,128"),
)


def _run(args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    print(f"$ stackpin {' '.join(args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "stackpin", *args], text=True, stdout=subprocess.PIPE)
    sys.stdout.write(done.stdout)
    if check and done.returncode != 0:
        raise SystemExit(f"stackpin {args[0]} failed (exit {done.returncode})")
    return done


class _Served:
    """`stackpin sim serve --port 0` in a subprocess; the port is read from its announcement."""

    def __init__(self, stack: DemoStack) -> None:
        self.args = ["sim", "serve", f"lockfiles/{stack.name}.lock.yaml", "--port", "0",
                     "--share", str(stack.share), "--speed", f"{stack.speed:g}"]

    def __enter__(self) -> str:
        print(f"$ stackpin {' '.join(self.args)} &", flush=True)
        self.process = subprocess.Popen([sys.executable, "-m", "stackpin", *self.args], text=True,
                                        stderr=subprocess.PIPE)
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        found = re.search(r"on (http://\S+)", line)
        if not found:
            self.process.kill()
            raise SystemExit(f"stackpin sim serve did not start: {line.strip() or 'no output'}")
        # Keep reading what the server says after that, so a full pipe never blocks it.
        threading.Thread(target=self.process.stderr.read, daemon=True).start()
        return found.group(1)

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _measured(results: dict[str, Path]) -> dict[str, str]:
    """What the bench results give for each calibration figure: a ratio, `>=`/`<=` where a curve is
    still met at its largest measured count (a bound, never extrapolated), `-` where it is unmet."""
    from stackpin.bench.binding import parse_slo
    from stackpin.bench.result import Slo, read_result
    from stackpin.plan.curve import Bound, curve_of, operating_point
    from stackpin.sim.curve import calibration

    loaded = {name: read_result(path) for name, path in results.items()}
    slo = parse_slo(SLO)

    def value(term: dict[str, Any]) -> tuple[float, Bound] | None:
        result = loaded.get(term["stack"])
        if result is None:
            return None
        if term["metric"] == "single_agent_tps":
            return (result.score.single_agent_tps, Bound.within) if result.score else None
        # Throughput per GPU where the slowest agent holds the speed and TTFT the demo's limit,
        # interpolated on the measured curve (plan's operating point).
        target = Slo(tps=float(term["agent_tps"]), ttft_s=slo.ttft_s)
        op = operating_point(curve_of(result, target.percentile), target, result.stack.gpus)
        return None if op.bound is Bound.unmet else (op.tps_per_gpu, op.bound)

    out: dict[str, str] = {}
    for item in calibration()["figures"]:
        of = value(item["of"])
        per = value(item["per"]) if "per" in item else (1.0, Bound.within)
        if of is None or per is None or not per[0]:
            continue
        # A lower bound over an exact value is a lower bound; over a lower bound it is unknown.
        mark = {(Bound.within, Bound.within): "", (Bound.at_least, Bound.within): ">=",
                (Bound.within, Bound.at_least): "<="}.get((of[1], per[1]))
        if mark is not None:
            out[item["name"]] = f"{mark}{of[0] / per[0]:.3f}"
    return out


def _figures_table(results: dict[str, Path]) -> None:
    from stackpin.sim.curve import figures

    measured = _measured(results)
    print(f"\n{'figure':<70} {'published':>9} {'model':>9} {'measured':>9}")
    for figure in figures():
        print(f"{figure.name:<70} {figure.published:9g} {figure.simulated:9.3f} {measured.get(figure.name, '-'):>9}")
    print(f"model: the step model's steady state (stackpin sim figures). measured: stackpin bench run against "
          f"stackpin sim serve (simulated, not hardware), per GPU where the slowest agent holds the speed with "
          f"TTFT within the demo's {SLO}; >= / <=: a curve still met at its largest measured count; -: not "
          f"reached")


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ".demo/bench")
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.jsonl"
    # Answers capped at 4,096 tokens (the published p95 is about 2K): a point's in-flight answers finish
    # after its duration, and an 11K-token one would stretch the demo by minutes.
    _run(["trace", "gen", "--sessions", "40", "--seed", "1", "--param", "output.max=4096", "--out", str(trace)])
    _run(["trace", "stats", str(trace)])
    results: dict[str, Path] = {}
    for stack in STACKS:
        path = out / f"{stack.name}.json"
        with _Served(stack) as url:
            _run(["bench", "run", "--endpoint", url, "--trace", str(trace), "--lock",
                  f"lockfiles/{stack.name}.lock.yaml", "--agents", stack.agents, "--slo", SLO,
                  "--duration", "40", "--delay-scale", "0", "--cache-salt", stack.name, "--workers", str(stack.workers),
                  "--lag-limit", LAG_LIMIT, "--out", str(path)])
        results[stack.name] = path
    launch, tuned, rubin = (str(results[s.name]) for s in STACKS)
    _run(["bench", "compare", launch, tuned], check=False)  # exit 1 would mean a regression: shown, not fatal
    _run(["bench", "plot", launch, tuned, rubin, "--slo", SLO, "--out", str(out / "curve.png")])
    _run(["report", DEPLOYMENT, "--out", str(out / "report.html"),
          *[arg for s in STACKS if s.revision for arg in ("--result", f"{s.revision}={results[s.name]}")]])
    _run(["plan", "--agents", str(PLAN_AGENTS), "--slo", SLO, launch, rubin, "--mature", tuned,
          "--chart", str(out / "plan.png")])
    _figures_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
