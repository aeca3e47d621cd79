"""`stackpin bench run|job|merge|compare|attach`: measure a stack, compare two, gate on regressions.

Registered in stackpin/cli/main.py. The library (stackpin.bench) does the work; this module parses
and prints. Heavy imports stay inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stackpin.cli.common import OUTPUT, emit, user_errors
from stackpin.cli.history import HISTORY

if TYPE_CHECKING:
    from stackpin.bench.compare import Comparison
    from stackpin.bench.replay import Progress
    from stackpin.bench.result import BenchResult

LOCKDIR = click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
                       help="Where a profile's lock is looked up when LOCK is a profile.")


@click.group()
def bench() -> None:
    """Replay agent traces against a stack's endpoint, compare results, gate on regressions."""


@contextmanager
def _progress() -> Iterator[Progress]:
    """A live line on stderr when it is a terminal; nothing otherwise."""
    from stackpin.bench.replay import Progress

    if not sys.stderr.isatty():
        yield Progress()
        return
    from rich.console import Console
    from rich.live import Live

    with Live("", console=Console(stderr=True), refresh_per_second=4, transient=True) as live:
        yield Progress(lambda agents, requests, errors, tokens: live.update(
            f"{agents} agent(s): {requests} requests, {errors} errors, {tokens} output tokens"))


def _write_result(result: BenchResult, out: str) -> None:
    from stackpin.bench.result import result_json
    from stackpin.yamlio import write_files

    write_files({Path(out): result_json(result)})


def _summary(result: BenchResult) -> dict[str, Any]:
    return {"stack": result.stack.name, "digest": result.stack.digest, "fingerprint": result.fingerprint,
            "interrupted": result.interrupted, "saturated": result.client.saturated,
            "simulated": result.simulation is not None,
            "points": [{"agents": p.agents, "searched": p.searched, "requests": p.requests, "errors": p.errors,
                        "ttftP90S": p.ttft_s.p90, "itlP50S": p.itl_s.p50, "agentTpsMean": p.agent_tps.mean,
                        "outputTps": p.output_tps, "outputTpsPerGpu": p.output_tps_per_gpu,
                        "cacheHitRate": p.cache_hit_rate, "sloMet": p.slo_met} for p in result.points],
            "score": result.score.model_dump(mode="json") if result.score else None}


def _print_result(result: BenchResult, out: str | None, output: str) -> None:
    if output != "text":
        emit({**_summary(result), "out": out}, output)
        return
    sim = (f", simulated ({result.simulation.model}, speed {result.simulation.speed:g})"
           if result.simulation else "")
    click.echo(f"stack {result.stack.name} {result.stack.digest[:19]} on {result.stack.gpus} GPU(s){sim}")
    header = ["AGENTS", "REQ", "ERR", "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "TOK/S/AGENT", "TOK/S",
              "TOK/S/GPU", "CACHE", "SLO"]
    rows = []
    for p in result.points:
        rows.append([f"{p.agents}{'*' if p.searched else ''}", str(p.requests), str(p.errors),
                     f"{p.ttft_s.p50:.3f}s", f"{p.ttft_s.p90:.3f}s", f"{p.ttft_s.p99:.3f}s",
                     f"{p.itl_s.p50 * 1000:.2f}ms", f"{p.agent_tps.mean:.1f}", f"{p.output_tps:.1f}",
                     f"{p.output_tps_per_gpu:.2f}", "-" if p.cache_hit_rate is None else f"{p.cache_hit_rate:.0%}",
                     "-" if p.slo_met is None else ("met" if p.slo_met else "missed")])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                               strict=True))))
    if any(p.searched for p in result.points):
        click.echo("* added by the SLO search")
    if result.score:
        s = result.score
        at = f", {s.output_tps_per_gpu_at_slo:.2f} tok/s/GPU there" if s.output_tps_per_gpu_at_slo is not None else ""
        click.echo(f"score: {s.max_agents} agent(s) under the SLO{at}; single agent {s.single_agent_tps:.1f} tok/s")
    for line in ([result.client.note] if result.client.note else []) + (
            ["interrupted: the result holds what was measured before Ctrl-C"] if result.interrupted else []):
        click.echo(f"warning: {line}", err=True)
    if out:
        click.echo(f"wrote {out}", err=True)


