"""Engine and frontend command lines: pure, typed functions from a profile to argv.

Every value reaches the container as its own argv element (never through a shell or a template),
JSON arguments are compact with sorted keys, and flags come out in one fixed order, so the same
profile always gives the same bytes. `check_flags` compares an argv with the flag catalog that was
extracted from the pinned engine / Dynamo packages (stackpin/catalog/engines/).
"""

from __future__ import annotations

# The worker's flags are its engine's (stackpin.backends); the helpers are re-exported for render's callers.
from stackpin.backends import engine_of
from stackpin.backends.base import Flag as Flag
from stackpin.backends.base import check_flags as check_flags
from stackpin.backends.base import flatten as flatten
from stackpin.backends.base import json_arg as json_arg
from stackpin.backends.base import kv_events_enabled, passed_flags
from stackpin.backends.base import unknown_values as unknown_values
from stackpin.catalog.flags import FlagCatalog
from stackpin.catalog.flags import dynamo_catalog as dynamo_catalog
from stackpin.profile.engine_args import MODELLED_FRONTEND as MODELLED_FRONTEND
from stackpin.profile.model import Pool, RouterMode, StackProfile
from stackpin.profile.topology import Role

# Dynamo's frontend entry point (docs/facts.md#dynamo-command-lines, upstream DGD examples); each engine's
# worker is its backend's.
FRONTEND_COMMAND = ("python3", "-m", "dynamo.frontend")
FRONTEND_HTTP_PORT = 8000  # dynamo.frontend's default --http-port, stated so probes can point at it


# --- command lines -------------------------------------------------------------------------------

def worker_flags(profile: StackProfile, role: Role, pool: Pool, *, model_revision: str,
                 catalog: FlagCatalog | None = None, serving: tuple[Flag, ...] = ()) -> list[Flag]:
    """The flags after the stack's engine's worker command for one pool (stackpin.backends)."""
    return engine_of(profile).worker_flags(profile, role, pool, model_revision=model_revision, catalog=catalog,
                                           serving=serving)


def worker_args(profile: StackProfile, role: Role, pool: Pool, *, model_revision: str,
                catalog: FlagCatalog | None = None, serving: tuple[Flag, ...] = ()) -> list[str]:
    """argv after the worker command for one pool."""
    return flatten(worker_flags(profile, role, pool, model_revision=model_revision, catalog=catalog, serving=serving))


def frontend_flags(profile: StackProfile) -> list[Flag]:
    router = profile.spec.placement.router
    flags: list[Flag] = [("--http-port", str(FRONTEND_HTTP_PORT)), ("--router-mode", router.value),
                         ("--migration-limit", str(profile.spec.placement.migration_limit))]
    if router == RouterMode.kv and not kv_events_enabled(profile):
        # Workers publish no KV events: the KV router must predict cache contents itself.
        flags.append(("--no-router-kv-events", None))
    return flags + passed_flags(profile.spec.placement.frontend_args)


def frontend_args(profile: StackProfile) -> list[str]:
    """argv after `python3 -m dynamo.frontend`."""
    return flatten(frontend_flags(profile))
