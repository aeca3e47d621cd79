"""`stackpin validate --upgrade-to ENGINE==X`: what in a profile breaks or changes meaning under another
release of its serving engine (vllm==X, sglang==X), as findings against the profile.

The profile is moved to the target (the engine's release X, the FlashInfer X pins, and the newest Dynamo
release that ships X with its NIXL) and every rule runs again, with the catalogs of the target; a finding the
moved profile has and the profile as written does not is something the upgrade breaks (a removed flag, env
var, backend or speculative method; an engineArgs flag or key the release dropped). Rules SP241-SP243
compare the two releases directly: the Dynamo release that ships X, defaults X changes that the profile
relies on, and a pinned autotune cache X will not read. They are silent outside an upgrade.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from stackpin.backends import DEFAULT, engine, engine_of, names
from stackpin.backends.pins import dynamo_pins, release_pins
from stackpin.catalog import Catalog, DynamoPin
from stackpin.catalog.engine_data import EngineOption
from stackpin.catalog.flags import FlagCatalog
from stackpin.catalog.version import parse_version
from stackpin.profile.model import AutotuneMode, Pool, StackProfile
from stackpin.profile.topology import Role
from stackpin.rules import Context, Hit, Severity, pools, rule
from stackpin.validate.engineargs import field_path, renders
from stackpin.yamlio import FieldPath

if TYPE_CHECKING:  # an annotation only: validate need not import pydantic for it
    from pydantic import JsonValue

_V = ("spec", "versions")
# SP241-SP243 report only under --upgrade-to: an acknowledgement of one would be stale (SP251) everywhere else.
UPGRADE_ONLY = "it reports only under `validate --upgrade-to`: an acknowledgement of it is stale everywhere else"
_TARGET = re.compile(r"([a-z][a-z0-9-]*)==([0-9]+\.[0-9]+\.[0-9]+(?:[.-]?(?:post|rc|dev)[0-9]+)?)")


class Target(NamedTuple):
    engine: str  # a serving engine's name (stackpin.backends), as in spec.engine
    version: str

    def __str__(self) -> str:
        return f"{self.engine}=={self.version}"


def parse_target(text: str) -> Target:
    """The engine and release of `ENGINE==X` (vllm==0.33.0, sglang==0.5.22); ValueError for anything else."""
    found = _TARGET.fullmatch(text.strip())
    if found is None or found.group(1) not in names():
        raise ValueError(f"{text!r}: give the target as ENGINE==X.Y.Z, ENGINE one of {', '.join(names())} "
                         "(the stack's engine)")
    return Target(found.group(1), found.group(2))


def dynamo_for(version: str, catalog: Catalog, profile: StackProfile | None = None) -> tuple[str, DynamoPin] | None:
    """The newest Dynamo release the catalog knows that ships this release of the engine `profile` runs
    (vLLM without a profile)."""
    runs = engine_of(profile) if profile is not None else engine(DEFAULT)
    found = [(parse_version(v), v, pin) for v, pin in catalog.versions.dynamo.items()
             if dynamo_pins(runs, pin)[0] == version]
    return (max(found)[1], max(found)[2]) if found else None


def moved(profile: StackProfile, version: str, catalog: Catalog) -> StackProfile:
    """`profile` moved to release `version` of its engine, the FlashInfer that release pins, and the newest Dynamo
    release shipping it with that extra's NIXL (the engine's pins: stackpin.backends.pins)."""
    runs = engine_of(profile)
    versions = profile.spec.versions
    change: dict[str, Any] = {runs.name: version}
    if (pin := release_pins(runs, catalog.versions).get(version)) is not None:
        change["flashinfer"] = pin.flashinfer
    if (dynamo := dynamo_for(version, catalog, profile)) is not None:
        change["dynamo"] = dynamo[0]
        if (nixl := dynamo_pins(runs, dynamo[1])[1]) is not None:
            change["nixl"] = nixl
    return profile.replace(spec=profile.spec.replace(versions=versions.replace(**change)))


def _upgrade(ctx: Context) -> tuple[StackProfile, str, str] | None:
    """(the profile as written, its engine release, the target release) during an upgrade check, else None."""
    if ctx.upgrade_from is None:
        return None
    old, new = ctx.upgrade_from.spec.engine_version, ctx.profile.spec.engine_version
    return (ctx.upgrade_from, old, new) if old != new else None


@rule("SP241", Severity.error, "no Dynamo release, or another one, ships the upgraded engine",
      warning_when="another Dynamo release ships it", acknowledge=UPGRADE_ONLY)
def dynamo_release(ctx: Context) -> Iterator[Hit]:
    if (up := _upgrade(ctx)) is None:
        return
    written, old_version, version = up
    runs = engine_of(ctx.profile)
    found = dynamo_for(version, ctx.catalog, ctx.profile)
    old = written.spec.versions.dynamo
    if found is None:
        ships = ", ".join(f"Dynamo {d}: {runs.label} {dynamo_pins(runs, p)[0]}"
                          for d, p in ctx.catalog.versions.dynamo.items())
        yield Hit(_V + ("dynamo",), f"no Dynamo release stackpin knows ships {runs.label} {version}: Dynamo {old}'s "
                  f"runtime image runs {runs.label} {old_version}, so no runtime image to pin runs {version}",
                  f"known: {ships} (catalog/versions.yaml)")
    elif found[0] != old:
        dynamo, pin = found
        flashinfer = ctx.profile.spec.versions.flashinfer
        nixl = dynamo_pins(runs, pin)[1]
        yield Hit(_V + ("dynamo",), f"{runs.label} {version} ships in Dynamo {dynamo}, not in Dynamo {old}: the "
                  "runtime image and every pin change with it",
                  f"set versions.dynamo: {dynamo}, {runs.name}: {version}, flashinfer: {flashinfer}, nixl: {nixl} "
                  f"and runtimeImage to Dynamo {dynamo}'s {runs.label} runtime", Severity.warning)


def _default(option: EngineOption) -> str:
    """An option's literal default as the catalog records it (None: the engine decides when it starts)."""
    return repr(option.default)


