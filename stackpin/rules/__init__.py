"""What a validation rule is and how one registers: severities, findings, hits, the context a rule
reads, and the `@rule` registry. The rule families build on this module alone: stackpin.validate's own
(every stack's rules) and each serving engine's (stackpin.backends, an engine's `rule_modules`);
stackpin.validate runs them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Literal

import msgspec

from stackpin.catalog import Catalog, Gpu, ModelFacts, Platform
from stackpin.catalog.flags import FlagCatalog
from stackpin.errors import escape_controls
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import PoolTopology, Role, Topology
from stackpin.profile.tuning import ConfigDirectory
from stackpin.records import Record
from stackpin.yamlio import FieldPath


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class Acknowledged(Record, frozen=True):
    """The spec.acknowledge entry that accepts a finding: its reason and where it is written."""

    reason: str
    location: str


class Finding(Record, frozen=True, kw_only=True):  # kw_only again for mypy: location follows hint's default
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
        text = f"{text} (acknowledged: {self.acknowledged.reason})" if self.acknowledged else text
        # A message quotes the profile's values (an engine flag's value, a patch's keys): one finding, one line,
        # whatever they hold; a line break in a value must not print as a finding of its own.
        return escape_controls(text)

    def counts(self, fail_on: Severity) -> bool:
        """Whether this finding makes a check with --fail-on `fail_on` fail."""
        levels = {Severity.error} if fail_on == Severity.error else {Severity.error, Severity.warning}
        return self.acknowledged is None and self.severity in levels


class Hit(msgspec.Struct, frozen=True):
    path: FieldPath
    message: str
    hint: str | None = None
    severity: Severity | None = None


class Context(msgspec.Struct, frozen=True):
    profile: StackProfile
    catalog: Catalog
    platform: Platform
    gpu: Gpu
    model_key: str | None
    model: ModelFacts | None
    topology: Topology
    # The pinned autotune cache's config directories, once its contents are known (a lock records
    # them); None before (`stackpin validate` of a profile), and the rules that need them stay silent.
    autotune_cache: tuple[ConfigDirectory, ...] | None = None
    # During `validate --upgrade-to`: the profile as written; `profile` is then the one moved to the
    # target release (stackpin.validate.upgrade). None otherwise, and the upgrade rules stay silent.
    upgrade_from: StackProfile | None = None
    # What the other rules found: set for the rules registered with reads_findings, which run after them.
    findings: tuple[Finding, ...] | None = None
    # The flag catalog of the stack's pinned engine release (stackpin.backends), when stackpin has extracted it:
    # what engineArgs are checked against, and what an engine's own rules read (its kernels, speculative methods,
    # CUDA graph modes, precision).
    engine_catalog: FlagCatalog | None = None


Check = Callable[[Context], Iterable[Hit]]


class Rule(msgspec.Struct, frozen=True):
    code: str
    severity: Severity
    title: str
    check: Check
    # An error rule whose hits are warnings in some stacks says when (`stackpin rules` shows it).
    warning_when: str | None = None
    reads_findings: bool = False  # runs after every other rule, with ctx.findings set
    # Why spec.acknowledge may not accept its findings; None where it may (its warnings and infos).
    refuse_ack: str | None = None
    engine: str | None = None  # None: every stack's rule; else only stacks running that engine

    def applies(self, ctx: Context) -> bool:
        return self.engine is None or self.engine == ctx.profile.spec.engine.value

    @property
    def acknowledgeable(self) -> bool:
        return self.refuse_ack is None


RULES: dict[str, Rule] = {}
ERROR_NOT_ACKNOWLEDGED = "it is an error, a stack that fails to start or does not run what it says; fix it instead"


def rule(code: str, severity: Severity, title: str, *, warning_when: str | None = None,
         reads_findings: bool = False, acknowledge: Literal[True] | str | None = None,
         engine: str | None = None) -> Callable[[Check], Check]:
    """Register a rule. `acknowledge`: True where spec.acknowledge may accept its findings, or why not.
    `engine`: the serving engine whose own knobs the rule reads (its catalog's backends, methods, defaults);
    it runs only for stacks on that engine.
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
        RULES[code] = Rule(code, severity, title, fn, warning_when, reads_findings, refuse, engine)
        return fn

    return register


def dotted(path: FieldPath) -> str:
    """`spec.placement.pools.decode` (list indices as `[0]`): how a finding names its field."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def hit_text(code: str, hit: Hit) -> str:
    """A hit of rule `code` worded as validate prints its finding, less the location: how render
    states a rule it checks again (a lock made around validation must not render)."""
    severity = hit.severity or RULES[code].severity
    text = f"{severity} {code} {dotted(hit.path)}: {hit.message}"
    return escape_controls(f"{text} (hint: {hit.hint})" if hit.hint else text)


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
