"""`stackpin validate --upgrade-to ENGINE==X`'s findings: every rule run on the profile as written and on
the profile moved to release X of its engine (stackpin.validate.upgrade), and what only the moved one has."""

from __future__ import annotations

from stackpin.catalog import Catalog, load_catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.profile.loader import LoadedProfile
from stackpin.validate import Finding, run_rules
from stackpin.validate.upgrade import moved

# The moved profile's own pins disagree with its runtime image and with each other only because the move
# rewrote them; SP241 says what to set instead, so these are not reported again.
BOOKKEEPING = frozenset({"SP161", "SP162", "SP163", "SP164", "SP165"})


def upgrade_findings(loaded: LoadedProfile, version: str, catalog: Catalog | None = None) -> list[Finding]:
    """Findings of the profile moved to release `version` of its engine that the profile as written does not
    have."""
    with profile_catalogs(loaded.profile.spec.catalog_path):  # the pins of its own catalogs, too
        catalog = catalog or load_catalog()
        before = {(f.code, f.path) for f in run_rules(loaded, catalog)}
        target = LoadedProfile(moved(loaded.profile, version, catalog), loaded.path, loaded.sources,
                               loaded.positions, loaded.document)
        after = run_rules(target, catalog, upgrade_from=loaded.profile)
    return [f for f in after if (f.code, f.path) not in before and f.code not in BOOKKEEPING]