def keep_entry(flag: str, was: EngineOption, catalog: FlagCatalog) -> tuple[str, JsonValue] | None:
    """The engineArgs entry that keeps `flag`'s old default under `catalog` (the new release): the flag
    with the old value, or the switch that turns a boolean the old way; None when nothing can (the old
    release decided it at start, or nothing turns the option off)."""
    value = was.default
    if value is None:
        return None
    if isinstance(value, bool) and catalog.option(flag) is not None:
        off = catalog.negative(flag)
        if value is False and off is None:
            return None
        return (flag, True) if value else (str(off), True)
    return flag, value


def _keep(flag: str, was: EngineOption, old: str, catalog: FlagCatalog, label: str) -> str:
    """How to keep an old default."""
    entry = keep_entry(flag, was, catalog)
    if entry is not None:
        key, value = entry
        text = "true" if value is True else json.dumps(value) if isinstance(value, dict | list) else value
        return f"to keep the old behaviour, pass {key}: {text} in engineArgs"
    if was.default is None:
        return (f"{label} {old} decided it when the engine started; pass {flag} in engineArgs to choose the value "
                "yourself")
    return f"{label} {old} left {flag} off; nothing turns it off in engineArgs, check the release notes"


def _passed(catalog: FlagCatalog, flag: str, pool: Pool) -> bool:
    return any(catalog.canonical(f) == flag for f in pool.engine_args)


