"""`stackpin upgrade promote`: the trialled candidate as the next revision, only on a measured gain.

Everything is checked before anything is written: the trial's verdict, that proposal.json is the one
trialled (its sha256), that candidate.lock.yaml is the lock benched (its digest), and that every result
the trial names reads back as a result of its side's stack. The newest revision is checked again holding
the deployment's lock (history.record's `check`): a promote or rollback since the trial means the
current stack it was measured against is no longer what is deployed. The results and the trial are
attached to the new revision in record's `then`, holding the same lock: if one fails, record takes the
revision back (file, head and deployment directory) and the attachments made so far are removed, so a
revision never stands with half its evidence. A process killed between the revision and its attachments
leaves the revision with fewer of them (`stackpin bench attach` adds the result afterwards).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stackpin.backends import engine
from stackpin.bench.compare import Comparison, main_metric
from stackpin.bench.result import BenchResult
from stackpin.history.record import Recorded
from stackpin.history.store import HistoryStore
from stackpin.upgrade.model import PROPOSAL_FILE, TRIAL_FILE, Proposal, Trial, Verdict
from stackpin.upgrade.trial import (
    CANDIDATE_LOCK,
    VERDICTS,
    TrialRefused,
    judge_results,
    proposal_dir,
    read_proposal,
    read_trial,
    sha256_hex,
    trialable,
)

# Attachment kinds: `bench` is what `stackpin bench attach` writes (a result file verbatim), so `history`
# shows the candidate's headline and `rollback --if-regressed` compares it with the previous revision's.
BENCH_KIND = "bench"
TRIAL_KIND = "upgrade-trial"


def default_message(proposal: Proposal, trial: Trial, comparison: Comparison) -> str:
    """`Upgrade Dynamo 1.6.1 -> 1.7.0 (vLLM ...): trial gain, <main headline> +12.0% [+9.1%, +14.8%]`, the
    verdict and headline recomputed from the trial's results (never the words trial.json holds)."""
    pairs = [("Dynamo", proposal.current.dynamo, proposal.candidate.dynamo),
             (engine(proposal.current.engine).label, proposal.current.release, proposal.candidate.release),
             ("FlashInfer", proposal.current.flashinfer, proposal.candidate.flashinfer),
             ("NIXL", proposal.current.nixl, proposal.candidate.nixl)]
    changed = [f"{name} {old} -> {new}" for name, old, new in pairs if old != new]
    what = ", ".join(changed) if changed else "the candidate stack (same engine releases)"
    main = main_metric(comparison)
    quoted = ""
    if main is not None and main.change is not None:
        interval = f" [{main.low:+.1%}, {main.high:+.1%}]" if main.low is not None and main.high is not None else ""
        quoted = f", {main.name} {main.change:+.1%}{interval}"
    where = "simulated" if trial.simulated else trial.bed
    return f"Upgrade {what}: trial {VERDICTS[comparison.verdict].value}{quoted} ({trial.runs} runs, {where})"


@dataclass(frozen=True)
class Promoted:
    recorded: Recorded
    attached: tuple[Path, ...]  # beside the revision file: 00000N.<kind>.json


