"""`stackpin engines diff`: what an upgrade changes, read from two releases' catalogs before doing it.

Flags added, removed and changed (type, default, choices, aliases, negative forms), option strings the
parser newly accepts or no longer does, deprecations, allowed values by kind, speculative methods,
env vars, config-class fields of JSON options, and the package's requirements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from stackpin.catalog.engine_data import (
    DynamoRelease,
    EngineOption,
    EntryPoint,
    EnvVar,
    Release,
)
from stackpin.catalog.flags import EngineName, dynamo_release, flashinfer_release
from stackpin.catalog.search import search_path, where
from stackpin.catalog.version import parse_version
from stackpin.engines.package import normalize
from stackpin.errors import StackpinError

# The packages around the serving engines, by the names a person types.
_OTHERS: dict[str, EngineName] = {"dynamo": "dynamo", "ai-dynamo": "dynamo", "flashinfer": "flashinfer",
                                  "flashinfer-python": "flashinfer"}
_OTHER_TITLES = {"dynamo": "Dynamo", "flashinfer": "FlashInfer"}
_OTHER_PROJECTS = {"dynamo": "ai-dynamo", "flashinfer": "flashinfer-python"}
# The choices kind that lists a serving engine's speculative methods (its catalog's spelling of them).
_SPECULATIVE_KINDS = ("speculative_methods", "speculative_algorithms")


@dataclass(frozen=True)
class Serving:
    """A serving engine as a diff reads it. stackpin.backends hands these in (`backends.serving_releases()`):
    this stage sits above the seam."""

    name: str  # spec.engine
    label: str  # as people write it
    distribution: str  # the package `stackpin engines add` takes
    dynamo_worker: str  # the Dynamo catalog's section of its worker
    release: Callable[[str], Release | None]  # its release catalog, by version


def title(engine: str, serving: Sequence[Serving]) -> str:
    """The package as people write it: a serving engine's label, Dynamo, FlashInfer."""
    return next((s.label for s in serving if s.name == engine), None) or _OTHER_TITLES[engine]


@dataclass(frozen=True)
class SetDiff:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @classmethod
    def of(cls, old: Any, new: Any) -> SetDiff:
        a, b = set(old or ()), set(new or ())
        return cls(tuple(sorted(b - a)), tuple(sorted(a - b)))

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)

    def data(self) -> dict[str, list[str]]:
        return {"added": list(self.added), "removed": list(self.removed)}


@dataclass(frozen=True)
class Change:
    """One attribute of a flag, env var or config field that differs: old and new value, or the values a
    list gained and lost."""

    what: str
    old: Any = None
    new: Any = None
    values: SetDiff | None = None

    def data(self) -> dict[str, Any]:
        values = self.values.data() if self.values is not None else {"old": self.old, "new": self.new}
        return {"what": self.what, **values}


def _default(item: EngineOption | EnvVar | Any) -> Any:
    return f"<{item.default_expr}>" if item.default_expr else item.default


def option_changes(old: EngineOption, new: EngineOption) -> list[Change]:
    changes: list[Change] = []
    for what, a, b in (("type", old.type, new.type), ("default", _default(old), _default(new)),
                       ("config field", old.config_field, new.config_field),
                       ("choices enforced", old.choices_enforced_by_argparse, new.choices_enforced_by_argparse),
                       ("env var", old.env_var, new.env_var)):
        if a != b:
            changes.append(Change(what, a, b))
    for what, a, b in (("choices", old.choices, new.choices), ("aliases", old.strings, new.strings),
                       ("negatives", old.negatives, new.negatives)):
        if values := SetDiff.of(a, b):
            changes.append(Change(what, values=values))
    return changes