class ReliedDefault(msgspec.Struct, frozen=True):
    """A default the new release changes that some pools of the stack leave to the engine."""

    flag: str
    was: EngineOption
    now: EngineOption
    modelled: str | None  # the profile field that renders the flag (the engine's modelled table), when one does
    roles: tuple[Role, ...]  # the pools that leave it to the default
    engine: str  # the stack's engine: its spec.versions key

    @property
    def path(self) -> FieldPath:
        """Where rule SP242 reports it: the modelled field of the first such pool, else the engine's version."""
        return tuple(field_path(self.modelled, self.roles[0]).split(".")) if self.modelled else _V + (self.engine,)


def relied_defaults(profile: StackProfile, active: Sequence[tuple[Role, Pool]], old: FlagCatalog,
                    new: FlagCatalog) -> Iterator[ReliedDefault]:
    """Defaults `new` changes from `old` that `profile` (moved to `new`) leaves to the engine in some
    of its `active` pools: rule SP242, and what `upgrade propose` pins."""
    for flag in sorted(set(old.flags) & set(new.flags)):
        was, now = old.flags[flag], new.flags[flag]
        if was.default == now.default or was.default_expr or now.default_expr:
            continue  # a default computed when the engine starts cannot be compared from the source
        if set(now.all_strings) <= set(now.deprecated):
            continue  # the whole option is on its way out; SP226 speaks for any use of it
        modelled = engine_of(profile).modelled.get(flag)
        if modelled is not None:  # relied on where render writes nothing for the field
            roles = tuple(role for role, pool in active if renders(flag, profile, pool, new) is None)
        else:
            roles = tuple(role for role, pool in active if not _passed(new, flag, pool))
        if roles:
            yield ReliedDefault(flag, was, now, modelled, roles, profile.spec.engine.value)


@rule("SP242", Severity.warning, "default the upgraded engine changes that the profile relies on",
      acknowledge=UPGRADE_ONLY)
def changed_default(ctx: Context) -> Iterator[Hit]:
    runs = engine_of(ctx.profile)
    if (up := _upgrade(ctx)) is None or ctx.engine_catalog is None:
        return
    _, old_version, version = up
    old = runs.flag_catalog(old_version)
    if old is None:
        return
    active = [(role, pool.spec) for role, _, pool in pools(ctx)]
    for relied in relied_defaults(ctx.profile, active, old, ctx.engine_catalog):
        now = relied.now
        decides = ", which leaves it to the engine at start" if now.default is None else ""
        yield Hit(relied.path, f"{runs.label} {version} changes the default of {relied.flag} from "
                  f"{_default(relied.was)} ({runs.label} {old_version}) to {_default(now)}{decides}; the profile "
                  "leaves it to the default",
                  _keep(relied.flag, relied.was, old_version, ctx.engine_catalog, runs.label))


@rule("SP243", Severity.error, "pinned autotune cache the upgraded release will not read", acknowledge=UPGRADE_ONLY)
def cache_unread(ctx: Context) -> Iterator[Hit]:
    if (up := _upgrade(ctx)) is None:
        return
    written, old_version, version = up
    label = engine_of(ctx.profile).label
    autotune = written.spec.autotune
    if autotune.mode != AutotuneMode.replay or not autotune.cache:
        return
    old_fi, new_fi = written.spec.versions.flashinfer, ctx.profile.spec.versions.flashinfer
    hint = "capture a cache on the upgraded stack (stackpin autotune capture-job) and pin it"
    if old_fi != new_fi:
        yield Hit(("spec", "autotune", "cache"), f"the cache was captured with FlashInfer {old_fi}; {label} {version} "
                  f"runs FlashInfer {new_fi}, which reads only its own version's directory: the engine "
                  "would tune again at start or run untuned", hint)
    files = ctx.catalog.engine.autotune_files
    if files.per_rank(old_version) != files.per_rank(version):
        now, then = ("one file per rank", "the one shared file") if files.per_rank(version) else (
            "the one shared file", "one file per rank")
        yield Hit(("spec", "autotune", "cache"), f"{label} {version} reads {now} of FlashInfer's autotune configs; "
                  f"the cache holds {then}, as {label} {old_version} writes it", hint)
