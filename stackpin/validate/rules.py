"""What a validation rule is and how one registers: severities, findings, hits, the context a rule
reads, and the `@rule` registry. The rule families (the sibling modules) build on this module alone;
stackpin.validate runs them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from stackpin.catalog import Catalog, Gpu, ModelFacts, Platform
from stackpin.catalog.flags import FlagCatalog
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import PoolTopology, Role, Topology
from stackpin.profile.tuning import ConfigDirectory
from stackpin.yamlio import FieldPath


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    severity: Severity
    path: str
    message: str
    hint: str | None = None
    location: str

    def __str__(self) -> str:
        text = f"{self.location}: {self.severity} {self.code} {self.path}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


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


Check = Callable[[Context], Iterable[Hit]]


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    title: str
    check: Check


RULES: dict[str, Rule] = {}


def rule(code: str, severity: Severity, title: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        if code in RULES:
            raise RuntimeError(f"duplicate rule code {code}")
        RULES[code] = Rule(code, severity, title, fn)
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
    return f"{text} (hint: {hit.hint})" if hit.hint else text


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
