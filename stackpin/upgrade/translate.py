"""What the target releases renamed, removed or changed, translated for one stack: the flags its pools pass
(engineArgs against its engine, dynamoArgs against Dynamo's worker for it) and the env vars it sets, against the two
releases' catalogs, and the defaults it relies on (rule SP242's comparison, `relied_defaults`).

Pure: the catalogs in, `Rewrite`s, `PinnedDefault`s and `Blocker`s out; propose.py applies them to the text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stackpin.backends import engine_of
from stackpin.catalog.flags import FlagCatalog
from stackpin.profile.model import Pool, StackProfile
from stackpin.profile.topology import Role
from stackpin.rules import pool_path
from stackpin.upgrade.model import Blocker, PinnedDefault, Rewrite
from stackpin.validate.engineargs import field_path
from stackpin.validate.upgrade import keep_entry, relied_defaults


@dataclass(frozen=True)
class Engine:
    """One engine's two releases, as a pool's flags meet them."""

    title: str  # the engine's label ("vLLM", "SGLang"), "Dynamo"
    field: str  # the pool's field that passes its flags: engineArgs, dynamoArgs
    old: FlagCatalog
    new: FlagCatalog


@dataclass(frozen=True)
class Translation:
    rewrites: tuple[Rewrite, ...] = ()
    pinned: tuple[PinnedDefault, ...] = ()
    blockers: tuple[Blocker, ...] = ()


def _dotted(*parts: str) -> str:
    return ".".join(parts)


def _flags(role: Role, args: Mapping[str, object], engine: Engine) -> tuple[list[Rewrite], list[Blocker]]:
    """A pool's flags of one engine: renamed ones rewritten, removed ones without a successor blocking."""
    path = _dotted(*pool_path(role), engine.field)
    rewrites, blockers = [], []
    new_version = engine.new.version
    for key in args:
        now, then = engine.new.deprecation(key), engine.old.deprecation(key)
        accepted = engine.new.resolve(key) is not None
        # The package's own successor: named when this release deprecates the key, or when the release
        # that deprecated it earlier named one and this release dropped the key.
        said = now if accepted and then is None else then if not accepted else None
        successor = said.replacement if said is not None else None
        if said is not None and successor is not None and engine.new.resolve(successor) is not None:
            if successor in args or engine.new.canonical(successor) in {engine.new.canonical(k) for k in args}:
                blockers.append(Blocker(path=_dotted(path, key), message=(
                    f"{engine.title} {new_version} renames {key} to {successor}, which the pool also passes: "
                    "keep one of them")))
                continue
            release = new_version if said is now else engine.old.version
            rewrites.append(Rewrite(path=path, old=key, new=successor,
                                    source=f"{engine.title} {release}: {said.message or 'deprecated'}"))
        elif not accepted:
            blockers.append(Blocker(path=_dotted(path, key), message=(
                f"{engine.title} {new_version} no longer accepts {key} (the pool passes it) and names no "
                f"replacement: drop it, or find what replaces it in {engine.title} {new_version}'s release notes"),
                code="SP221"))
    return rewrites, blockers


def _env(profile: StackProfile, engine: Engine) -> list[Blocker]:
    """Env vars the stack sets that the engine's old release read and the new one does not (it names no
    successor); only for an engine whose catalogs list every variable it reads (its env_registry)."""
    if engine_of(profile).env_registry is None:
        return []  # a name missing from the new catalog may still be read
    old, new = engine.old, engine.new
    return [Blocker(path=_dotted("spec", "kernels", "env", name), message=(
        f"{engine.title} {new.version} no longer reads {name} ({engine.title} {old.version} did): the setting "
        "would be silently ignored; drop it, or find what replaces it in the release notes"), code="SP171")
        for name in profile.spec.kernels.env if name in old.env_vars and name not in new.env_vars]


def _pins(moved: StackProfile, active: Sequence[tuple[Role, Pool]], engine: Engine) -> list[PinnedDefault]:
    """The old default of every flag the engine's new release changes and a pool leaves to it, made explicit:
    the modelled field when stackpin renders the flag (kvCache.blockSize for --block-size), else engineArgs."""
    pinned: dict[str, PinnedDefault] = {}  # by path: a stack-wide field is pinned once for all its pools
    for relied in relied_defaults(moved, active, engine.old, engine.new):
        old, new = relied.was.default, relied.now.default
        if relied.modelled is not None:
            if old is None or isinstance(old, dict | list):
                continue  # nothing to write into the field; SP242 stays among the candidate's findings
            for role in relied.roles:
                path = field_path(engine_of(moved).modelled[relied.flag], role)
                pinned[path] = PinnedDefault(path=path, flag=relied.flag, value=old, old_default=old,
                                             new_default=new)
            continue
        entry = keep_entry(relied.flag, relied.was, engine.new)
        if entry is None:
            continue
        key, value = entry
        for role in relied.roles:
            path = _dotted(*pool_path(role), "engineArgs", key)
            pinned[path] = PinnedDefault(path=path, flag=relied.flag, value=value, old_default=old,
                                         new_default=new)
    return list(pinned.values())


def translate(moved: StackProfile, active: Sequence[tuple[Role, Pool]], engine: Engine,
              dynamo: Engine | None) -> Translation:
    """`moved`: the stack with only its versions moved to the target; `active`: the pools it runs; `engine`:
    the stack's engine at both releases, `dynamo`: Dynamo's worker for it."""
    rewrites: list[Rewrite] = []
    blockers: list[Blocker] = []
    for role, pool in active:
        for releases, args in ((engine, pool.engine_args), (dynamo, pool.dynamo_args)):
            if releases is not None and args:
                found = _flags(role, args, releases)
                rewrites += found[0]
                blockers += found[1]
    blockers += _env(moved, engine)
    return Translation(tuple(rewrites), tuple(_pins(moved, active, engine)), tuple(blockers))
