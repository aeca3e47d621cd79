"""`stackpin upgrade trial|promote` (stackpin.upgrade.trial, stackpin.upgrade.promote): registered as
subcommands of `upgrade` in stackpin/cli/main.py (SUBCOMMANDS). Parse, call the library, print."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import HISTORY, OUTPUT, emit, finite, user_errors
from stackpin.cli.comparison import ALLOW_ACCEPTANCE_CHANGE

if TYPE_CHECKING:
    from stackpin.upgrade.trial import TrialOutcome

SIMULATED = "simulated: stackpin's simulator, not hardware"
DEFAULT_TRACE_SESSIONS = 32  # the trace a trial generates when none is given (AgentPerf-shaped, seed 0)


@click.command()
@click.argument("proposal", metavar="PROPOSAL")
@click.option("--sim", is_flag=True, help="Serve each stack on stackpin's simulator (loopback, in-process).")
@click.option("--endpoint", metavar="URL", help="The candidate stack's endpoint (with --current-endpoint).")
@click.option("--current-endpoint", metavar="URL", help="The current stack's endpoint (with --endpoint).")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False), metavar="FILE",
              help=f"The trace both sides replay (default: {DEFAULT_TRACE_SESSIONS} AgentPerf-shaped sessions, seed 0, "
                   "written to PROPOSAL/results/trace.jsonl).")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs of each side, alternating which goes first; two or more give intervals over runs.")
@click.option("--agents", "agents_text", default="1", show_default=True, metavar="N,N,...",
              help="Agent counts to measure, as bench run's (the SLO search adds its own).")
@click.option("--slo", "slo_text", metavar="tps=T,ttft=S[,percentile=p90]|none",
              help="As bench run's, the same for both sides (default: the current profile's spec.service where "
                   "--agents asks for more than one agent; none for one agent alone, whose curve cannot locate it).")
@ALLOW_ACCEPTANCE_CHANGE
@click.option("--threshold", "threshold_text", default="5%", show_default=True,
              help="Smallest relative change that counts as a gain or a regression.")
@click.option("--duration", "duration_text", metavar="SECONDS", help="As bench run's: per agent count, start no turn "
              "after this.")
@click.option("--sessions", type=click.IntRange(min=1), help="As bench run's: sessions each agent replays.")
@click.option("--delay-scale", type=finite(min=0), default=1.0, show_default=True,
              help="As bench run's: factor on the trace's tool delays.")
@click.option("--lag-limit", "lag_limit_text", default="10ms", show_default=True, metavar="SECONDS",
              help="As bench run's: a point whose client ran this late (stack time) is invalid.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="As bench run's.")
@click.option("--speed", type=finite(min=0, min_open=True), help="--sim: simulated seconds per wall second "
              "(sim serve's --speed; default 1).")
@click.option("--share", type=click.IntRange(min=1), help="--sim: serve 1/N of each stack (sim serve's --share; "
              "default 1).")
@click.option("--fault-candidate", metavar="SPEC", help="--sim, for drills and tests: sim serve's --fault on the "
              "candidate's simulator only, e.g. slow=2.")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where the current profile's lock is (when the history has no revision), and whose parent the "
                   "candidate's lock names paths relative to.")
@click.option("--mirror", "mirrors", multiple=True, metavar="REGISTRY=MIRROR", help="As stackpin lock's.")
@click.option("--oci-layout", type=click.Path(exists=True, file_okay=False), help="As stackpin lock's.")
@click.option("--hf-cache", type=click.Path(exists=True, file_okay=False), help="As stackpin lock's.")
@click.option("--hf-endpoint", help="As stackpin lock's.")
@HISTORY
@OUTPUT
@user_errors
def trial(proposal: str, sim: bool, endpoint: str | None, current_endpoint: str | None, trace_file: str | None,
          runs: int, agents_text: str, slo_text: str | None, allow_acceptance_change: bool, threshold_text: str,
          duration_text: str | None,
          sessions: int | None, delay_scale: float, lag_limit_text: str, workers: int, speed: float | None,
          share: int | None, fault_candidate: str | None, lockdir: str, mirrors: tuple[str, ...],
          oci_layout: str | None, hf_cache: str | None, hf_endpoint: str | None, history_dir: str,
          output: str) -> None:
    """Bench PROPOSAL's candidate against the current stack and judge it.

    PROPOSAL is a proposal directory (stackpin upgrade propose) or its proposal.json. The current stack is
    the deployment's newest revision in the history, else the current profile's lock; the candidate
    profile is locked into PROPOSAL/candidate.lock.yaml. Both are benched with the same trace, controls
    and SLO, --runs times each, alternating; bench compare's intervals and verdict decide. Writes
    PROPOSAL/trial.json and PROPOSAL/results/. Exit 0 on gain or no-change, 1 on regression (and when the
    proposal is blocked), 3 when the evidence is inconclusive (it says what is missing).
    """
    from stackpin.bench.binding import parse_agents, parse_seconds
    from stackpin.bench.sessions import read_trace
    from stackpin.cli.comparison import threshold
    from stackpin.cli.lock import _parse_mirrors
    from stackpin.upgrade.trial import RESULTS_DIR, LockOptions, proposal_dir, read_proposal, run_trial, trialable
    from stackpin.upgrade.trialbed import Bed, BenchControls, EndpointBed, SimBed

    bed: Bed
    if sim:
        if endpoint or current_endpoint:
            raise click.UsageError("give --sim, or --endpoint URL --current-endpoint URL, not both")
        bed = SimBed(speed=speed if speed is not None else 1.0, share=share or 1,
                     candidate_faults=fault_candidate or "")
    elif endpoint and current_endpoint:
        if fault_candidate or speed is not None or share is not None:
            raise click.UsageError("--fault-candidate, --speed and --share are for --sim")
        bed = EndpointBed(candidate=endpoint, current=current_endpoint)
    else:
        raise click.UsageError("give --sim, or --endpoint URL (the candidate's) --current-endpoint URL")
    if fault_candidate:
        from stackpin.sim.faults import FaultSpec

        FaultSpec.parse(fault_candidate)  # one line for a bad spec, before anything is locked or served
    directory = proposal_dir(proposal)
    trialable(read_proposal(directory)[0], directory)  # a blocked proposal is refused before any write
    if trace_file is None:
        from stackpin.bench.tracegen import generate, render
        from stackpin.yamlio import write_atomic

        (directory / RESULTS_DIR).mkdir(exist_ok=True)
        trace_file = str(directory / RESULTS_DIR / "trace.jsonl")
        write_atomic(Path(trace_file), render(generate(DEFAULT_TRACE_SESSIONS, 0)))
    controls = BenchControls(
        trace=read_trace(Path(trace_file)), agents=parse_agents(agents_text), workers=workers,
        duration_s=parse_seconds(duration_text, "--duration") if duration_text else None, sessions=sessions,
        delay_scale=delay_scale, lag_limit_s=parse_seconds(lag_limit_text, "--lag-limit"))
    outcome = run_trial(proposal, bed, controls, trace_file, slo_text=slo_text, runs=runs,
                        threshold=threshold(threshold_text), lockdir=Path(lockdir), history=Path(history_dir),
                        lock_options=LockOptions(mirrors=tuple(_parse_mirrors(mirrors).items()), oci_layout=oci_layout,
                                                 hf_cache=hf_cache, hf_endpoint=hf_endpoint),
                        on_note=lambda line: click.echo(line, err=True),
                        allow_acceptance_change=allow_acceptance_change)
    _print_trial(outcome, output)
    if outcome.trial.verdict.value == "inconclusive":
        from stackpin.bench.compare import EXIT_INCONCLUSIVE

        sys.exit(EXIT_INCONCLUSIVE)
    if outcome.trial.verdict.value == "regression":
        sys.exit(1)


def _print_trial(outcome: TrialOutcome, output: str) -> None:
    from stackpin.cli.comparison import comparison_data, print_comparison

    t = outcome.trial
    if output != "text":
        emit({"trial": t.model_dump(mode="json", by_alias=True), "comparison": comparison_data(outcome.comparison),
              "file": str(outcome.path)}, output)
        return
    if t.simulated:
        click.echo(SIMULATED)
    click.echo(f"A current:   {t.current_lock}  {t.current_digest[:19]}")
    click.echo(f"B candidate: {t.candidate_lock}  {t.candidate_digest[:19]}")
    print_comparison(outcome.comparison, "text")
    main = next((m for m in t.metrics if m.name == t.main_metric), None)
    said = f"; {main.name} {main.change:+.1%}" if main is not None and main.change is not None else ""
    if t.verdict.value == "inconclusive":
        said = "; " + "; ".join(outcome.comparison.missing())
    click.echo(f"trial: {t.verdict.value}{said}")
    click.echo(f"wrote {outcome.path}", err=True)


@click.command()
@click.argument("proposal", metavar="PROPOSAL")
@click.option("--allow-no-change", is_flag=True, help="Promote a candidate whose trial found no significant change "
              "(refused otherwise: only a gain is promoted).")
@click.option("--threshold", "threshold_text", default="5%", show_default=True,
              help="The smallest relative change that counts, as the trial's --threshold: the verdict is recomputed "
                   "from the trial's results at it and must agree with the trial's.")
@ALLOW_ACCEPTANCE_CHANGE
@click.option("-m", "--message", help="Why: kept in the revision (default: the upgrade, the trial's verdict and its "
              "main headline).")
@HISTORY
@click.option("--deployments", "deployments_dir", default="deployments", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False), help="Where the deployment's newest revision is rendered for GitOps.")
@click.option("--signing-key", type=click.Path(dir_okay=False), metavar="KEY",
              help="Sign the revision, as stackpin promote's.  [default: $STACKPIN_SIGNING_KEY]")
@OUTPUT
@user_errors
def promote(proposal: str, allow_no_change: bool, threshold_text: str, allow_acceptance_change: bool,
            message: str | None, history_dir: str, deployments_dir: str, signing_key: str | None,
            output: str) -> None:
    """Record PROPOSAL's trialled candidate as the next revision of its deployment, with the trial's results
    attached (kinds bench, upgrade-trial, trial-current-N, trial-candidate-N).

    Refused (exit 1, nothing written) unless the verdict recomputed from the trial's results is gain (or
    no-change with --allow-no-change) and is the one trial.json records, proposal.json and
    candidate.lock.yaml are what was trialled, and the deployment's newest revision is still the one benched
    as current.
    """
    from stackpin.cli.comparison import threshold
    from stackpin.history.store import HistoryStore
    from stackpin.upgrade.promote import promote_candidate

    store = HistoryStore(Path(history_dir), signing_key=Path(signing_key) if signing_key else None)
    promoted = promote_candidate(proposal, store, Path(deployments_dir), allow_no_change=allow_no_change,
                                 message=message, threshold=threshold(threshold_text),
                                 allow_acceptance_change=allow_acceptance_change)
    recorded, revision = promoted.recorded, promoted.recorded.revision
    attached = [str(p) for p in promoted.attached]
    if output != "text":
        emit({"deployment": str(revision.deployment), "revision": revision.revision, "file": str(recorded.path),
              "stackDigest": revision.stack_digest, "message": revision.message, "attached": attached,
              "directory": str(recorded.directory), "files": list(recorded.files)}, output)
        return
    click.echo(f"recorded {recorded.path}  revision {revision.revision} of {revision.deployment}: "
               f"{revision.action_label} {revision.stack_digest}")
    click.echo(f"message: {revision.message}")
    for path in attached:
        click.echo(f"attached {path}")
    click.echo(f"rendered {recorded.directory}/  ({len(recorded.files)} files)")
