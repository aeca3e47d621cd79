"""`stackpin search`: the stacks around a base profile that a service target wants (stackpin.search)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import emit, file_only, user_errors

if TYPE_CHECKING:
    from stackpin.search.predict import Prediction
    from stackpin.search.run import SearchResult
    from stackpin.search.verify import VerifyOptions


@click.command("search")
@click.argument("base", type=click.Path(dir_okay=False), metavar="BASE_PROFILE")
@click.option("--slo", "slo_text", required=True, metavar="tps=N,ttft=Ns",
              help="Per-agent output speed every agent holds and the TTFT limit.")
@click.option("--trace", required=True, type=click.Path(dir_okay=False), metavar="TRACE",
              help="The agent trace whose mean context, uncached prompt and output per turn the model predicts for.")
@click.option("--acceptance", "acceptance_file", type=click.Path(dir_okay=False), metavar="RESULT.json",
              help="A bench result whose measured draft acceptance (per position) replaces the model's for the "
                   "candidates drafting with the same method and draft count; the others keep the model's.")
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
@click.option("--verify", type=click.Choice(["bed", "cluster"]), help="Check every pick before it is offered: lock "
              "it and the base, run each through `engines check`, then bench each pick against the base with the "
              "trace and SLO on the Dynamo bed (bed) or deployed in turn into scratch namespaces of the --fleet "
              "rack (cluster); bench compare's verdict, ranked by what was measured (docs/search.md).")
@click.option("--fleet", type=click.Path(dir_okay=False, exists=True), metavar="FLEET.yaml",
              help="--verify cluster: the fleet file whose canary rack (kubeconfig, endpoint; {namespace} in it "
                   "names the scratch namespace) and gates (ready, soak, bench) are used.")
@click.option("--runs", type=click.IntRange(min=1, max=20), default=3, show_default=True,
              help="--verify: runs of each side (alternated on the bed).")
@click.option("--agents", "agents_text", default="1", show_default=True, metavar="N,N,...",
              help="--verify bed: concurrent agent counts each side is benched at (bench run's --agents).")
@click.option("--delay-scale", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="--verify bed: factor on the trace's tool delays (bench run's); 0 sends each turn at once.")
@click.option("--share", type=click.IntRange(min=1), default=1, show_default=True,
              help="--verify bed: serve 1/N of each stack (sim serve's --share).")
@click.option("--dynamo-env", metavar="DIR", help="--verify bed: the Dynamo bed's environment (default "
              "$STACKPIN_DYNAMO_ENV, else .dynamobed/dynamo-1.6.1).")
@click.option("--python", "engine_python", type=click.Path(dir_okay=False), metavar="PATH",
              help="--verify: the engine check's Python, as engines check's --python (default "
              "$STACKPIN_ENGINE_PYTHON, else where `engines setup-check` builds it).")
@click.option("--scratch-prefix", default="stackpin-verify", show_default=True, metavar="NAME",
              help="--verify cluster: scratch namespaces are NAME-0 (the base), NAME-1, ...; never one that exists.")
@click.option("--allow-stand-ins", is_flag=True, help="--verify cluster: apply locks holding stand-in pins (the "
              "demo mirror's), as stackpin apply's.")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="--verify: whose parent the picks' locks name paths relative to.")
@click.option("--mirror", "mirrors", multiple=True, metavar="REGISTRY=MIRROR", help="--verify: as stackpin lock's.")
@click.option("--oci-layout", type=click.Path(exists=True, file_okay=False), help="--verify: as stackpin lock's.")
@click.option("--hf-cache", type=click.Path(exists=True, file_okay=False), help="--verify: as stackpin lock's.")
@click.option("--hf-endpoint", help="--verify: as stackpin lock's.")
@user_errors
def search(base: str, slo_text: str, trace: str, acceptance_file: str | None, racks: int, top: int, out: str | None,
           model: str, output: str, chart: str | None, dry_run: bool, force: bool, verify: str | None,
           fleet: str | None, runs: int, agents_text: str, delay_scale: float, share: int,
           dynamo_env: str | None, engine_python: str | None, scratch_prefix: str, allow_stand_ins: bool, lockdir: str,
           mirrors: tuple[str, ...], oci_layout: str | None, hf_cache: str | None, hf_endpoint: str | None) -> None:
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
    if verify and dry_run:
        raise click.UsageError("--verify measures the picks it writes: not with --dry-run")
    if (verify == "cluster") != (fleet is not None):
        raise click.UsageError("--verify cluster takes --fleet FLEET.yaml, and --fleet is for --verify cluster")
    base_path = Path(base)
    name = load_profile(base_path).profile.name  # an unreadable profile before the trace
    turns = read_trace(Path(trace))
    if not turns:
        from stackpin.errors import StackpinError

        raise StackpinError(f"{trace}: the trace has no turns")
    measured = None
    if acceptance_file is not None:
        from stackpin.search.predict import measured_from

        measured = measured_from(Path(acceptance_file))
    result = run_search(base_path, slo, workload_of(turns), racks=racks, top=top, model=model, measured=measured)
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
    if verify:
        from stackpin.cli.lock import _parse_mirrors
        from stackpin.search.verify import VerifyOptions
        from stackpin.upgrade.trial import LockOptions

        options = VerifyOptions(lockdir=Path(lockdir), runs=runs, engine_python=Path(engine_python) if engine_python
                                else None, lock=LockOptions(
            mirrors=tuple(_parse_mirrors(mirrors).items()), oci_layout=oci_layout, hf_cache=hf_cache,
            hf_endpoint=hf_endpoint))
        _verify(base_path, [p.path for p in result.picks if p.path is not None], verify, Path(trace), slo_text,
                options, fleet, share, dynamo_env, scratch_prefix, allow_stand_ins, output, agents_text, delay_scale)


def _verify(base: Path, picks: list[Path], where: str, trace: Path, slo_text: str, options: VerifyOptions,
            fleet: str | None, share: int, dynamo_env: str | None, scratch_prefix: str, allow_stand_ins: bool,
            output: str, agents_text: str = "1", delay_scale: float = 1.0) -> None:
    """Every written pick checked and measured against the base (stackpin.search.verify_bed / verify_cluster);
    exit 0 when one passed, 3 when none did but some were inconclusive, 1 otherwise."""
    import sys

    from stackpin.bench.compare import EXIT_INCONCLUSIVE
    from stackpin.search.verify import Outcome

    def note(line: str) -> None:
        click.echo(line, err=True)

    if where == "bed":
        from stackpin.bench.binding import parse_agents
        from stackpin.bench.controlled import BenchControls
        from stackpin.bench.sessions import read_trace as read_sessions
        from stackpin.search.verify_bed import verify_bed
        from stackpin.upgrade.trialbed import DynamoBed

        controls = BenchControls(trace=read_sessions(trace), agents=parse_agents(agents_text), delay_scale=delay_scale)
        done = verify_bed(base, picks, DynamoBed(env=dynamo_env, share=share), controls, str(trace), slo_text=slo_text,
                          options=options, on_note=note)
    else:
        from stackpin.search.verify_cluster import verify_cluster

        assert fleet is not None
        done = verify_cluster(base, picks, Path(fleet), trace=trace, slo_text=slo_text, options=options,
                              scratch_prefix=scratch_prefix, allow_stand_ins=allow_stand_ins, on_note=note)
    if output == "json":
        emit({"where": done.where, "picks": [{"record": str(path), **r.model_dump(mode="json", by_alias=True)}
                                             for path, r in done.picks]}, "json")
    else:
        click.echo(f"verified on the {done.where} against {base} (measured, bench compare's verdict):")
        for path, r in done.picks:
            rank = str(r.rank) if r.rank else "-"
            value = f"{r.measured_metric} {r.measured_text}" if r.measured_text else "not measured"
            why = f": {' '.join(r.problems[0].split())[:240]}" if r.problems and not r.passed else ""
            click.echo(f"  {rank:>2} {r.outcome.value:<12} {value}  {r.pick}{why}  ({path})")
    outcomes = {r.outcome for _, r in done.picks}
    if not any(o.passed for o in outcomes):
        sys.exit(EXIT_INCONCLUSIVE if Outcome.inconclusive in outcomes else 1)


def _accepted(p: Prediction | None) -> str:
    """The table's acceptance cell: measured, published or estimate (the model's), '-' without drafts."""
    if p is None or not p.acceptance:
        return "-"
    if p.acceptance.startswith("measured"):
        return "measured"
    return "published" if p.acceptance.startswith("model's published") else "estimate"


def _ttft(seconds: float) -> str:
    return "never drains" if seconds == float("inf") else f"{seconds:.2f}"


def _print(r: SearchResult) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from stackpin.search.report import acceptance_note, predicted_label

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
    console.print(f"draft acceptance: {escape(acceptance_note(r))}")
    table = Table(box=None, pad_edge=False, title="Pareto front at the SLO (predicted)", title_justify="left")
    for column in ("pick", "tok/s/GPU", "tok/s/agent", "TTFT s", "agents", "GPUs", "limited by", "acceptance",
                   "stack"):
        table.add_column(column, justify="left" if column in ("pick", "limited by", "acceptance", "stack") else "right")
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
            table.add_row(mark, "-", "-", "-", "-", "-", escape(f"misses the SLO: {why}"), _accepted(p),
                          escape(s.label))
            continue
        table.add_row(mark, f"{p.tps_per_gpu:,.0f}", f"{p.agent_tps:.0f}", _ttft(p.ttft_s), f"{p.agents:,.0f}",
                      str(p.gpus), p.limited_by, _accepted(p), escape(s.label))
    console.print(table)
    for pick in r.picks:
        if pick.scored.index not in {s.index for s in rows}:
            p = pick.scored.prediction
            assert p is not None
            console.print(f"pick {pick.rank} (off the front): {p.tps_per_gpu:,.0f} tok/s/GPU at {p.agent_tps:.0f} "
                          f"tok/s/agent, TTFT {_ttft(p.ttft_s)} s: {escape(pick.scored.label)}")
        if pick.path is not None:
            console.print(f"pick {pick.rank}: {escape(str(pick.path))}")
