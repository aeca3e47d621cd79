"""Library twin of `stackpin validate`: load profiles, run the rules, summarize. No printing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackpin.backends import engine_of
from stackpin.errors import InputError, Location, Problem, StackpinError
from stackpin.profile.loader import LoadedProfile, load_profile
from stackpin.records import Record
from stackpin.validate import Finding, Severity, run_rules
from stackpin.validate.summary import StackSummary, summarize

if TYPE_CHECKING:
    from stackpin.validate.upgrade import Target


class ProfileReport(Record, frozen=True):
    file: str
    name: str
    summary: StackSummary
    findings: tuple[Finding, ...]
    upgrade: str | None = None  # "vllm 0.31.0 -> 0.33.0" when the findings are an upgrade's
    engine_label: str = ""  # the stack's engine as people write it (the text summary's caption), not in -o json

    def count(self, severity: Severity) -> int:
        """Findings of this severity that count: not acknowledged (spec.acknowledge)."""
        return sum(1 for f in self.findings if f.severity == severity and f.acknowledged is None)

    @property
    def acknowledged(self) -> int:
        return sum(1 for f in self.findings if f.acknowledged is not None)

    def to_data(self) -> dict[str, Any]:
        data = {**super().to_data(), "summary": self.summary.to_data()}  # its own to_data leaves a key out
        data.pop("engineLabel", None)
        data.pop("engine_label", None)
        return data


class CheckResult(Record, frozen=True):
    reports: tuple[ProfileReport, ...]
    input_errors: tuple[str, ...]

    def to_data(self) -> dict[str, Any]:
        """What `validate -o json` prints."""
        return {**super().to_data(), "reports": [r.to_data() for r in self.reports]}

    def failed(self, fail_on: Severity = Severity.error) -> bool:
        return any(f.counts(fail_on) for r in self.reports for f in r.findings)


def duplicate_names(loaded: Sequence[LoadedProfile]) -> None:
    """Lockfiles and manifests are named after metadata.name: two profiles may not share one."""
    seen: dict[str, LoadedProfile] = {}
    problems = []
    for item in loaded:
        first = seen.setdefault(item.profile.name, item)
        if first is not item:
            problems.append(Problem(item.locate(("metadata", "name")), "metadata.name",
                                    f"{item.profile.name!r} is also the name of {first.path}; lockfiles and "
                                    "manifests are named after it"))
    if problems:
        raise InputError(problems)


def check_profiles(paths: Iterable[str | Path], upgrade_to: Target | None = None) -> CheckResult:
    """Validate every profile; bad input in one file does not hide findings in the others. With
    `upgrade_to` (an engine and its release), the findings are what moving each profile to it breaks or
    changes; a profile on another engine is bad input."""
    from stackpin.validate.upgradecheck import upgrade_findings

    reports, errors, loaded_all = [], [], []
    for path in paths:
        try:
            loaded = load_profile(path)
        except StackpinError as exc:
            errors.extend(exc.lines())
            continue
        loaded_all.append(loaded)
        try:  # an acknowledgement that may not stand is bad input too
            runs = engine_of(loaded.profile)
            if upgrade_to is None:
                findings, upgrade = run_rules(loaded), None
            elif upgrade_to.engine != runs.name:
                raise InputError([Problem(loaded.locate(("spec", "engine")), "spec.engine",
                                          f"the stack runs {runs.label}; --upgrade-to {upgrade_to} names another "
                                          f"engine (an engine change is a new stack: give {runs.name}==X here)")])
            else:
                findings = upgrade_findings(loaded, upgrade_to.version)
                upgrade = f"{runs.name} {loaded.profile.spec.engine_version} -> {upgrade_to.version}"
        except InputError as exc:
            errors.extend(exc.lines())
            continue
        reports.append(ProfileReport(file=str(path), name=loaded.profile.name, summary=summarize(loaded.profile),
                                     findings=tuple(findings), upgrade=upgrade,
                                     engine_label=runs.label))
    try:
        duplicate_names(loaded_all)
    except InputError as exc:
        errors.extend(exc.lines())
    return CheckResult(reports=tuple(reports), input_errors=tuple(errors))


def expand_profile_args(args: Iterable[str]) -> list[Path]:
    """Files as given; directories expand to their profiles (files starting with '_' are bases)."""
    out: list[Path] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.y*ml") if not p.name.startswith("_"))
            if not found:
                raise InputError([Problem(Location(arg), "", "directory holds no *.yaml profiles")])
            out.extend(found)
        else:
            out.append(path)
    return out

