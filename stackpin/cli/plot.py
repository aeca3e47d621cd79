"""`stackpin bench plot`: the curves of bench results on one chart (stackpin.report.curves).

A standalone command: it joins the `bench` group where that group is defined.
"""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import OUTPUT, emit, file_only, user_errors


@click.command("plot")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False), metavar="RESULT.json...")
@click.option("--out", required=True, type=click.Path(dir_okay=False), metavar="CURVE.png", callback=file_only,
              help="The PNG to write.")
@click.option("--slo", "slo_text", metavar="tps=N,ttft=Ns", help="The SLO to mark (default: the results' own, "
              "when they agree).")
@OUTPUT
@user_errors
def plot(results: tuple[str, ...], out: str, slo_text: str | None, output: str) -> None:
    """Plot throughput per GPU against per-agent output speed for each result, the SLO speed marked.

    Each point is one agent count (labelled); per-agent speed is the slowest agent's. An invalid point is a
    hollow X, labelled; the SLO edge of each curve is marked. Past 8 results the last 8 are drawn.
    Same results, same bytes.
    """
    from stackpin.bench.resultfile import read_result
    from stackpin.plan.slo import parse_slo
    from stackpin.report.curves import curve_chart, result_label, slo_speed, slo_ttft
    from stackpin.report.summary import summarise
    from stackpin.yamlio import write_output

    loaded = [summarise(read_result(Path(p))) for p in results]  # one result's request logs in memory at a time
    slo = parse_slo(slo_text) if slo_text else None
    tps = slo.tps if slo else slo_speed(loaded)
    percentile = slo.percentile if slo else "p90"
    ttft = slo.ttft_s if slo else slo_ttft(loaded)
    write_output(Path(out), curve_chart([(result_label(r), r) for r in loaded], tps, percentile, ttft_s=ttft))
    if output == "text":
        marked = f"{tps:g} tok/s" if tps else "not marked"
        click.echo(f"wrote {out}  ({len(loaded)} curve(s), SLO {marked})")
    else:
        emit({"out": out, "results": list(results), "slo_tps": tps}, output)
