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
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.bench.window import SKIP
from stackpin.children import end_groups, spawn

DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"
SLO = "tps=80,ttft=10s"
PLAN_AGENTS = 10_000
# The timestamp precision the demo's figures need, stated to bench run (--lag-limit): they read each
# agent's speed over answers of a median 141 tokens at 80 tok/s or more (1.8 s and longer) and TTFT
# against 10 s, so a timestamp 50 ms late moves either by under 3%. A point whose client ran later than
# that is invalid, left out of every figure. (bench run's own default, 10 ms, is for a real endpoint
# at speed 1; at --speed X every wall millisecond of lag is X of the stack's.)
LAG_LIMIT = "50ms"
DURATION_S = 40.0  # per point, in the stack's time: no new turn starts after it
# The SLO search stops when the count that held and the one that did not are within 10% of each other:
# the figures read the curve where the speed crosses, so the last few agents of a bisection add minutes,
# not precision.
SEARCH_RESOLUTION = "0.1"


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
    DemoStack("gb300-tuned", share=18, speed=4, agents="1,8,16,48,96", revision=2),
    DemoStack("vera-rubin-tuned", share=18, speed=4, agents="1,16,32,64,128"),
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
        self.process = spawn([sys.executable, "-m", "stackpin", *self.args], text=True, stderr=subprocess.PIPE)
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        found = re.search(r"on (http://\S+)", line)
        if not found:
            end_groups([self.process])
            raise SystemExit(f"stackpin sim serve did not start: {line.strip() or 'no output'}")
        # Keep reading what the server says after that, so a full pipe never blocks it.
        threading.Thread(target=self.process.stderr.read, daemon=True).start()
        return found.group(1)

    def __exit__(self, *_: object) -> None:
        end_groups([self.process])


