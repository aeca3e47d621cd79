"""The steady-state curve of a stack and the calibration figures, straight from the step model.

At a concurrency of b running sequences per decode engine, every engine repeats the same step: b
sequences decode over the workload's mean context, and each answer that ends brings the next turn's
uncached prompt tokens to prefill (chunked into the colocated engine's steps; on a disaggregated
stack, on the prefill pool, whose capacity then bounds throughput). Per-agent tok/s is the tokens a
sequence gets per second while it generates; throughput per GPU counts every GPU the stack holds. The curve
ends where the decode engines' KV cache is full (sim/kvcache.py), if before max-num-seqs. An agent is
counted through its whole turn, as AgentPerf counts it: while its prompt is prefilled, while it decodes and
while its tools run (the workload's `tool_s`), so a point with b sequences decoding per engine serves
b x (TTFT + decode + tool time) / decode agents per engine (Little's law).
The server (engine.py) runs the same step model event by event; this is its closed form, fast enough
for `stackpin plan` and the calibration test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.bench.trace import TraceTurn
from stackpin.profile.topology import Role
from stackpin.sim.models import step_model
from stackpin.sim.roofline import accepted_tokens, load_params
from stackpin.sim.stack import SimStack, load_stack

# The calibration figures are of the shipped locks, read from the lock directory the caller names
# (`stackpin sim figures --lockdir`; relative to the working directory, as every command's --lockdir),
# never from stackpin's own checkout: an installed stackpin has none. Validation rows name profiles
# relative to the project root, the lock directory's parent (as `stackpin lock` names local sources).
LOCKDIR = Path("lockfiles")
CALIBRATION_FILE = Path(__file__).with_name("calibration.yaml")


@dataclass(frozen=True)
class Workload:
    """What the curve needs of a trace: mean context while decoding, uncached prompt tokens and
    output tokens per turn, and the mean tool time before a turn (seconds; AgentPerf simulates it between
    an agent's turns, stackpin's traces carry it as each turn's `delay`)."""

    context: float
    prefill: float
    output: float
    tool_s: float = 0.0


def workload_of(turns: list[TraceTurn]) -> Workload:
    """A trace's mean context while decoding, uncached prompt tokens (what an unbounded prefix cache
    would miss) and output tokens per turn."""
    from stackpin.bench.traceio import prompt_lengths
    from stackpin.bench.tracestats import reuse_ratio

    lengths = prompt_lengths(turns)
    output = sum(t.output_length for t in turns) / len(turns)
    mean_isl = sum(lengths) / len(lengths)
    # A session's first turn has no tool time before it (delay 0): the mean over every turn is the tool time
    # an agent spends per turn when it replays sessions back to back (bench/tracegen.py, agentperf.yaml).
    tool_s = sum(t.delay for t in turns) / len(turns) / 1000
    return Workload(context=mean_isl + output / 2, prefill=mean_isl * (1 - reuse_ratio(turns)), output=output,
                    tool_s=tool_s)


@cache
def default_workload() -> Workload:
    """The AgentPerf-shaped default trace (`stackpin trace gen` defaults, 200 sessions, seed 0)."""
    from stackpin.bench.tracegen import generate

    return workload_of(generate(200, 0))


@dataclass(frozen=True)
class CurvePoint:
    batch: int  # running sequences per decode engine
    agents: int  # agents served, each counted through its TTFT, decode and tool time (AgentPerf's count)
    agent_tps: float
    output_tps_per_gpu: float
    k: int  # speculative tokens verified per step
    running: int = 0  # sequences decoding at once across the stack: batch x decode engines
    ttft_s: float = 0.0  # the turn's prefill as this point's steps time it (sim/ttft.py has the queueing)


def curve(stack: SimStack, workload: Workload | None = None, params: dict[str, Any] | None = None,
          model: str = "roofline", acceptance: tuple[float, ...] | None = None) -> list[CurvePoint]:
    """One point per batch size 1..max-num-seqs, or fewer where the KV cache fills first. `acceptance`:
    measured per-position draft acceptance (a bench result's), replacing the model's."""
    from stackpin.sim.kvcache import max_sequences

    workload = workload or default_workload()
    params = params or load_params()
    decode_pool = stack.decode
    dec = step_model(model, stack, decode_pool, params, acceptance)
    points = []
    prefill_capacity = math.inf  # prompt tokens/s the prefill pool can take (disaggregated)
    prefill_s = 0.0  # a turn's prefill on the prefill pool, with the KV transfer (disaggregated)
    if not stack.colocated:
        pre_pool = stack.pool(Role.prefill)
        pre = step_model(model, stack, pre_pool, params, acceptance)
        chunk = pre_pool.max_batched_tokens
        prefill_capacity = pre_pool.engines * chunk / pre.step_time(0, 0, int(workload.context), chunk)
        prefill_s = workload.prefill / chunk * pre.step_time(0, 0, int(workload.context), chunk) + \
            dec.kv_transfer_time(int(workload.context))
    top = min(decode_pool.max_num_seqs, max(max_sequences(stack, decode_pool, workload.context), 1))
    ranks = decode_pool.engines // decode_pool.replicas  # DP ranks of one replica, which step together
    for b in range(1, top + 1):
        kv = int(b * workload.context)
        k = dec.best_k(b, kv)
        a = accepted_tokens(dec.alpha, k)
        step = dec.step_time(b, k, kv)
        ttft = prefill_s
        if stack.colocated:
            # Turns end at b*a/output per step; each adds its uncached prompt in budget-sized chunks.
            budget = max(decode_pool.max_batched_tokens - b * (1 + k), 1)
            chunks = max(1, math.ceil(workload.prefill / budget))
            extra = dec.step_time(b, k, kv, int(workload.prefill / chunks)) - step
            rank = (b * a / workload.output) * chunks  # prefill chunks one engine's turns bring a step
            step += prefill_stall(rank if b > 1 else 0.0, rank, ranks) * extra
            ttft = chunks * (step + extra)
        agent_tps = a / step
        total = decode_pool.engines * b * agent_tps
        total = min(total, prefill_capacity * workload.output / workload.prefill)
        agent_tps = total / (decode_pool.engines * b)
        decode_s = workload.output / agent_tps
        running = b * decode_pool.engines
        agents = round(running * (ttft + decode_s + workload.tool_s) / decode_s)
        points.append(CurvePoint(b, agents, agent_tps, total / stack.gpus, k, running, ttft))
    return points


def prefill_stall(own: float, rank: float, ranks: int) -> float:
    """Prefill chunks a decode step of one engine waits for, on average: `own`, those its own turns bring (the
    curve's first point charges none: one agent's prefill is its TTFT), and on a replica of `ranks` data-parallel
    ranks the others'. vLLM steps a MoE model's DP ranks together (every rank's forward meets in the expert
    all-to-all; an idle rank runs a dummy batch), so a step takes its slowest rank's time: a step in which any
    other rank prefills a chunk (each with probability `rank`, independently) is a prefill step for every rank.
    Dynamo's mocker does the same (its attention-DP ranks pass a group barrier each step): docs/sim.md."""
    others = 1 - (1 - min(rank, 1.0)) ** (ranks - 1)
    return own + (1 - min(own, 1.0)) * others


def single_agent_tps(stack: SimStack, params: dict[str, Any] | None = None, model: str = "roofline",
                     workload: Workload | None = None, acceptance: tuple[float, ...] | None = None) -> float:
    """One agent alone: its tokens per second while it generates (its prefill is its TTFT)."""
    params = params or load_params()
    dec = step_model(model, stack, stack.decode, params, acceptance)
    kv = int((workload or default_workload()).context)
    k = dec.best_k(1, kv)
    return accepted_tokens(dec.alpha, k) / dec.step_time(1, k, kv)


def prompt_ttft(stack: SimStack, prompt: int, params: dict[str, Any] | None = None, model: str = "roofline") -> float:
    """Seconds to prefill one `prompt`-token request alone on an idle engine (no prefix cache): its chunks of
    max-num-batched-tokens, each attending to the ones before it, then one decode step for the first token
    (disaggregated: on the prefill pool, then the KV transfer)."""
    params = params or load_params()
    pool = stack.decode if stack.colocated else stack.pool(Role.prefill)
    pre = step_model(model, stack, pool, params)
    chunk = max(pool.max_batched_tokens, 1)
    total = done = 0
    seconds = 0.0
    while done < prompt:
        total = min(chunk, prompt - done)
        seconds += pre.step_time(0, 0, done, total)
        done += total
    dec = step_model(model, stack, stack.decode, params)
    if not stack.colocated:
        seconds += dec.kv_transfer_time(prompt)
    return seconds + dec.step_time(1, 0, prompt)


def throughput_at(points: list[CurvePoint], agent_tps: float) -> float:
    """Throughput per GPU at the highest concurrency where each agent still gets `agent_tps`,
    interpolated between the two batch sizes around the crossing; 0 when even one agent is slower."""
    best = 0.0
    for lo, hi in zip(points, points[1:], strict=False):
        if lo.agent_tps >= agent_tps > hi.agent_tps:
            frac = (lo.agent_tps - agent_tps) / (lo.agent_tps - hi.agent_tps)
            best = max(best, lo.output_tps_per_gpu + frac * (hi.output_tps_per_gpu - lo.output_tps_per_gpu))
    best = max([best] + [p.output_tps_per_gpu for p in points if p.agent_tps >= agent_tps])
    return best


def agent_tps_at(points: list[CurvePoint], batch: float) -> float:
    """Per-agent tok/s at `batch` sequences decoding per decode engine (a run's time-average: its
    throughput / (decode engines x per-agent tok/s), by Little's law), interpolated between the two
    batch sizes around it. The way to hold a measured run to the curve: per-agent speed is flat over
    the batches one CUDA graph size covers, so reading throughput at a measured speed
    (`throughput_at`) can jump a whole graph size for a few tok/s, while speed at a batch cannot."""
    batch = min(max(batch, points[0].batch), points[-1].batch)
    lo = points[min(int(batch), len(points)) - 1]
    hi = points[min(int(batch), len(points) - 1)]
    return lo.agent_tps + (batch - lo.batch) * (hi.agent_tps - lo.agent_tps)


@dataclass(frozen=True)
class Figure:
    name: str
    published: float
    simulated: float
    tolerance: float  # relative

    @property
    def within(self) -> bool:
        return abs(self.simulated - self.published) <= self.tolerance * self.published


@cache
def _stack(name: str, lockdir: Path) -> SimStack:
    from stackpin.errors import StackpinError

    path = lockdir / f"{name}.lock.yaml"
    if not path.is_file():
        raise StackpinError(f"the calibration figures are of the shipped lock {name}: no {path}",
                            "run in the stackpin checkout, or name its lockfiles/ with --lockdir")
    return load_stack(path)


def figures(params: dict[str, Any] | None = None, lockdir: Path = LOCKDIR) -> list[Figure]:
    """The published figures (calibration.yaml) next to what the step model gives for the shipped locks
    in `lockdir`."""
    spec = calibration()
    return [Figure(item["name"], float(item["published"]), round(value, 3), float(spec["tolerance"]))
            for item, value in zip(spec["figures"], _values("roofline", params, lockdir=lockdir), strict=True)]


@dataclass(frozen=True)
class ModelFigure:
    """One calibration figure as another step model gives it, or why that model cannot."""

    name: str
    published: float
    value: float | None
    reason: str = ""


def model_figures(model: str, params: dict[str, Any] | None = None, lockdir: Path = LOCKDIR) -> list[ModelFigure]:
    """The calibration figures under `model` (not fitted to them): the value, or the refusal of a stack
    the model cannot stand for."""
    from stackpin.errors import StackpinError

    spec = calibration()
    out = []
    for item in spec["figures"]:
        try:
            value = _values(model, params, [item], lockdir)[0]
        except StackpinError as exc:
            out.append(ModelFigure(item["name"], float(item["published"]), None, exc.message))
            continue
        out.append(ModelFigure(item["name"], float(item["published"]), round(value, 3)))
    return out


@dataclass(frozen=True)
class Validation:
    """A public figure the fit does not see (held out), beside what the model gives for its stack."""

    name: str
    published: float
    simulated: float
    unmodelled: tuple[str, ...]  # what the stack does that the model does not time (SimStack.unmodelled)
    source: str = ""
    lacks: str = ""  # what the model lacks that the figure shows, where calibration.yaml says it

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1


def _points_by_agents(points: list[CurvePoint], agents: float) -> float:
    """The stack's output tok/s per GPU at `agents` agents (CurvePoint.agents, tool time counted), interpolated."""
    for lo, hi in zip(points, points[1:], strict=False):
        if lo.agents <= agents <= hi.agents and hi.agents > lo.agents:
            frac = (agents - lo.agents) / (hi.agents - lo.agents)
            return lo.output_tps_per_gpu + frac * (hi.output_tps_per_gpu - lo.output_tps_per_gpu)
    return points[0].output_tps_per_gpu if agents < points[0].agents else points[-1].output_tps_per_gpu


def validation_value(stack: SimStack, term: dict[str, Any], workload: Workload | None,
                     params: dict[str, Any] | None = None) -> float:
    """One held-out figure's metric on the model: single_agent_tps; max_tps (the stack's output tok/s at its
    largest batch); agent_tps_at_running (per-agent tok/s with `running` sequences decoding across the stack);
    tps_at_agents (the stack's output tok/s with `agents` agents, each counted through TTFT and tool time);
    prompt_ttft (seconds to first token of one `prompt`-token request on an idle stack)."""
    metric = term["metric"]
    if metric == "single_agent_tps":
        return single_agent_tps(stack, params, workload=workload)
    if metric == "prompt_ttft":
        return prompt_ttft(stack, int(term["prompt"]), params)
    points = curve(stack, workload, params)
    if metric == "max_tps":
        return max(p.output_tps_per_gpu for p in points) * stack.gpus
    if metric == "agent_tps_at_running":
        return agent_tps_at(points, float(term["running"]) / stack.decode.engines)
    if metric == "tps_at_agents":
        return _points_by_agents(points, float(term["agents"])) * stack.gpus
    raise ValueError(f"calibration.yaml: unknown metric {metric}")


def validation(params: dict[str, Any] | None = None, lockdir: Path = LOCKDIR) -> list[Validation]:
    """calibration.yaml's validation rows: each figure beside the model's value for its stack (a profile
    path relative to the project root, `lockdir`'s parent)."""
    from stackpin.profile.loader import load_profile
    from stackpin.sim.stack import profile_stack

    out = []
    for item in calibration().get("validation") or []:
        term = item["of"]
        stack = profile_stack(load_profile(lockdir.resolve().parent / item["profile"]).profile, term["stack"])
        workload = Workload(**item["workload"]) if "workload" in item else None
        value = validation_value(stack, term, workload, params)
        out.append(Validation(item["name"], float(item["published"]), round(value, 3), stack.unmodelled,
                              str(item.get("source", "")), " ".join(str(item.get("lacks", "")).split())))
    return out


@cache
def calibration() -> dict[str, Any]:
    """calibration.yaml: the published figures, how each is computed from the shipped locks, the
    tolerance (read once; callers do not change it)."""
    from stackpin.yamlio import load_data

    spec: dict[str, Any] = load_data(CALIBRATION_FILE.read_text(encoding="utf-8"))
    return spec


def _values(model: str, params: dict[str, Any] | None, items: list[dict[str, Any]] | None = None,
            lockdir: Path = LOCKDIR) -> list[float]:
    cache_curves: dict[str, list[CurvePoint]] = {}

    def value(term: dict[str, Any]) -> float:
        stack = _stack(term["stack"], lockdir.resolve())
        if term["metric"] == "single_agent_tps":
            return single_agent_tps(stack, params, model)
        if term["stack"] not in cache_curves:
            cache_curves[term["stack"]] = curve(stack, params=params, model=model)
        return throughput_at(cache_curves[term["stack"]], float(term["agent_tps"]))

    out = []
    for item in items if items is not None else calibration()["figures"]:
        simulated = value(item["of"])
        if "per" in item:
            base = value(item["per"])
            simulated = simulated / base if base else 0.0
        out.append(simulated)
    return out
