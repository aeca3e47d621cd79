"""BenchResults with realistic curves, built by the tests (no measured numbers are pretended).

`python -m tests.benchdata DIR` writes the three story stacks' illustrative results, bound to the
shipped lockfiles' stack digests, for the docs' examples; they say in `simulation` that they are
neither measured nor simulated.

A curve is `speed(a) = single / (1 + (a - 1) / knee)` per agent, throughput per GPU `a * speed(a) /
gpus`, TTFT rising with load; each point's agents spread +-5% around the curve so the slowest agent
is 5% under it. Request logs carry AgentPerf-shaped output lengths (median 150).
"""

from __future__ import annotations

from stackpin.bench.result import (
    BenchResult,
    ClientInfo,
    Controls,
    Dist,
    Point,
    Request,
    Simulation,
    Slo,
    StackRef,
    controls_fingerprint,
)

SLO = Slo(tps=80, ttft_s=10)
TRACE = "sha256:" + "ab" * 32
# A fixed, AgentPerf-shaped sample of output lengths: median 150, a long tail to about 2K.
OUTPUTS = (40, 60, 90, 110, 130, 150, 150, 170, 220, 300, 450, 900, 2100)
SESSION_TURNS = 4
ILLUSTRATIVE = Simulation(model="illustrative", substitutions=(
    "curve built by tests/benchdata.py, shaped after the published ratios; not measured, not simulated",))


def dist(values: list[float]) -> Dist:
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return Dist(count=len(ordered), mean=sum(ordered) / len(ordered), p50=pct(0.5), p90=pct(0.9), p99=pct(0.99),
                max=ordered[-1])


def controls(*, trace: str = TRACE, model: str = "deepseek-ai/DeepSeek-V4.1-Flash@main", precision: str = "fp4",
             slo: Slo | None = SLO, agents: tuple[int, ...] = (1, 8, 32, 128, 512, 2048)) -> Controls:
    return Controls(model=model, precision=precision, engines={"vllm": "0.31.0"}, trace_digest=trace,
                    agents=agents, slo=slo)


