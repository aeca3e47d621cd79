"""Profile validation: rules with stable codes, run on the merged profile against the catalog.

Each family of rules lives in its own module and registers with `@rule`. A rule is a generator of
`Hit`s; the runner turns them into `Finding`s with the rule's code and the file position of the
field. Severity is the rule's unless a hit says otherwise (for example an error that becomes a
warning once the profile states the fallback explicitly).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict

from stackpin.catalog import Catalog, Gpu, ModelFacts, Platform, load_catalog
from stackpin.catalog.flags import FlagCatalog, vllm_catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.profile.loader import LoadedProfile
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import PoolTopology, Role, Topology, topology_of
from stackpin.profile.tuning import ConfigDirectory
from stackpin.yamlio import FieldPath


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


_ORDER = {Severity.error: 0, Severity.warning: 1, Severity.info: 2}


class Acknowledged(BaseModel):
    """The spec.acknowledge entry that accepts a finding: its reason and where it is written."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    location: str


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    severity: Severity
    path: str
    message: str
    hint: str | None = None
    location: str
    acknowledged: Acknowledged | None = None  # shown, but not counted by --fail-on

    def __str__(self) -> str:
        text = f"{self.location}: {self.severity} {self.code} {self.path}: {self.message}"
        text = f"{text} (hint: {self.hint})" if self.hint else text
        return f"{text} (acknowledged: {self.acknowledged.reason})" if self.acknowledged else text

    def counts(self, fail_on: Severity) -> bool:
        """Whether this finding makes a check with --fail-on `fail_on` fail."""
        levels = {Severity.error} if fail_on == Severity.error else {Severity.error, Severity.warning}
        return self.acknowledged is None and self.severity in levels


@dataclass(frozen=True)
class Hit:
    path: FieldPath
    message: str
    hint: str | None = None
    severity: Severity | None = None


@dataclass(frozen=True)
class Context:
    profile: StackProfile
    catalog: Catalog
    platform: Platform
    gpu: Gpu
    model_key: str | None
    model: ModelFacts | None
    vllm: FlagCatalog | None  # the pinned vLLM's flag catalog, when stackpin has extracted it
    topology: Topology
    # The pinned autotune cache's config directories, once its contents are known (a lock records
    # them); None before (`stackpin validate` of a profile), and the rules that need them stay silent.
    autotune_cache: tuple[ConfigDirectory, ...] | None = None
    # During `validate --upgrade-to`: the profile as written; `profile` is then the one moved to the
    # target release (stackpin.validate.upgrade). None otherwise, and the upgrade rules stay silent.
    upgrade_from: StackProfile | None = None
    # What the other rules found: set for the rules registered with reads_findings, which run after them.
    findings: tuple[Finding, ...] | None = None


Check = Callable[[Context], Iterable[Hit]]


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    title: str
    check: Check
    # An error rule whose hits are warnings in some stacks says when (`stackpin rules` shows it).
    warning_when: str | None = None
    reads_findings: bool = False  # runs after every other rule, with ctx.findings set
    # Why spec.acknowledge may not accept its findings; None where it may (its warnings and infos).
    refuse_ack: str | None = None

    @property
    def acknowledgeable(self) -> bool:
        return self.refuse_ack is None


RULES: dict[str, Rule] = {}
ERROR_NOT_ACKNOWLEDGED = "it is an error, a stack that fails to start or does not run what it says; fix it instead"


def rule(code: str, severity: Severity, title: str, *, warning_when: str | None = None,
         reads_findings: bool = False, acknowledge: Literal[True] | str | None = None) -> Callable[[Check], Check]:
    """Register a rule. `acknowledge`: True where spec.acknowledge may accept its findings, or why not.
    By default an error rule's may not (ERROR_NOT_ACKNOWLEDGED) and a warning or info rule's may; an
    error rule allows it only for the warnings `warning_when` describes, where the stack still starts."""
    def register(fn: Check) -> Check:
        if code in RULES:
            raise RuntimeError(f"duplicate rule code {code}")
        if acknowledge is None:
            refuse = ERROR_NOT_ACKNOWLEDGED if severity == Severity.error else None
        else:
            refuse = None if acknowledge is True else acknowledge
        if refuse is None and severity == Severity.error and warning_when is None:
            raise RuntimeError(f"{code}: an error rule is acknowledgeable only for the warnings it says it gives")
        RULES[code] = Rule(code, severity, title, fn, warning_when, reads_findings, refuse)
        return fn

    return register


