"""`stackpin upgrade trial`: the current and the candidate stack of a proposal benched alike, and the
verdict.

The current stack is the deployment's newest revision when its history has one (`DEPLOYMENT@N`, what
is deployed), else the current profile's lock. The candidate profile is locked with `stackpin lock`'s
library into `<proposal>/candidate.lock.yaml`. Both are benched with one trace, one set of controls and
one SLO, `runs` times, alternating which goes first (current, candidate, then candidate, current, ...),
so that a drift of the bed over the trial weighs on both sides alike. `bench compare` judges the runs
(bootstrap intervals over runs); its verdict is the trial's, mapped onto `Verdict`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from stackpin.bench.compare import Comparison, compare, main_metric
from stackpin.bench.compare import Verdict as Decision
from stackpin.bench.controlled import BenchControls
from stackpin.bench.result import BenchResult
from stackpin.deploy.source import StackSource
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.models import CamelModel, read_json_model
from stackpin.upgrade.model import PROPOSAL_FILE, TRIAL_FILE, MetricVerdict, Proposal, Trial, Verdict
from stackpin.upgrade.trialbed import Bed, DynamoBed, SimBed, alternate, endpoints
from stackpin.yamlio import MAX_INPUT_BYTES, read_regular, write_atomic

CANDIDATE_LOCK = "candidate.lock.yaml"
RESULTS_DIR = "results"
# bench compare's verdicts, as a trial names them
VERDICTS = {Decision.regression: Verdict.regression, Decision.improvement: Verdict.gain,
            Decision.no_change: Verdict.no_change, Decision.inconclusive: Verdict.inconclusive}
M = TypeVar("M", bound=CamelModel)

class TrialRefused(StackpinError):
    """The proposal cannot be trialled or promoted as it stands (blocked, edited, overtaken): exit 1."""

    exit_code = 1


@dataclass(frozen=True)
class LockOptions:
    """Where the candidate's references resolve, as `stackpin lock` takes them."""

    mirrors: tuple[tuple[str, str], ...] = ()
    oci_layout: str | None = None
    hf_cache: str | None = None
    hf_endpoint: str | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class TrialOutcome:
    trial: Trial
    comparison: Comparison
    path: Path  # trial.json


def proposal_dir(arg: str) -> Path:
    """A proposal directory, or its proposal.json."""
    path = Path(arg)
    return path.parent if path.name == PROPOSAL_FILE and not path.is_dir() else path


def read_proposal(directory: Path) -> tuple[Proposal, bytes]:
    """proposal.json of `directory` and its bytes (what the trial's sha256 is of)."""
    path = directory / PROPOSAL_FILE
    try:
        raw = read_regular(path, MAX_INPUT_BYTES)
    except OSError as exc:
        raise StackpinError(f"{path}: cannot read: {exc.strerror or exc}", "give a proposal directory "
                            "(stackpin upgrade propose writes one) or its proposal.json") from None
    return _read_json(raw, Proposal, path), raw