def point(agents: int, speed: float, ttft: float, gpus: int, with_log: bool = True) -> Point:
    """One point. With a log, its figures are computed from it as a run computes them (`build_point`), so
    the result reads back verified: up to 7 agents (one per session) spread +-5% around `speed`, TTFTs of
    0.5, 0.8 and 1x `ttft` (p90 `ttft`), and a wall time giving `agents * speed` tok/s."""
    from stackpin.bench.stats import build_point

    if not with_log:
        samples = tuple(speed * (0.95 + 0.1 * i / max(1, agents - 1)) for i in range(min(agents, 16)))
        return Point(agents=agents, duration_s=60.0, requests=agents, errors=0,
                     ttft_s=dist([ttft * 0.5, ttft * 0.8, ttft]), itl_s=dist([1 / speed]),
                     agent_tps=dist(list(samples)), agent_tps_samples=samples, output_tps=agents * speed,
                     output_tps_per_gpu=agents * speed / gpus, cache_hit_rate=0.74,
                     slo_met=speed >= 80 and ttft <= 10)
    outputs = OUTPUTS * 2
    sessions = -(-len(outputs) // SESSION_TURNS)
    spread = min(agents, sessions)
    log: list[Request] = []
    clock = 0.0
    for i, out in enumerate(outputs):
        session = i // SESSION_TURNS
        agent = session % spread
        rate = speed * (0.95 + 0.1 * agent / max(1, spread - 1))
        first = ttft * (0.5, 0.8, 1.0)[i % 3]
        log.append(Request(agent=agent, session=f"s{session}", turn=i % SESSION_TURNS, start_s=clock, ttft_s=first,
                           end_s=clock + first + out / rate, prompt_tokens=27000, cached_tokens=20000,
                           output_tokens=out, itl_mean_s=1 / rate))
        clock += 1.0
    duration = sum(outputs) / (agents * speed)
    return build_point(agents, duration, log, gpus, SLO)


def result(name: str, *, platform: str = "gb300-nvl72", gpus: int = 72, single: float = 596, knee: float = 60,
           ttft_knee: float = 900, agents: tuple[int, ...] = (1, 8, 32, 128, 512, 2048), simulated: bool = True,
           with_log: bool = True, digest: str | None = None, **control: object) -> BenchResult:
    """One stack's curve: `single` tok/s for one agent, halved at `knee` + 1 agents."""
    ctl = controls(agents=agents, **control)  # type: ignore[arg-type]
    points = tuple(point(a, single / (1 + (a - 1) / knee), 0.4 + (a / ttft_knee) ** 2 * 10, gpus, with_log)
                   for a in agents)
    digest = digest or "sha256:" + name.encode().hex().ljust(64, "0")[:64]
    return BenchResult(stack=StackRef(digest=digest, name=name,
                                      platform=platform, gpus=gpus),
                       controls=ctl, fingerprint=controls_fingerprint(ctl), endpoint="http://127.0.0.1:8000",
                       started="2026-11-30T12:00:00Z", finished="2026-11-30T12:10:00Z",
                       client=ClientInfo(workers=1, cpu_seconds=1.0, saturated=False),
                       simulation=ILLUSTRATIVE if simulated else None, points=points)


def write(result_: BenchResult, path: object) -> None:
    import json
    from pathlib import Path

    # As the contract writes a result: sorted keys, 2-space indent, trailing newline.
    text = json.dumps(result_.model_dump(mode="json"), sort_keys=True, indent=2) + "\n"
    Path(str(path)).write_text(text, encoding="utf-8")


# The three stacks of the story, shaped after the published ratios (tuned 848 vs launch 596 tok/s single
# agent and about 1.6x per GPU at 80 tok/s; Vera Rubin 1,249 tok/s and about 1.7x at 80).
def launch(digest: str | None = None) -> BenchResult:
    return result("gb300-launch", single=596, knee=60, digest=digest)


def tuned(digest: str | None = None) -> BenchResult:
    return result("gb300-tuned", single=848, knee=64.5, ttft_knee=1500, digest=digest)


def rubin(digest: str | None = None) -> BenchResult:
    return result("vera-rubin-tuned", platform="vera-rubin-nvl72", single=1249, knee=72, ttft_knee=2500, digest=digest)


def exact(name: str, rows: list[tuple[int, float, float, float]], *, platform: str = "gb300-nvl72", gpus: int = 72,
          **control: object) -> BenchResult:
    """A result whose points are given exactly: (agents, speed of every agent, TTFT p90 s, tok/s per GPU)."""
    ctl = controls(agents=tuple(a for a, *_ in rows), **control)  # type: ignore[arg-type]
    points = tuple(Point(agents=a, duration_s=60.0, requests=a, errors=0, ttft_s=dist([ttft]), itl_s=dist([1 / speed]),
                         agent_tps=dist([speed]), agent_tps_samples=(speed,) * min(a, 4), output_tps=per_gpu * gpus,
                         output_tps_per_gpu=per_gpu) for a, speed, ttft, per_gpu in rows)
    return BenchResult(stack=StackRef(digest="sha256:" + "0" * 64, name=name, platform=platform, gpus=gpus),
                       controls=ctl, fingerprint=controls_fingerprint(ctl), endpoint="http://127.0.0.1:8000",
                       started="2026-11-30T12:00:00Z", finished="2026-11-30T12:10:00Z",
                       client=ClientInfo(workers=1, cpu_seconds=1.0, saturated=False), points=points)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    from stackpin.lock.lockfile import read_lock

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    locks = Path(__file__).resolve().parent.parent / "lockfiles"
    for make, lock in ((launch, "gb300-launch"), (tuned, "gb300-tuned"), (rubin, "vera-rubin-tuned")):
        write(make(read_lock(locks / f"{lock}.lock.yaml").stack_digest), out / f"{lock}.json")
        print(out / f"{lock}.json")
