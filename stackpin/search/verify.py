"""Every pick checked before it is offered (issue 39, part 3): what the bed and the cluster verification
share. Each stack, the base and every pick, is locked (`stackpin lock`'s library, as `upgrade trial` locks a
candidate) and run through `engines check` (the pinned engine's own argument parsing and config
construction, on CPU); a pick the lock or the engine refuses is dropped with their own words. The picks left
are measured against the base (verify_bed.py on the Dynamo bed, verify_cluster.py on a real cluster), each
judged by `bench compare`'s verdict model and ranked by what was measured: tok/s per GPU at the SLO (single-
agent tok/s when no SLO is scored). A verdict of "inconclusive" is its own outcome, never a pass.

Files, beside each pick `DIR/NAME.yaml`: `NAME.lock.yaml` (its lock), `NAME.results/` (the base's and the
pick's bench results, `base-N.json`, `pick-N.json`) and `NAME.verify.json` (the verification record); the
base's lock is `DIR/<base>.search-base.lock.yaml`. Every file is written atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final, Literal

from stackpin.bench.compare import MAIN_METRICS, Comparison, Estimate
from stackpin.deploy.source import StackSource
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.models import CamelModel
from stackpin.upgrade.model import MetricVerdict
from stackpin.upgrade.model import Verdict as TrialVerdict
from stackpin.upgrade.trial import LockOptions, trial_verdict
from stackpin.yamlio import write_atomic

Note = Callable[[str], None]
RECORD_SUFFIX = ".verify.json"
RESULTS_SUFFIX = ".results"
BASE_LOCK_SUFFIX = ".search-base.lock.yaml"
VERIFY_API: Final = "stackpin.dev/v1alpha1"


class Outcome(StrEnum):
    gain = "gain"  # measured significantly better than the base on a headline, worse on none
    no_change = "no-change"  # measured, no significant difference
    regression = "regression"  # measured significantly worse on a headline
    inconclusive = "inconclusive"  # measured, but the evidence cannot decide: never a pass
    refused = "refused"  # the lock (validate) or the pinned engine refused it: never measured
    failed = "failed"  # measuring it failed (the bed, the cluster): never a pass

    @property
    def passed(self) -> bool:
        return self in (Outcome.gain, Outcome.no_change)


OUTCOMES = {TrialVerdict.gain: Outcome.gain, TrialVerdict.no_change: Outcome.no_change,
            TrialVerdict.regression: Outcome.regression, TrialVerdict.inconclusive: Outcome.inconclusive}


class BaseRefused(StackpinError):
    """The base itself does not lock, pass the engine check or measure: nothing can be judged against it."""

    exit_code = 1


@dataclass(frozen=True)
class VerifyOptions:
    """What both kinds of verification take: where references resolve (as `stackpin lock` takes them), the
    engine check's Python (None: $STACKPIN_ENGINE_PYTHON's or where `engines setup-check` builds it), runs
    of each side and the smallest change that counts."""

    lockdir: Path = Path("lockfiles")
    lock: LockOptions = LockOptions()
    engine_python: Path | None = None
    engine_timeout_s: float = 600.0
    runs: int = 3
    threshold: float = 0.05


@dataclass(frozen=True)
class Checked:
    """A stack locked and through the engine check: `refused` says by what (None: neither refused it)."""

    profile: Path
    lock_path: Path | None
    lock: StackLock | None
    refused: Literal["lock", "engines check"] | None = None
    problems: tuple[str, ...] = ()
    engine_checked: tuple[str, ...] = field(default=())  # "ok ROLE: vLLM 0.31.0" per pool

    @property
    def source(self) -> StackSource:
        assert self.lock is not None and self.lock_path is not None
        return StackSource(self.lock, origin=str(self.lock_path))


class PickVerification(CamelModel):
    """NAME.verify.json: what was checked and measured of one pick, and the outcome."""

    api_version: Literal["stackpin.dev/v1alpha1"] = VERIFY_API
    kind: Literal["PickVerification"] = "PickVerification"
    pick: str  # the pick's profile
    base: str  # the base's profile
    where: str  # "dynamo bed" or "cluster RACK"
    lock: str | None  # the pick's lockfile (None: the lock refused it)
    stack_digest: str | None
    base_lock: str
    base_digest: str
    engine_check: list[str]  # what the pinned engine said of each pool
    outcome: Outcome
    passed: bool  # gain or no-change: measured and not worse than the base; never when inconclusive
    problems: list[str]  # why it was refused or failed, in the lock's or the engine's own words
    runs: int
    trace: str
    slo: str | None
    threshold: float
    base_results: list[str]
    pick_results: list[str]
    metrics: list[MetricVerdict]  # bench compare's headlines: current = the base, candidate = the pick
    main_metric: str | None
    measured_metric: str | None  # what picks are ranked by: tok/s per GPU at the SLO, else single-agent tok/s
    measured: float | None  # the pick's value of it (a lower bound when censored: measured_text says)
    measured_text: str | None
    rank: int | None = None  # 1-based among the picks that passed, by `measured`; None for the others
    scratch_namespace: str | None = None  # cluster: where it was deployed (gone after)


@dataclass(frozen=True)
class Verification:
    base: Path
    where: str
    picks: tuple[tuple[Path, PickVerification], ...]  # (record file, record), in rank order


def pick_files(pick: Path) -> tuple[Path, Path, Path]:
    """(lock, results directory, record) of the pick `DIR/NAME.yaml`."""
    stem = pick.with_suffix("") if pick.suffix in (".yaml", ".yml") else pick
    return (stem.with_name(stem.name + ".lock.yaml"), stem.with_name(stem.name + RESULTS_SUFFIX),
            stem.with_name(stem.name + RECORD_SUFFIX))


def base_lock_file(base: Path, picks: Sequence[Path]) -> Path:
    where = picks[0].parent if picks else base.parent
    stem = base.with_suffix("").name if base.suffix in (".yaml", ".yml") else base.name
    return where / (stem + BASE_LOCK_SUFFIX)


def check_stack(profile: Path, lock_path: Path, options: VerifyOptions, note: Note) -> Checked:
    """Lock `profile` into `lock_path` and run every pool through its pinned engine's check. A lock refused
    (validate's errors) or an engine that would refuse or change the
    stack makes it `refused`, in their own words; an engine environment that cannot run at all raises
    (EngineCheckError, exit 2): that says nothing of the stack."""
    from stackpin.lock.lockfile import StackMismatch, render_lock
    from stackpin.lock.run import lock_stacks

    lock_path.unlink(missing_ok=True)  # a lock of an earlier verification must not outlive a refusal
    o = options.lock
    try:
        [lock] = lock_stacks([profile], options.lockdir, mirrors=dict(o.mirrors), oci_layout=o.oci_layout,
                             hf_cache=o.hf_cache, hf_endpoint=o.hf_endpoint, timeout=o.timeout, on_note=note,
                             reuse=False)
    except StackMismatch as exc:  # validate's errors: the stack does not hold together
        return Checked(profile, None, None, "lock", tuple(line.strip() for line in exc.lines()))
    write_atomic(lock_path, render_lock(lock))
    problems, said = engine_check(lock, options)
    return Checked(profile, lock_path, lock, "engines check" if problems else None, problems, said)


def engine_check(lock: StackLock, options: VerifyOptions) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(problems, one line per pool) from the pinned engine's own check of every pool, as `stackpin engines
    check` runs it."""
    import os

    from stackpin.enginecheck.check import lock_check
    from stackpin.enginecheck.envbuild import check_python

    spec = lock.stack_profile.spec
    engine, version = spec.engine.value, spec.engine_version
    given = options.engine_python or (Path(os.environ["STACKPIN_ENGINE_PYTHON"])
                                      if os.environ.get("STACKPIN_ENGINE_PYTHON") else None)
    python = check_python(engine, version, given)
    pools = lock_check(engine)(lock, python, timeout_s=options.engine_timeout_s)
    problems = tuple(f"{pool.role}: {p}" for pool in pools for p in pool.problems)
    said = tuple(f"{'ok' if pool.ok else 'refused'} {pool.role}: {engine} {version}" for pool in pools)
    return problems, said


def measured_of(comparison: Comparison) -> tuple[str | None, float | None, str | None]:
    """(headline, value, text) of the pick (side B) that picks are ranked by: the first of MAIN_METRICS the
    comparison has (tok/s per GPU at the SLO, else single-agent tok/s). A censored value ranks by its lower
    bound; the text says it is one."""
    for name in MAIN_METRICS:
        metric = next((m for m in comparison.metrics if m.name == name), None)
        if metric is not None:
            estimate: Estimate | None = metric.b
            if estimate is None:
                return name, None, None
            return name, estimate.low, estimate.text(lambda v: f"{v:.4g}")
    return None, None, None


def judged(record: PickVerification, comparison: Comparison) -> PickVerification:
    """`record` with bench compare's verdict (the one every decision uses) and what it is ranked by."""
    verdict, metrics, main = trial_verdict(comparison)
    outcome = OUTCOMES[verdict]
    name, value, text = measured_of(comparison)
    problems = list(record.problems) + (comparison.missing() if outcome is Outcome.inconclusive else [])
    return record.model_copy(update={"outcome": outcome, "passed": outcome.passed, "metrics": metrics,
                                     "main_metric": main, "measured_metric": name, "measured": value,
                                     "measured_text": text, "problems": problems})


def ranked(records: Sequence[tuple[Path, PickVerification]]) -> tuple[tuple[Path, PickVerification], ...]:
    """The picks that passed by what was measured, best first, numbered; then the inconclusive, the
    regressions, the failed and the refused, unnumbered (in the order given within each)."""
    order = [Outcome.inconclusive, Outcome.regression, Outcome.failed, Outcome.refused]
    passed = sorted((r for r in records if r[1].passed), key=lambda r: -(r[1].measured or 0.0))
    out = [(path, record.model_copy(update={"rank": i})) for i, (path, record) in enumerate(passed, 1)]
    for outcome in order:
        out += [(path, record.model_copy(update={"rank": None})) for path, record in records
                if record.outcome is outcome]
    return tuple(out)


def write_records(records: Sequence[tuple[Path, PickVerification]]) -> None:
    for path, record in records:
        write_atomic(path, record.model_dump_json(by_alias=True, indent=2) + "\n")


def unmeasured(checked: Checked, base: Checked, where: str, trace: str, slo: str | None, options: VerifyOptions,
               outcome: Outcome, problems: Sequence[str], namespace: str | None = None) -> PickVerification:
    """The record of a pick before (or without) its measurement."""
    assert base.lock is not None and base.lock_path is not None
    return PickVerification(
        pick=str(checked.profile), base=str(base.profile), where=where,
        lock=str(checked.lock_path) if checked.lock_path else None,
        stack_digest=checked.lock.stack_digest if checked.lock else None, base_lock=str(base.lock_path),
        base_digest=base.lock.stack_digest, engine_check=list(checked.engine_checked), outcome=outcome,
        passed=False, problems=list(problems), runs=options.runs, trace=trace, slo=slo,
        threshold=options.threshold, base_results=[], pick_results=[], metrics=[], main_metric=None,
        measured_metric=None, measured=None, measured_text=None, scratch_namespace=namespace)


def check_all(base: Path, picks: Sequence[Path], options: VerifyOptions, note: Note) -> tuple[Checked, list[Checked]]:
    """The base and every pick locked and engine-checked; the base refused is BaseRefused (exit 1)."""
    if not picks:
        raise StackpinError("no picks to verify")
    checked_base = check_stack(base, base_lock_file(base, picks), options, note)
    if checked_base.refused:
        raise BaseRefused(f"{base}: the base is refused by {checked_base.refused}: "
                          f"{'; '.join(checked_base.problems)}", "nothing can be judged against it")
    note(f"base {base}: locked ({checked_base.lock_path}), engines check ok")
    out = []
    for pick in picks:
        lock_path, results, record = pick_files(pick)
        record.unlink(missing_ok=True)  # no earlier verdict stays beside this verification's
        checked = check_stack(pick, lock_path, options, note)
        if checked.refused:
            note(f"pick {pick}: refused by {checked.refused}: {' '.join('; '.join(checked.problems).split())}")
        else:
            note(f"pick {pick}: locked ({checked.lock_path}), engines check ok")
        out.append(checked)
    return checked_base, out


def prefixed(note: Note, prefix: str) -> Note:
    return lambda message: note(prefix + message)


def fresh_results(pick: Path) -> Path:
    """The pick's results directory, emptied of an earlier verification's results."""
    _, results, _ = pick_files(pick)
    results.mkdir(parents=True, exist_ok=True)
    for stale in [*results.glob("base-*.json"), *results.glob("pick-*.json")]:
        stale.unlink()
    return results