def sha256_hex(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def current_source(proposal: Proposal, lockdir: Path, history: Path) -> StackSource:
    """What is deployed: the deployment's newest revision, else the current profile's (current) lock."""
    from stackpin.deploy.source import resolve_source
    from stackpin.history.model import DeploymentKey
    from stackpin.history.store import HistoryStore

    store = HistoryStore(history)
    key = next((k for k in store.keys() if str(k) == proposal.deployment), None)
    newest = store.newest(key) if key is not None else None
    if key is not None and newest is not None:
        return StackSource(newest.lock, origin=f"{key}@{newest.revision}", revision=newest.revision)
    from stackpin.lock.lockfile import lock_path

    source = resolve_source(proposal.current_profile, lockdir, history)  # refused unless its lock is current
    source = StackSource(source.lock, origin=str(lock_path(lockdir, source.lock.metadata.name)))
    if str(DeploymentKey.of_lock(source.lock)) != proposal.deployment:
        raise TrialRefused(f"{proposal.current_profile} is a stack of {DeploymentKey.of_lock(source.lock)}, not of "
                           f"the proposal's deployment {proposal.deployment}")
    return source


def trialable(proposal: Proposal, directory: Path, step: str = "trial") -> str:
    """The candidate profile; a blocked proposal has none to trial (exit 1, before anything is written)."""
    if proposal.blocked or proposal.candidate_profile is None:
        first = proposal.blockers[0] if proposal.blockers else None
        why = f"{first.path}: {first.message}" if first else "it has no candidate profile"
        raise TrialRefused(f"{directory / PROPOSAL_FILE}: the proposal is blocked ({why}); nothing to {step}")
    return proposal.candidate_profile


def lock_candidate(proposal: Proposal, directory: Path, lockdir: Path, options: LockOptions,
                   on_note: Callable[[str], None] | None = None) -> tuple[Path, StackLock]:
    """Lock the candidate profile into `<proposal>/candidate.lock.yaml` (atomically), named relative to the
    project root as `lockdir`'s locks are."""
    from stackpin.history.model import DeploymentKey
    from stackpin.lock.lockfile import render_lock
    from stackpin.lock.run import lock_stacks

    candidate = trialable(proposal, directory)
    [lock] = lock_stacks([Path(candidate)], lockdir, mirrors=dict(options.mirrors),
                         oci_layout=options.oci_layout, hf_cache=options.hf_cache, hf_endpoint=options.hf_endpoint,
                         timeout=options.timeout, on_note=on_note, reuse=False)
    if str(DeploymentKey.of_lock(lock)) != proposal.deployment:
        # promote would record it in another deployment's history
        raise TrialRefused(f"{proposal.candidate_profile} is a stack of {DeploymentKey.of_lock(lock)}, not of the "
                           f"proposal's deployment {proposal.deployment}")
    path = directory / CANDIDATE_LOCK
    write_atomic(path, render_lock(lock))
    return path, lock


def trial_verdict(comparison: Comparison) -> tuple[Verdict, list[MetricVerdict], str | None]:
    """compare's verdict (bench.compare.decide) as the trial's, each headline's, and the headline the trial
    is summed up by."""
    metrics = [MetricVerdict(name=m.name, unit=m.unit, current=m.a.value if m.a else None,
                             candidate=m.b.value if m.b else None, change=m.change, low=m.low, high=m.high,
                             verdict=VERDICTS[m.verdict], why=m.why) for m in comparison.metrics]
    main = main_metric(comparison)
    return VERDICTS[comparison.verdict], metrics, main.name if main else None


def judge_results(current: list[BenchResult], candidate: list[BenchResult], threshold: float,
                  allow_acceptance_change: bool = False) -> Comparison:
    """The trial's comparison: the current stack's runs (A) against the candidate's (B); what run_trial
    records and what promote recomputes from the same files."""
    return compare(current, candidate, threshold=threshold, allow_acceptance_change=allow_acceptance_change)


def run_trial(arg: str, bed: Bed, controls: BenchControls, trace_name: str, *, slo_text: str | None = None,
              runs: int = 3, threshold: float = 0.05, lockdir: Path = Path("lockfiles"),
              history: Path = Path("history"), lock_options: LockOptions = LockOptions(),
              on_note: Callable[[str], None] | None = None, allow_acceptance_change: bool = False) -> TrialOutcome:
    """Lock the candidate, bench both sides `runs` times, compare, write trial.json and results/. The SLO
    is `slo_text` as bench run reads it (absent: the current profile's spec.service), one for both sides."""
    from stackpin.bench.controlled import compared_slo

    directory = proposal_dir(arg)
    proposal, raw = read_proposal(directory)
    note = on_note or (lambda _: None)
    trialable(proposal, directory)
    # A trial that stops half way must not leave an earlier trial's verdict beside its own results.
    (directory / TRIAL_FILE).unlink(missing_ok=True)
    current = current_source(proposal, lockdir, history)
    controls = replace(controls, slo=compared_slo(slo_text, current.lock, controls.agents))
    candidate_path, candidate_lock = lock_candidate(proposal, directory, lockdir, lock_options, note)
    candidate = StackSource(candidate_lock, origin=str(candidate_path))
    results = directory / RESULTS_DIR
    results.mkdir(exist_ok=True)
    for stale in [*results.glob("current-*.json"), *results.glob("candidate-*.json")]:
        stale.unlink()  # a trial's results are its own: none of an earlier trial's stays beside them
    with endpoints(bed, current, candidate) as urls:
        measured = dict(zip(("current", "candidate"), alternate(urls, (current, candidate), ("current", "candidate"),
                                                                 controls, runs, results, note), strict=True))
    comparison = judge_results([r for _, r in measured["current"]], [r for _, r in measured["candidate"]],
                               threshold, allow_acceptance_change)
    verdict, metrics, main = trial_verdict(comparison)
    simulated = all(r.simulation is not None for side in measured.values() for _, r in side)
    trial = Trial(
        proposal_sha256=sha256_hex(raw), current_lock=current.origin, current_digest=current.lock.stack_digest,
        current_revision=current.revision, candidate_lock=str(candidate_path),
        candidate_digest=candidate_lock.stack_digest, simulated=simulated, bed=_bed_name(bed, measured), runs=runs,
        trace=trace_name, slo=_slo_text(controls), current_results=[str(p) for p, _ in measured["current"]],
        candidate_results=[str(p) for p, _ in measured["candidate"]], metrics=metrics, verdict=verdict,
        main_metric=main, threshold=threshold, allow_acceptance_change=allow_acceptance_change)
    path = directory / TRIAL_FILE
    write_atomic(path, trial_json(trial))
    return TrialOutcome(trial, comparison, path)


def trial_json(trial: Trial) -> str:
    return trial.model_dump_json(by_alias=True, indent=2) + "\n"


def read_trial(directory: Path) -> Trial:
    path = directory / TRIAL_FILE
    try:
        raw = read_regular(path, MAX_INPUT_BYTES)
    except FileNotFoundError:  # not trialled yet: a refusal (exit 1), not bad input
        raise TrialRefused(f"{path}: no such file", "run stackpin upgrade trial first") from None
    except OSError as exc:  # a FIFO, a directory, too large: bad input (exit 2)
        raise StackpinError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return _read_json(raw, Trial, path)


def _read_json(raw: bytes, model: type[M], path: Path) -> M:
    """A proposal's or a trial's bytes as its record: every problem at its line and column (exit 2)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StackpinError(f"{path}: cannot read: {exc}") from None
    return read_json_model(text, model, str(path))


def _slo_text(controls: BenchControls) -> str | None:
    from stackpin.plan.slo import slo_text

    return None if controls.slo is None else slo_text(controls.slo)


def _bed_name(bed: Bed, measured: dict[str, list[tuple[Path, BenchResult]]]) -> str:
    if isinstance(bed, SimBed):
        return "sim"
    if isinstance(bed, DynamoBed):
        return "dynamo"
    backends = {r.simulation.backend for side in measured.values() for _, r in side if r.simulation is not None}
    return "dynamo" if backends == {"dynamo"} else f"current {bed.current}, candidate {bed.candidate}"
