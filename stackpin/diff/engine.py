"""Two stacks in, a `StackDiff` out: pure, no I/O beyond the packaged catalog.

The effective profiles (extends merged, defaults filled: what a lock embeds) are compared field by
field; when both sides are locks their pins are compared too. Each changed field lands in one group
(`fields.group_of`) with the rollout it needs (`fields.rollout`); the stack's shape, read from the
topology, decides where the Dynamo admission webhook refuses an in-place update.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stackpin.catalog import Catalog, load_catalog
from stackpin.diff.fields import Side, group_of, invalidations, path_text, recreate_reasons, roll_order, rollout
from stackpin.diff.inputs import Stack
from stackpin.diff.model import (
    GROUP_ORDER,
    GROUP_TITLES,
    Change,
    ChangeKind,
    Group,
    GroupId,
    Impact,
    Invalidation,
    ManifestDiff,
    StackDiff,
    worst,
)
from stackpin.lock.lockfile import StackLock, effective_profile
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import topology_of

Path = tuple[str, ...]
# Pins that are derived from others (`pinned` is repository@digest; the engines repeat
# spec.versions) or provenance (where a digest was resolved): never compared.
_DERIVED = {"pinned", "resolvedVia", "standIn"}


def pins_of(lock: StackLock) -> dict[str, Any]:
    """What a lock pins, as compared: images, model revision, autotune cache; no provenance."""
    data = lock.resolved.to_data(exclude_none=True)
    return {k: _without(v, _DERIVED) for k, v in data.items() if k != "engines"}


def _compared(profile: StackProfile) -> dict[str, Any]:
    """The profile as locked, with the engine named even where it is the default (a lock leaves it out)."""
    data = effective_profile(profile)
    data["spec"] = {"engine": profile.spec.engine.value, **data["spec"]}
    return data


def _acknowledged(profile: StackProfile) -> dict[str, Any]:
    """spec.acknowledge, which the effective profile leaves out (it changes nothing that runs)."""
    return {"acknowledge": [{key: value for key, value in ack.to_data().items() if value is not None}
                            for ack in profile.spec.acknowledge]}


def _without(data: Any, keys: set[str]) -> Any:
    if isinstance(data, dict):
        return {k: _without(v, keys) for k, v in data.items() if k not in keys}
    return data


def walk(a: Any, b: Any, path: Path = ()) -> Iterator[tuple[Path, ChangeKind, Any, Any]]:
    """Every differing leaf, keys sorted. Maps recurse; lists and a map against null are one value."""
    if a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a:
                yield path + (key,), ChangeKind.added, None, b[key]
            elif key not in b:
                yield path + (key,), ChangeKind.removed, a[key], None
            else:
                yield from walk(a[key], b[key], path + (key,))
        return
    yield path, ChangeKind.changed, a, b


def diff_stacks(a: Stack, b: Stack, *, manifests: ManifestDiff | None = None,
                catalog: Catalog | None = None) -> StackDiff:
    """Compare stack A (what runs, or the older revision) with stack B (what would replace it)."""
    catalog = catalog or load_catalog()
    side_a = Side(a.profile, a.lock, topology_of(a.profile, catalog))
    side_b = Side(b.profile, b.lock, topology_of(b.profile, catalog))
    raw = list(walk(_compared(a.profile), _compared(b.profile)))
    if a.lock is None and b.lock is None:  # a lock does not carry spec.acknowledge: compared between profiles
        raw += list(walk(_acknowledged(a.profile), _acknowledged(b.profile), ("spec",)))
    pins_compared = a.lock is not None and b.lock is not None
    if a.lock is not None and b.lock is not None:
        raw += [(("resolved",) + p, kind, old, new) for p, kind, old, new in walk(pins_of(a.lock), pins_of(b.lock))]

    by_group: dict[GroupId, list[Change]] = {}
    for path, kind, old, new in raw:
        impact, rolled, note = rollout(path, side_a, side_b, catalog)
        change = Change(path=path_text(path), kind=kind, old=old, new=new, impact=impact,
                        restarts=roll_order(rolled), note=note)
        by_group.setdefault(group_of(path), []).append(change)

    reasons = recreate_reasons(side_a, side_b, {g: [c.path for c in cs] for g, cs in by_group.items()})
    causes = invalidations(side_a, side_b, {g: [c.path for c in cs] for g, cs in by_group.items()})
    groups = []
    for gid in GROUP_ORDER:
        changes = by_group.get(gid)
        if not changes:
            continue
        group_reasons = tuple(reasons.get(gid, ()))
        impact = worst([*(c.impact for c in changes), *([Impact.recreate] if group_reasons else [])])
        restarts = roll_order({r for c in changes for r in c.restarts}) if impact == Impact.restart else ()
        groups.append(Group(id=gid, title=GROUP_TITLES[gid], impact=impact, restarts=restarts,
                            recreate_reasons=group_reasons, changes=tuple(changes),
                            invalidates=tuple(causes.get(gid, ()))))

    impact = worst(g.impact for g in groups)
    equal = a.lock.stack_digest == b.lock.stack_digest if a.lock and b.lock else not groups
    return StackDiff(
        a=a.ref, b=b.ref, groups=tuple(groups), pins_compared=pins_compared, equal=equal, impact=impact,
        restarts=roll_order({r for g in groups for r in g.restarts}) if impact == Impact.restart else (),
        invalidates=_merged(groups), manifests=manifests)


def _merged(groups: list[Group]) -> tuple[Invalidation, ...]:
    """One invalidation per kind over the whole diff, with every cause."""
    seen: dict[str, Invalidation] = {}
    for group in groups:
        for inv in group.invalidates:
            old = seen.get(inv.what)
            if old is None:
                seen[inv.what] = inv
            else:
                because = tuple(sorted({*old.because, *inv.because}))
                seen[inv.what] = old.model_copy(update={"because": because})
    return tuple(seen[k] for k in sorted(seen))