@bench.command("run")
@click.option("--endpoint", required=True, metavar="URL", help="OpenAI-compatible server base URL (before /v1).")
@click.option("--trace", "trace_file", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Mooncake/AIPerf JSONL trace (`stackpin trace gen`).")
@click.option("--lock", "lock_input", required=True, metavar="LOCK|DEPLOYMENT@REV",
              help="The stack behind the endpoint: a lockfile, a profile, or a revision of a deployment's history.")
@click.option("--agents", "agents_text", default="1,8,32", show_default=True, metavar="N,N,...",
              help="Concurrent agent counts to measure.")
@click.option("--slo", "slo_text", metavar="tps=T,ttft=S[,percentile=p90]",
              help="Score: the largest agent count (searched by bisection) in which every agent holds T tok/s and "
                   "the TTFT percentile is within S, with no failed request; and single-agent speed.")
@click.option("--model", help="Model name to send (default: the endpoint's first in /v1/models, else the lock's).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Client processes; agents are dealt among them.")
@click.option("--duration", "duration_text", metavar="SECONDS", help="Per agent count: start no turn after this.")
@click.option("--sessions", type=click.IntRange(min=1), help="Sessions each agent replays (default: enough for the "
              "agents to cover the trace once).")
@click.option("--delay-scale", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Factor on the trace's tool delays; 0 sends each turn as soon as the last answer ends.")
@click.option("--request-timeout", "timeout_text", default="300s", show_default=True, metavar="SECONDS",
              help="A request not finished by then is recorded as stalled.")
@click.option("--pod-index", type=click.IntRange(min=0), default=0, hidden=True)
@click.option("--pods", type=click.IntRange(min=1), default=1, hidden=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The result file (JSON).")
@LOCKDIR
@HISTORY
@OUTPUT
@user_errors
def run(endpoint: str, trace_file: str, lock_input: str, agents_text: str, slo_text: str | None,
        model: str | None, workers: int, duration_text: str | None, sessions: int | None, delay_scale: float,
        timeout_text: str, pod_index: int, pods: int, out: str, lockdir: str, history_dir: str, output: str) -> None:
    """Replay TRACE against ENDPOINT at each agent count and write one result bound to the stack.

    Each agent replays sessions one after another, sending the grown context each turn and waiting the
    trace's tool delay. Ctrl-C keeps what was measured (the result says it was interrupted).
    """
    import os

    from stackpin.bench.binding import parse_agents, parse_seconds, parse_slo
    from stackpin.bench.replay import RunOptions, run_bench
    from stackpin.bench.sessions import read_trace
    from stackpin.deploy.source import resolve_source
    from stackpin.errors import StackpinError

    if pod_index >= pods:
        raise StackpinError(f"--pod-index {pod_index} is not below --pods {pods}")
    source = resolve_source(lock_input, Path(lockdir), Path(history_dir))
    key = os.environ.get("STACKPIN_BENCH_API_KEY")
    options = RunOptions(
        endpoint=endpoint, trace=read_trace(Path(trace_file)), agents=parse_agents(agents_text),
        slo=parse_slo(slo_text) if slo_text else None, model=model, workers=workers,
        duration_s=parse_seconds(duration_text, "--duration") if duration_text else None, sessions=sessions,
        delay_scale=delay_scale, timeout_s=parse_seconds(timeout_text, "--request-timeout"),
        headers={"Authorization": f"Bearer {key}"} if key else {}, pod_index=pod_index, pods=pods)
    with _progress() as progress:
        result = run_bench(options, source, progress)
    _write_result(result, out)
    _print_result(result, out, output)


def _read(paths: tuple[str, ...]) -> list[BenchResult]:
    from stackpin.bench.result import read_result

    return [read_result(Path(p)) for p in paths]
