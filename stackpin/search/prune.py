"""Every candidate through every validate rule (`stackpin.validate.run_rules`, the entry `stackpin validate`
uses, the engine's start-up facts included) before anything predicts it.

A candidate is pruned by an error, or by a warning whose rule the base does not warn about: a pick never
brings a warning the stack did not already carry (the base's own warnings are the base's, and stay). One
exception, said in the pick's label and proposal: a candidate that cannot keep the base's pinned autotune cache
tunes at start until one is captured for it, which is SP203's warning. What pruned it is counted by rule code;
a candidate the profile schema refuses counts as `schema`.

These are every rule `stackpin lock` applies: lock validates each profile with `run_rules` as here, then once
more with the pinned autotune cache's config directories (SP205). A candidate keeps the base's cache only
when it runs the base's engine config in every pool (space.py `engine_config`), so SP205 says of it what it
says of the base; every other candidate has no cache (space.py `without_cache`) and SP205 has nothing to check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from stackpin.errors import InputError, StackpinError
from stackpin.profile.loader import LoadedProfile
from stackpin.profile.model import StackProfile
from stackpin.records import load
from stackpin.search.space import Candidate
from stackpin.validate import Finding, Severity, run_rules

SCHEMA = "schema"  # the typed profile refused the document (the rule count's key for it)
RECAPTURE_WARNINGS = frozenset({"SP203"})  # autotune at every start: what a pick needing a new capture runs


@dataclass(frozen=True)
class Checked:
    candidate: Candidate
    profile: StackProfile | None  # None: refused
    findings: tuple[Finding, ...]
    pruned_by: tuple[str, ...]  # rule codes (or SCHEMA) that prune it; empty: it survives
    reason: str  # the first pruning finding's message


def loaded_candidate(base: LoadedProfile, candidate: Candidate) -> LoadedProfile:
    """The candidate as a loaded profile at the base's file and positions (a finding points at the base's
    line for the field the candidate changed, or the nearest mapping above it)."""
    profile = load(candidate.document, StackProfile, base.positions.locate)
    return LoadedProfile(profile, base.path, base.sources, base.positions, candidate.document)


def base_warnings(findings: list[Finding] | tuple[Finding, ...]) -> frozenset[str]:
    return frozenset(f.code for f in findings if f.severity == Severity.warning)


def check(base: LoadedProfile, candidate: Candidate, allowed: frozenset[str]) -> Checked:
    """Validate one candidate; `allowed`: the warning codes the base itself has."""
    if candidate.recapture:
        allowed = allowed | RECAPTURE_WARNINGS
    try:
        loaded = loaded_candidate(base, candidate)
        findings = run_rules(loaded)
    except InputError as exc:
        return Checked(candidate, None, (), (SCHEMA,), exc.lines()[0])
    except StackpinError as exc:  # a fact the rules could not read for this combination
        return Checked(candidate, None, (), (SCHEMA,), exc.message)
    pruning = [f for f in findings if f.acknowledged is None and (
        f.severity == Severity.error or (f.severity == Severity.warning and f.code not in allowed))]
    codes = tuple(sorted({f.code for f in pruning}))
    return Checked(candidate, loaded.profile, tuple(findings), codes, pruning[0].message if pruning else "")


@dataclass(frozen=True)
class Reason:
    code: str
    candidates: int  # candidates this rule pruned (one candidate may count under several)
    example: str  # one of its messages


def reasons(checked: list[Checked]) -> tuple[Reason, ...]:
    """Pruning rules by how many candidates each pruned, most first (ties by code)."""
    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    for item in checked:
        for code in item.pruned_by:
            counts[code] += 1
        for f in item.findings:
            if f.code in item.pruned_by:
                example.setdefault(f.code, f.message)
        if SCHEMA in item.pruned_by:
            example.setdefault(SCHEMA, item.reason)
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(Reason(code, n, example.get(code, "")) for code, n in ordered)