@dataclass(frozen=True)
class EntryDiff:
    """One command line's options between two releases."""

    added: dict[str, EngineOption] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    changed: dict[str, list[Change]] = field(default_factory=dict)
    strings: SetDiff = SetDiff()  # every accepted option string, generated negatives included
    deprecated: dict[str, str | None] = field(default_factory=dict)  # newly deprecated string -> replacement
    undeprecated: tuple[str, ...] = ()

    @classmethod
    def of(cls, old: EntryPoint, new: EntryPoint) -> EntryDiff:
        common = sorted(set(old.options) & set(new.options))
        changed = {flag: c for flag in common if (c := option_changes(old.options[flag], new.options[flag]))}
        was = {s for o in old.options.values() for s in o.deprecated}
        now = {s: d.replacement for o in new.options.values() for s, d in o.deprecated.items()}
        return cls(added={f: new.options[f] for f in sorted(set(new.options) - set(old.options))},
                   removed=tuple(sorted(set(old.options) - set(new.options))), changed=changed,
                   strings=SetDiff.of(old.option_strings, new.option_strings),
                   deprecated={s: r for s, r in sorted(now.items()) if s not in was},
                   undeprecated=tuple(sorted(was - set(now))))

    def data(self) -> dict[str, Any]:
        return {"added": {f: _summary(o) for f, o in self.added.items()}, "removed": list(self.removed),
                "changed": {f: [c.data() for c in cs] for f, cs in self.changed.items()},
                "optionStrings": self.strings.data(), "deprecated": self.deprecated,
                "noLongerDeprecated": list(self.undeprecated)}


def _summary(option: EngineOption) -> dict[str, Any]:
    out: dict[str, Any] = {"strings": list(option.strings)}
    if option.type:
        out["type"] = option.type
    if option.negatives:
        out["negatives"] = list(option.negatives)
    if option.default is not None or option.default_expr:
        out["default"] = _default(option)
    if option.choices:
        out["choices"] = list(option.choices)
    return out


