"""`stackpin search`: the stacks around a base profile that a service target wants (stackpin.search)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import emit, file_only, user_errors

if TYPE_CHECKING:
    from stackpin.search.run import SearchResult


@click.command("search")
@click.argument("base", type=click.Path(dir_okay=False), metavar="BASE_PROFILE")
@click.option("--slo", "slo_text", required=True, metavar="tps=N,ttft=Ns",
              help="Per-agent output speed every agent holds and the TTFT limit.")
@click.option("--trace", required=True, type=click.Path(dir_okay=False), metavar="TRACE",
              help="The agent trace whose mean context, uncached prompt and output per turn the model predicts for.")
@click.option("--racks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Whole racks of the base's platform every candidate fills with replicas.")
@click.option("--top", type=click.IntRange(min=1), default=3, show_default=True,
              help="Picks to write beside the base (BASE.search-1.yaml, ...).")
@click.option("--out", type=click.Path(file_okay=False), metavar="DIR",
              help="Where the proposal goes (search.md, search.json); default proposals/search-<base name>.")
@click.option("--model", type=click.Choice(["roofline", "aiconfigurator"]), default="roofline", show_default=True,
              help="The step model that predicts (aiconfigurator: the `sim` extra).")
@click.option("--format", "output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format; json has stable keys (what search.json holds).")
@click.option("--chart", type=click.Path(dir_okay=False), metavar="FRONT.png", callback=file_only,
              help="Write a chart of the front (the `plot` extra).")
@click.option("--dry-run", is_flag=True, help="Search and print; write no pick, proposal or chart.")
@click.option("--force", is_flag=True, help="Replace picks and a proposal an earlier search wrote.")
@user_errors
def search(base: str, slo_text: str, trace: str, racks: int, top: int, out: str | None, model: str, output: str,
           chart: str | None, dry_run: bool, force: bool) -> None:
    """Search the stack space around BASE_PROFILE for a service target: placement and pool ratio, TP/EP/DP,
    max-num-seqs and batched tokens, speculative method and draft tokens, CUDA graphs, KV-cache dtype.
    Every candidate goes through every validate rule first; the survivors are predicted on the step model
    at the SLO (figures labelled predicted, never measured); the Pareto front is printed and the top picks
    written beside the base with a proposal. Exit 2 on bad input, nothing written."""
    from stackpin.bench.traceio import read_trace
    from stackpin.plan.slo import parse_slo
    from stackpin.profile.loader import load_profile
    from stackpin.search.run import search as run_search
    from stackpin.sim.curve import workload_of

    slo = parse_slo(slo_text)  # bad --slo before any file is read
    base_path = Path(base)
    name = load_profile(base_path).profile.name  # an unreadable profile before the trace
    turns = read_trace(Path(trace))
    if not turns:
        from stackpin.errors import StackpinError

        raise StackpinError(f"{trace}: the trace has no turns")
    result = run_search(base_path, slo, workload_of(turns), racks=racks, top=top, model=model)
    files: tuple[Path, ...] = ()
    if not dry_run:
        from stackpin.search.write import write_picks

        directory = Path(out) if out else Path("proposals") / f"search-{name}"
        written = write_picks(result, directory, force=force)
        result, files = written.result, written.files
        if chart:
            from stackpin.search.chart import search_chart
            from stackpin.yamlio import write_output

            write_output(Path(chart), search_chart(result))
            files = (*files, Path(chart))
    if output == "json":
        from stackpin.search.report import result_data

        emit(result_data(result), "json")
    else:
        _print(result)
    for path in files:
        click.echo(f"wrote {path}", err=True)
    click.echo(f"{result.enumerated:,} candidates validated in {result.validate_s:.1f} s, "
               f"{len(result.survivors) + result.merged:,} predicted in {result.predict_s:.1f} s", err=True)


def _ttft(seconds: float) -> str:
    return "never drains" if seconds == float("inf") else f"{seconds:.2f}"


def _print(r: SearchResult) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from stackpin.search.report import predicted_label

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=220)
    meets = sum(1 for s in r.survivors if s.meets and s.index)
    console.print(f"search around {escape(str(r.base))} for tps={r.slo.tps:g},ttft={r.slo.ttft_s:g}s on "
                  f"{r.racks} rack(s); every figure {escape(predicted_label(r.model))}")
    console.print(f"{r.enumerated:,} candidates: {r.pruned:,} pruned by validate, {r.merged:,} alike to another, "
                  f"{len(r.survivors) - 1:,} predicted, {meets:,} meet the SLO")
    for x in r.reasons[:5]:
        console.print(f"  pruned by {x.code}: {x.candidates:,} (e.g. {escape(x.example[:140])})")
    table = Table(box=None, pad_edge=False, title="Pareto front at the SLO (predicted)", title_justify="left")
    for column in ("pick", "tok/s/GPU", "tok/s/agent", "TTFT s", "agents", "GPUs", "limited by", "stack"):
        table.add_column(column, justify="left" if column in ("pick", "limited by", "stack") else "right")
    ranks = {p.scored.index: p.rank for p in r.picks}
    rows = [r.survivors[i] for i in r.front]
    base = r.base_scored
    if base is not None and base not in rows:
        rows.append(base)
    for s in rows:
        p = s.prediction
        mark = "base" if s.index == 0 else (str(ranks[s.index]) if s.index in ranks else "")
        if p is None or not p.meets:
            why = s.unpredicted or (p.limited_by if p else "")
            table.add_row(mark, "-", "-", "-", "-", "-", escape(f"misses the SLO: {why}"), escape(s.label))
            continue
        table.add_row(mark, f"{p.tps_per_gpu:,.0f}", f"{p.agent_tps:.0f}", _ttft(p.ttft_s), f"{p.agents:,.0f}",
                      str(p.gpus), p.limited_by, escape(s.label))
    console.print(table)
    for pick in r.picks:
        if pick.scored.index not in {s.index for s in rows}:
            p = pick.scored.prediction
            assert p is not None
            console.print(f"pick {pick.rank} (off the front): {p.tps_per_gpu:,.0f} tok/s/GPU at {p.agent_tps:.0f} "
                          f"tok/s/agent, TTFT {_ttft(p.ttft_s)} s: {escape(pick.scored.label)}")
        if pick.path is not None:
            console.print(f"pick {pick.rank}: {escape(str(pick.path))}")
