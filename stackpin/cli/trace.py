"""`stackpin trace gen|stats|import`: agent traces in the Mooncake/AIPerf JSONL format (stackpin.bench)."""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import OUTPUT, emit, out_name, report_to_stderr, user_errors, write_out


@click.group(help="Generate, summarize and import agent traces (Mooncake/AIPerf JSONL, 512-token hash blocks).")
def trace() -> None:
    pass


@trace.command(help="""Write AgentPerf-shaped multi-turn sessions: the context grows every turn, inputs
about 1K-131K tokens (mean about 27K), outputs median about 150 / p95 about 2K, tool delays between
turns. Defaults and their source: stackpin/bench/agentperf.yaml; --param NAME=VALUE overrides one
(e.g. output.median=300, turns.max=20, max_context=65536). Same seed and parameters, same bytes.""")
@click.option("--sessions", type=click.IntRange(min=1), required=True, help="Sessions (agent trajectories).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Override a distribution parameter.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="The JSONL file to write (all or nothing); `-` for stdout.")
@OUTPUT
@user_errors
def gen(sessions: int, seed: int, params: tuple[str, ...], out: str, output: str) -> None:
    from stackpin.bench.tracegen import default_shape, generate, render
    from stackpin.bench.tracestats import trace_stats
    from stackpin.errors import StackpinError

    overrides = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep:
            raise StackpinError(f"--param {item}: expected NAME=VALUE")
        overrides[key] = value
    turns = generate(sessions, seed, default_shape().with_overrides(overrides))
    if not turns:
        raise StackpinError("no turn fits max_context with these parameters")
    write_out(out, render(turns))
    stats = trace_stats(turns)
    err = report_to_stderr(out)
    if output == "text":
        click.echo(f"{out_name(out)}: {stats.sessions} sessions, {stats.requests} requests, "
                   f"ISL mean {stats.isl.mean:.0f}, OSL median {stats.osl.median:.0f}, reuse {stats.reuse_ratio:.1%}",
                   err=err)
    else:
        emit({"file": out, **stats.as_dict()}, output, err=err)


@trace.command(help="Print a trace's distribution: ISL (whole prompt) and new tokens, OSL, turns per session, "
                    "tool delays (mean, median, p95, max) and the reuse ratio an unbounded prefix cache would hit.")
@click.argument("file", type=click.Path(dir_okay=False))
@OUTPUT
@user_errors
def stats(file: str, output: str) -> None:
    from stackpin.bench.traceio import read_trace
    from stackpin.bench.tracestats import REUSE_MEANING, trace_stats

    result = trace_stats(read_trace(Path(file)))
    if output != "text":
        emit({**result.as_dict(), "reuse_ratio_meaning": REUSE_MEANING}, output)
        return
    click.echo(f"{file}: {result.sessions} sessions, {result.requests} requests, "
               f"reuse ratio {result.reuse_ratio:.1%}")
    click.echo(f"{'':10}  {'mean':>9}  {'median':>9}  {'p95':>9}  {'max':>9}")
    for name, s in (("ISL", result.isl), ("new", result.new_tokens), ("OSL", result.osl),
                    ("turns", result.turns), ("delay ms", result.delay_ms)):
        click.echo(f"{name:10}  {s.mean:>9.1f}  {s.median:>9.1f}  {s.p95:>9.1f}  {s.max:>9}")
    click.echo(f"ISL: the accumulated prompt (previous prompt + answer + new); reuse ratio: {REUSE_MEANING}")


@trace.command(name="import", help="""Read an AIPerf/Mooncake trace (single-turn lines with timestamp, or
multi-turn lines with session_id and delay, input_length and hash_ids naming the turn's new tokens)
and write it in stackpin's form: sorted keys, one turn a line. hash_ids follow AIPerf's rules: at most
ceil(input_length/512) ids, one size per id. A bad line is one error naming file:line: field (exit 2);
nothing is written then.""")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="The JSONL file to write (all or nothing); `-` for stdout.")
@OUTPUT
@user_errors
def import_(file: str, out: str, output: str) -> None:
    from stackpin.bench.tracegen import render
    from stackpin.bench.traceio import read_trace
    from stackpin.bench.tracestats import trace_stats

    turns = read_trace(Path(file))
    write_out(out, render(turns))
    result = trace_stats(turns)
    err = report_to_stderr(out)
    if output == "text":
        click.echo(f"{out_name(out)}: {result.sessions} sessions, {result.requests} requests", err=err)
    else:
        emit({"file": out, **result.as_dict()}, output, err=err)