def _load_rules() -> None:
    # Importing the family modules registers their rules.
    from stackpin.validate import (  # noqa: F401
        acknowledge,
        autotune,
        engineargs,
        graphs,
        kernels,
        memory,
        parallelism,
        placement,
        precision,
        provenance,
        serving,
        speculative,
        upgrade,
        versions,
    )


def context_for(profile: StackProfile, catalog: Catalog | None = None, *,
                autotune_cache: Sequence[ConfigDirectory] | None = None,
                upgrade_from: StackProfile | None = None) -> Context:
    catalog = catalog or load_catalog()
    platform = catalog.platforms[profile.spec.target.platform]
    found = catalog.model_for(profile.spec.model.id)
    return Context(profile, catalog, platform, catalog.gpus[platform.gpu],
                   found[0] if found else None, found[1] if found else None, vllm_catalog(profile.spec.versions.vllm),
                   topology_of(profile, catalog), None if autotune_cache is None else tuple(autotune_cache),
                   upgrade_from)


def dotted(path: FieldPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def run_rules(loaded: LoadedProfile, catalog: Catalog | None = None, *,
              autotune_cache: Sequence[ConfigDirectory] | None = None,
              upgrade_from: StackProfile | None = None) -> list[Finding]:
    """All findings for one loaded profile, errors first, then by position in the file, those that
    spec.acknowledge accepts marked so. `autotune_cache`: the pinned cache's config directories where
    they are known (lock, render); `upgrade_from`: the profile as written, when `loaded` is it moved to
    another release. Raises InputError for an acknowledgement that may not stand (an unknown code, an
    error)."""
    _load_rules()
    from stackpin.validate.acknowledge import acknowledged, check_acknowledgements

    check_acknowledgements(loaded)
    keyed: list[tuple[tuple[int, str, int, int, str, str], Finding]] = []
    # The profile's own catalog directories (spec.catalogPath) are searched first by every rule.
    with profile_catalogs(loaded.profile.spec.catalog_path, str(loaded.locate(("spec", "catalogPath")))):
        ctx = context_for(loaded.profile, catalog, autotune_cache=autotune_cache, upgrade_from=upgrade_from)
        for after in (False, True):
            if after:
                ctx = replace(ctx, findings=tuple(finding for _, finding in keyed))
            for r in RULES.values():
                if r.reads_findings != after:
                    continue
                for hit in r.check(ctx):
                    loc = loaded.locate(hit.path)
                    finding = Finding(code=r.code, severity=hit.severity or r.severity, path=dotted(hit.path),
                                      message=hit.message, hint=hit.hint, location=str(loc))
                    keyed.append(((_ORDER[finding.severity], loc.file, loc.line, loc.col, r.code, finding.path),
                                  finding))
    findings = [finding for _, finding in sorted(keyed, key=lambda kv: kv[0])]
    # During an upgrade an error the move causes is reported as it is, never refused for an acknowledgement.
    return acknowledged(loaded, findings, refuse_errors=upgrade_from is None)


def pool_path(role: Role) -> tuple[str, ...]:  # all keys: a FieldPath that joins with "."
    return ("spec", "placement", "pools", role)


def pools(ctx: Context) -> Iterator[tuple[Role, tuple[str, ...], PoolTopology]]:
    """(role, YAML path, pool shape) for every pool the placement runs."""
    for pool in ctx.topology.pools:
        yield pool.role, pool_path(pool.role), pool


def choices_hint(value: str, choices: Iterable[str], source: str) -> str:
    """Name the closest valid choices instead of dumping dozens of them."""
    import difflib

    options = list(choices)
    close = difflib.get_close_matches(value, options, n=3, cutoff=0.5)
    if len(options) <= 8:
        return f"one of: {', '.join(options)}"
    near = f"closest: {', '.join(close)}; " if close else ""
    return f"{near}{len(options)} choices in {source}"


def all_rules() -> list[Rule]:
    _load_rules()
    return [RULES[c] for c in sorted(RULES)]