def _terms(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [item["of"], *([item["per"]] if "per" in item else [])]


@cache
def _served(name: str) -> Any:
    """The served share of a demo stack (read once: every figure asks for it)."""
    from stackpin.sim.stack import load_stack, share_of

    return share_of(load_stack(Path(f"lockfiles/{name}.lock.yaml")), next(s.share for s in STACKS if s.name == name))


def cap(name: str) -> int:
    """The most sequences the served share of a demo stack decodes at once."""
    decode = _served(name).decode
    return int(decode.engines * decode.max_num_seqs)


def _model_here(trace: Path) -> dict[str, float]:
    """Each calibration figure from the step model on the demo's own trace and served shares: the model
    figure the measured one is held to (`stackpin sim figures` uses the default workload and whole
    stacks)."""
    from stackpin.bench.traceio import read_trace
    from stackpin.sim.curve import calibration, curve, throughput_at, workload_of

    workload = workload_of(read_trace(trace))
    curves = {s.name: curve(_served(s.name), workload) for s in STACKS}

    def value(term: dict[str, Any]) -> float:
        points = curves[term["stack"]]
        return points[0].agent_tps if term["metric"] == "single_agent_tps" else \
            throughput_at(points, float(term["agent_tps"]))

    out = {}
    for item in calibration()["figures"]:
        if all(t["stack"] in curves for t in _terms(item)):
            values = [value(t) for t in _terms(item)]
            out[item["name"]] = values[0] / values[1] if len(values) == 2 and values[1] else values[0]
    return out


@dataclass(frozen=True)
class Measured:
    value: float
    bound: str  # "", ">=" (still held at the largest count measured) or "<="


def stack_figure(result: Any, term: dict[str, Any], cap: int, duration_s: float = DURATION_S) -> Measured | None:
    """One calibration term measured as the step model defines it: inside each point's steady window
    (stackpin/bench/window.py), per-agent speed as the mean over agents and throughput per GPU over the
    window, read where the speed crosses the figure's (interpolated between the points around it, as
    the model's curve is). Where the speed never falls to it, the model reads the largest batch its
    engines run (`cap`: decode engines x max-num-seqs); a run that went past the cap measured that (more
    agents only queue), one that did not gives a lower bound. No valid point: None."""
    from stackpin.bench.stats import measured
    from stackpin.bench.window import steady
    from stackpin.sim.curve import CurvePoint, throughput_at

    points = sorted((p for p in measured(result.points) if p.request_log), key=lambda p: p.agents)
    windows = [(p.agents, steady(p, duration_s)) for p in points]
    if term["metric"] == "single_agent_tps":
        single = next((w for agents, w in windows if agents == 1), None)
        return Measured(single.agent_tps, "") if single and single.agent_tps else None
    gpus = result.stack.gpus
    curve = [CurvePoint(a, a, w.agent_tps, w.output_tps / gpus, 0) for a, w in windows if w.agent_tps]
    if not curve:
        return None
    target = float(term["agent_tps"])
    crossed = any(c.agent_tps < target for c in curve) or curve[-1].agents > cap
    return Measured(throughput_at(curve, target), "" if crossed else ">=")


def _measured(loaded: dict[str, Any]) -> tuple[dict[str, Measured], list[str]]:
    """Each calibration figure as the runs measured it (a quotient of two bounds is unknown: left out),
    and the bounds in words."""
    from stackpin.bench.stats import measured as valid
    from stackpin.sim.curve import calibration

    out: dict[str, Measured] = {}
    words: list[str] = []
    for item in calibration()["figures"]:
        terms = _terms(item)
        if not all(t["stack"] in loaded for t in terms):
            continue
        values = [stack_figure(loaded[t["stack"]], t, cap(t["stack"])) for t in terms]
        for term, value in zip(terms, values, strict=True):
            if value is not None and value.bound:
                points = loaded[term["stack"]].points
                most = max(p.agents for p in valid(points))
                lost = [str(p.agents) for p in points if p.invalid and p.agents > most]
                why = (f"the most measured ({', '.join(lost)} were invalid: the host could not keep up)" if lost
                       else "the most this demo runs")
                words.append(f"{item['name']}: {term['stack']} still held {term['agent_tps']:g} tok/s per agent at "
                             f"{most} agents, {why} (its engines run up to {cap(term['stack'])} at once), so this "
                             "figure is a bound, not a measurement")
        if any(v is None or not v.value for v in values):
            continue
        of = values[0]
        assert of is not None
        if len(values) == 1:
            out[item["name"]] = of
            continue
        per = values[1]
        assert per is not None
        # A lower bound over an exact value is a lower bound; an exact one over a lower bound an upper one.
        mark = {("", ""): "", (">=", ""): ">=", ("", ">="): "<="}.get((of.bound, per.bound))
        if mark is not None:
            out[item["name"]] = Measured(of.value / per.value, mark)
    return out, words


def _figures_table(results: dict[str, Path], trace: Path) -> None:
    from stackpin.bench.resultfile import read_result
    from stackpin.sim.curve import figures

    measured, bounds = _measured({name: read_result(path) for name, path in results.items()})
    here = _model_here(trace)
    print(f"\n{'figure':<70} {'published':>9} {'model':>9} {'here':>9} {'measured':>9}")
    for figure in figures():
        got = measured.get(figure.name)
        shown = f"{got.bound}{got.value:.3f}" if got else "-"
        model_here = f"{here[figure.name]:.3f}" if figure.name in here else "-"
        print(f"{figure.name:<70} {figure.published:9g} {figure.simulated:9.3f} {model_here:>9} {shown:>9}")
    print("model: the step model's steady state on its default workload and whole stacks (stackpin sim figures). "
          "here: the same model on this demo's trace and served shares, what measured is held to. measured: "
          "stackpin bench run against stackpin sim serve (simulated, not hardware), read as the model reads "
          f"its curve: inside each point's steady window (the first {SKIP:.0%} of its {DURATION_S:g} s and the "
          "drain after it left out), the mean agent's speed and the window's throughput per GPU where that "
          "speed crosses the figure's (TTFT is not part of these figures); -: not reached")
    for line in bounds:
        print(f"bound: {line}")


def bench_stack(stack: DemoStack, trace: Path, out: Path, slo: str = SLO) -> Path:
    """Serve the stack on the simulator and bench it with the demo's settings; the result's path."""
    path = out / f"{stack.name}.json"
    with _Served(stack) as url:
        _run(["bench", "run", "--endpoint", url, "--trace", str(trace), "--lock", f"lockfiles/{stack.name}.lock.yaml",
              "--agents", stack.agents, "--slo", slo, "--duration", f"{DURATION_S:g}", "--delay-scale", "0",
              "--cache-salt", stack.name, "--workers", str(stack.workers), "--lag-limit", LAG_LIMIT,
              "--search-resolution", SEARCH_RESOLUTION, "--retries", "1", "--out", str(path)])
    return path


def held(stack: DemoStack, trace: Path, out: Path, slo: str = SLO) -> Path:
    """bench_stack; where a point stayed invalid after bench run's retry (a host busier than the demo's
    speed allows), the stack once more at half the speed: twice the wall time, half the lag in the stack's
    time. What is still invalid then is left out of every figure, and the table says so."""
    from stackpin.bench.resultfile import read_result

    path = bench_stack(stack, trace, out, slo)
    invalid = [p.agents for p in read_result(path).points if p.invalid]
    if invalid:
        slower = replace(stack, speed=stack.speed / 2)
        print(f"note: {stack.name}: {', '.join(map(str, invalid))} agent(s) invalid at --speed {stack.speed:g} (this "
              f"host could not keep up); measuring it again at --speed {slower.speed:g}", flush=True)
        path = bench_stack(slower, trace, out, slo)
    return path


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ".demo/bench")
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.jsonl"
    # Answers capped at 4,096 tokens (the published p95 is about 2K): a point's in-flight answers finish
    # after its duration, and an 11K-token one would stretch the demo by minutes.
    _run(["trace", "gen", "--sessions", "40", "--seed", "1", "--param", "output.max=4096", "--out", str(trace)])
    _run(["trace", "stats", str(trace)])
    results = {stack.name: held(stack, trace, out) for stack in STACKS}
    launch, tuned, rubin = (str(results[s.name]) for s in STACKS)
    _run(["bench", "compare", launch, tuned], check=False)  # exit 1 would mean a regression: shown, not fatal
    _run(["bench", "plot", launch, tuned, rubin, "--slo", SLO, "--out", str(out / "curve.png")])
    _run(["report", DEPLOYMENT, "--out", str(out / "report.html"),
          *[arg for s in STACKS if s.revision for arg in ("--result", f"{s.revision}={results[s.name]}")]])
    _run(["plan", "--agents", str(PLAN_AGENTS), "--slo", SLO, launch, rubin, "--mature", tuned,
          "--chart", str(out / "plan.png")])
    _figures_table(results, trace)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