def promote_candidate(arg: str, store: HistoryStore, deployments: Path, *, allow_no_change: bool = False,
                      message: str | None = None, env: Mapping[str, str] | None = None,
                      threshold: float = 0.05, allow_acceptance_change: bool = False) -> Promoted:
    """Record the proposal's candidate lock as the next revision of its deployment, with the trial's
    results attached; refused (TrialRefused, exit 1, nothing written) unless the verdict recomputed from the
    trial's results at `threshold` allows it and agrees with the one trial.json records. Sides whose measured
    draft acceptance differs are refused (AcceptanceDiffers, exit 2) unless `allow_acceptance_change`: this
    command's own, never trial.json's word."""
    from stackpin.history.attachments import attach_held
    from stackpin.history.model import Revision
    from stackpin.history.record import promote
    from stackpin.lock.lockfile import read_lock

    directory = proposal_dir(arg)
    proposal, raw = read_proposal(directory)
    trialable(proposal, directory, "promote")  # a blocked proposal says so, not "run the trial first"
    trial = read_trial(directory)
    if sha256_hex(raw) != trial.proposal_sha256:
        raise TrialRefused(f"{directory / PROPOSAL_FILE} changed since the trial (sha256 {sha256_hex(raw)[:12]}, "
                           f"trialled {trial.proposal_sha256[:12]}): not promoted; trial it again")
    candidate_path = directory / CANDIDATE_LOCK
    candidate = read_lock(candidate_path)
    if candidate.stack_digest != trial.candidate_digest:
        raise TrialRefused(f"{candidate_path} is stack {candidate.stack_digest}, but the trial benched "
                           f"{trial.candidate_digest}: not promoted; trial it again")
    results = {"current": _results(trial.current_results, trial.current_digest),
               "candidate": _results(trial.candidate_results, trial.candidate_digest)}
    if not results["candidate"] or not results["current"]:
        raise TrialRefused(f"{directory}: the trial names no {'candidate' if not results['candidate'] else 'current'} "
                           "result: not promoted")
    # The verdict is recomputed from the results, at this command's threshold, never read from trial.json.
    comparison = judge_results([r for r, _ in results["current"]], [r for r, _ in results["candidate"]], threshold,
                               allow_acceptance_change)
    verdict = VERDICTS[comparison.verdict]
    if verdict != trial.verdict:
        again = (f"--threshold {trial.threshold:.0%} judges as the trial did" if trial.threshold != threshold
                 else "trial it again")
        raise TrialRefused(f"{directory / TRIAL_FILE} says {trial.verdict.value}, but its results give "
                           f"{verdict.value} at the {threshold:.0%} threshold: not promoted; {again}")
    allowed = {Verdict.gain} | ({Verdict.no_change} if allow_no_change else set())
    if verdict not in allowed:
        hint = " (--allow-no-change records a candidate that measured the same)" if verdict == Verdict.no_change \
            else "; " + "; ".join(comparison.missing()) if verdict == Verdict.inconclusive else ""
        raise TrialRefused(f"{directory}: the trial's results give {verdict.value}: not promoted{hint}")
    attachments = [(BENCH_KIND, results["candidate"][0][1]), (TRIAL_KIND, (directory / "trial.json").read_text(
        encoding="utf-8"))] + [(f"trial-{side}-{n}", text) for side, texts in results.items()
                               for n, (_, text) in enumerate(texts, 1)]
    text = message if message is not None else default_message(proposal, trial, comparison)

    def still_current(revision: Revision) -> None:
        benched = trial.current_revision or 0  # 0: the history had no revision; the lockfile was benched
        if revision.revision - 1 != benched:
            now = f"revision {revision.revision - 1}" if revision.revision > 1 else "no revision"
            was = f"revision {benched}" if benched else f"{trial.current_lock} (no revision then)"
            raise TrialRefused(f"deployment {revision.deployment} is at {now}, but the trial benched {was} as the "
                               "current stack: not promoted; trial it again against what is deployed now")

    attached: list[Path] = []

    def attach_all(revision: Revision) -> None:
        made: list[Path] = []
        try:
            for kind, body in attachments:
                path, what = attach_held(store, revision.deployment, revision.revision, kind, body)
                attached.append(path)
                if what == "created":
                    made.append(path)
        except BaseException:
            for path in made:  # record takes the revision back; what was attached to it goes with it
                path.unlink(missing_ok=True)
            raise

    recorded = promote(candidate, text, store, deployments, env=env, check=still_current, then=attach_all)
    return Promoted(recorded, tuple(attached))


def _results(paths: list[str], digest: str) -> list[tuple[BenchResult, str]]:
    """Each result the trial names, read back with its request logs (an edited figure is caught) and of the
    stack it says."""
    from stackpin.bench.resultfile import read_evidence

    out = []
    for name in paths:
        result = read_evidence(Path(name))
        if result.stack.digest != digest:
            raise TrialRefused(f"{name} measured stack {result.stack.digest}, not the trial's {digest}: not promoted")
        out.append((result, Path(name).read_text(encoding="utf-8")))
    return out
