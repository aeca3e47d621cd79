"""Profile validation: rules with stable codes, run on the merged profile against the catalog.

Each family of rules lives in its own module and registers with `@rule`. A rule is a generator of
`Hit`s; the runner turns them into `Finding`s with the rule's code and the file position of the
field. Severity is the rule's unless a hit says otherwise (for example an error that becomes a
warning once the profile states the fallback explicitly).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from stackpin.backends import engine_of
from stackpin.catalog import Catalog, load_catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.profile.loader import LoadedProfile
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import topology_of
from stackpin.profile.tuning import ConfigDirectory
from stackpin.rules import RULES, Acknowledged, Context, Finding, Rule, Severity, dotted

__all__ = ["Acknowledged", "Context", "Finding", "Rule", "Severity", "all_rules", "context_for", "run_rules"]

_ORDER = {Severity.error: 0, Severity.warning: 1, Severity.info: 2}


def _load_rules() -> None:
    # Importing the family modules registers their rules: every stack's, here, and each engine's own.
    import importlib

    from stackpin.backends import engine, names
    from stackpin.validate import (  # noqa: F401
        acknowledge,
        autotune,
        engineargs,
        memory,
        parallelism,
        placement,
        podoverrides,
        provenance,
        serving,
        site,
        upgrade,
        versions,
    )

    for name in names():
        for module in engine(name).rule_modules:
            importlib.import_module(module)


def context_for(profile: StackProfile, catalog: Catalog | None = None, *,
                autotune_cache: Sequence[ConfigDirectory] | None = None,
                upgrade_from: StackProfile | None = None) -> Context:
    catalog = catalog or load_catalog()
    platform = catalog.platforms[profile.spec.target.platform]
    found = catalog.model_for(profile.spec.model.id)
    engine = engine_of(profile)
    flags = engine.flag_catalog(profile.spec.engine_version)
    return Context(profile, catalog, platform, catalog.gpus[platform.gpu],
                   found[0] if found else None, found[1] if found else None,
                   topology_of(profile, catalog), None if autotune_cache is None else tuple(autotune_cache),
                   upgrade_from, engine_catalog=flags)


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
                ctx = msgspec.structs.replace(ctx, findings=tuple(finding for _, finding in keyed))
            for r in RULES.values():
                if r.reads_findings != after or not r.applies(ctx):
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


def all_rules() -> list[Rule]:
    _load_rules()
    return [RULES[c] for c in sorted(RULES)]