@dataclass(frozen=True)
class RequiresDiff:
    """Requirements by project (and marker): added, removed, and those whose version range changed."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # "torch" -> ("==2.13.0", "==2.14.0")

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    @staticmethod
    def _keyed(lines: tuple[str, ...]) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in lines:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                out[line] = ""
                continue
            name = normalize(requirement.name)
            key = f"{name}; {requirement.marker}" if requirement.marker else name
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            out[key] = f"{extras}{requirement.specifier}" or "(any)"
        return out

    @classmethod
    def of(cls, old: tuple[str, ...], new: tuple[str, ...]) -> RequiresDiff:
        a, b = cls._keyed(old), cls._keyed(new)
        return cls(added=tuple(f"{k} {b[k]}".rstrip() for k in sorted(set(b) - set(a))),
                   removed=tuple(f"{k} {a[k]}".rstrip() for k in sorted(set(a) - set(b))),
                   changed={k: (a[k], b[k]) for k in sorted(set(a) & set(b)) if a[k] != b[k]})

    def data(self) -> dict[str, Any]:
        return {"added": list(self.added), "removed": list(self.removed),
                "changed": {k: {"old": o, "new": n} for k, (o, n) in self.changed.items()}}


def env_diff(old: dict[str, EnvVar], new: dict[str, EnvVar]) -> tuple[SetDiff, dict[str, list[Change]]]:
    changed: dict[str, list[Change]] = {}
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        changes = [Change(w, x, y) for w, x, y in (("type", a.type, b.type), ("default", _default(a), _default(b)))
                   if x != y]
        if values := SetDiff.of(a.choices, b.choices):
            changes.append(Change("choices", values=values))
        if changes:
            changed[name] = changes
    return SetDiff.of(old, new), changed


@dataclass(frozen=True)
class EngineDiff:
    engine: EngineName
    old: str
    new: str
    entries: dict[str, EntryDiff]  # an engine: {its name: ...}; dynamo: each engine's worker section, the frontend
    choices: dict[str, SetDiff]  # a serving engine's allowed values by kind
    speculative_methods: SetDiff
    env_vars: SetDiff
    env_changed: dict[str, list[Change]]
    config_fields: dict[str, SetDiff]  # config class of a JSON option -> fields added / removed
    config_changed: dict[str, list[Change]]  # "SpeculativeConfig.method" -> its type, default, choices changes
    requires: RequiresDiff
    label: str = ""  # the package as people write it (not in data())

    @property
    def title(self) -> str:
        return f"{self.label} {self.old} -> {self.new}"

    def data(self) -> dict[str, Any]:
        return {"engine": self.engine, "old": self.old, "new": self.new,
                "entryPoints": {name: entry.data() for name, entry in self.entries.items()},
                "choices": {kind: d.data() for kind, d in self.choices.items()},
                "speculativeMethods": self.speculative_methods.data(),
                "envVars": {**self.env_vars.data(),
                            "changed": {n: [c.data() for c in cs] for n, cs in self.env_changed.items()}},
                "configFields": {cls: d.data() for cls, d in self.config_fields.items()},
                "configFieldsChanged": {f: [c.data() for c in cs] for f, cs in self.config_changed.items()},
                "requires": self.requires.data()}


def _release(engine: EngineName, version: str, serving: Sequence[Serving]) -> Release:
    found = next((s for s in serving if s.name == engine), None)
    release: Release | None
    if found is not None:
        release, project = found.release(version), found.distribution
    else:
        release = {"dynamo": dynamo_release, "flashinfer": flashinfer_release}[engine](version)
        project = _OTHER_PROJECTS[engine]
    if release is None:
        searched = ", ".join(where(d) for d in search_path())
        raise StackpinError(f"no catalog of {title(engine, serving)} {version} in {searched}",
                            f"stackpin engines add {project}=={version}")
    return release


def engine_name(name: str, serving: Sequence[Serving]) -> EngineName:
    """The package `name` means: a serving engine (by name or distribution), Dynamo or FlashInfer."""
    by_name: dict[str, str] = {**{s.name: s.name for s in serving}, **{s.distribution: s.name for s in serving},
                               **_OTHERS}
    found = by_name.get(name.lower())
    if found is None:
        expected = [*(s.name for s in serving), *dict.fromkeys(_OTHERS.values())]
        raise StackpinError(f"{name!r}: expected {', '.join(expected[:-1])} or {expected[-1]}")
    return found


def diff_releases(old: Release, new: Release, serving: Sequence[Serving]) -> EngineDiff:
    if old.engine != new.engine:
        raise StackpinError(f"cannot compare {old.engine} {old.version} with {new.engine} {new.version}")
    entries: dict[str, EntryDiff] = {}
    choices: dict[str, SetDiff] = {}
    config: dict[str, SetDiff] = {}
    config_changed: dict[str, list[Change]] = {}
    methods = SetDiff()
    if isinstance(old, DynamoRelease) and isinstance(new, DynamoRelease):
        # Each serving engine's worker section (a catalog written before one has none: nothing to compare).
        for section in (s.dynamo_worker for s in serving):
            before, after = getattr(old, section), getattr(new, section)
            if before is not None and after is not None:
                entries[section] = EntryDiff.of(before, after)
        entries["frontend"] = EntryDiff.of(old.frontend, new.frontend)
    elif isinstance(old, EntryPoint) and isinstance(new, EntryPoint):
        entries[old.engine] = EntryDiff.of(old, new)
        old_choices: dict[str, Any] = getattr(old, "choices", {})
        new_choices: dict[str, Any] = getattr(new, "choices", {})
        for kind in sorted(set(old_choices) | set(new_choices)):
            d = SetDiff.of(old_choices.get(kind), new_choices.get(kind))
            if kind in _SPECULATIVE_KINDS:
                methods = d
            elif d:
                choices[kind] = d
        old_classes: dict[str, Any] = getattr(old, "config_classes", {})
        new_classes: dict[str, Any] = getattr(new, "config_classes", {})
        for name in sorted(set(old_classes) & set(new_classes)):
            before, after = old_classes[name].fields, new_classes[name].fields
            if d := SetDiff.of(before, after):
                config[name] = d
            for field_name in sorted(set(before) & set(after)):
                a, b = before[field_name], after[field_name]
                changes = [Change(w, x, y) for w, x, y in (("type", a.type, b.type),
                                                           ("default", _default(a), _default(b))) if x != y]
                if values := SetDiff.of(a.choices, b.choices):
                    changes.append(Change("choices", values=values))
                if changes:
                    config_changed[f"{name}.{field_name}"] = changes
    env, env_changed = env_diff(old.env_vars, new.env_vars)
    return EngineDiff(engine=old.engine, old=old.version, new=new.version, entries=entries, choices=choices,
                      speculative_methods=methods, env_vars=env, env_changed=env_changed, config_fields=config,
                      config_changed=config_changed,
                      requires=RequiresDiff.of(old.requires, new.requires), label=title(old.engine, serving))


def diff_engine(engine: str, old: str, new: str, serving: Sequence[Serving]) -> EngineDiff:
    """The diff between two catalogued releases of `engine` (a serving engine of `serving`, dynamo or
    flashinfer)."""
    name = engine_name(engine, serving)
    for version in (old, new):
        try:
            parse_version(version)
        except ValueError as exc:
            raise StackpinError(str(exc)) from None
    return diff_releases(_release(name, old, serving), _release(name, new, serving), serving)
