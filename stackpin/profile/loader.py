"""Load a profile: YAML with positions, `extends:` chains, then the typed model.

A profile is YAML (`apiVersion: stackpin.dev/v1`, `kind: StackProfile`) that may `extends:` a base
profile: maps merge deeply, lists replace, cycles are an error. The merged document is read
into the typed model (stackpin/records.py); every error is reported at the file, line and column that supplied
the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stackpin.errors import InputError, Location, Problem
from stackpin.profile.model import LOCK_KIND, StackProfile
from stackpin.records import load
from stackpin.yamlio import FieldPath, Positions, load_yaml


class LoadedProfile:
    """A validated profile with where it came from: its file, the files it extends, and positions."""

    __slots__ = ("profile", "path", "sources", "positions", "document")

    def __init__(self, profile: StackProfile, path: Path, sources: tuple[Path, ...],
                 positions: MergedPositions, document: dict[str, Any]) -> None:
        self.profile, self.path, self.sources = profile, path, sources
        self.positions, self.document = positions, document

    def locate(self, path: FieldPath) -> Location:
        return self.positions.locate(path)


class MergedPositions:
    """Positions over a document merged from several files: each field points at the file that set it."""

    def __init__(self) -> None:
        self._marks: dict[FieldPath, Location] = {}

    def overlay(self, positions: Positions, data: Any, prefix: FieldPath = ()) -> None:
        self._marks[prefix] = positions.locate(prefix)
        if isinstance(data, dict):
            for key, value in data.items():
                child = prefix + (key,)
                if isinstance(value, list):  # lists replace: forget the base's items
                    self._marks = {p: loc for p, loc in self._marks.items()
                                   if p[: len(child)] != child or p == child}
                self.overlay(positions, value, child)
        elif isinstance(data, list):
            for i, value in enumerate(data):
                self.overlay(positions, value, prefix + (i,))

    def locate(self, path: FieldPath) -> Location:
        path = tuple(path)
        while path and path not in self._marks:
            path = path[:-1]
        return self._marks.get(path) or Location("<profile>")


def deep_merge(base: Any, overlay: Any) -> Any:
    """Maps merge key by key; anything else (lists, scalars) in the overlay replaces the base."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for key, value in overlay.items():
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    return overlay


def _read_chain(path: Path) -> tuple[dict[str, Any], MergedPositions, tuple[Path, ...]]:
    """Read `path` and the chain of profiles it extends, base first; merge them."""
    chain: list[tuple[Path, dict[str, Any], Positions]] = []
    seen: list[Path] = []
    current: Path | None = path
    # A base is read from below the working directory (the repository stackpin runs in), the named
    # profile's own directory, or a site catalog directory, nowhere else: a profile from elsewhere must not
    # make stackpin read (and echo) /etc/passwd (issue 18).
    from stackpin.catalog.search import site_dirs

    roots = [Path(path).resolve().parent, Path.cwd().resolve(), *(d.resolve() for d in site_dirs())]
    display = str(path)
    while current is not None:
        resolved = current.resolve()
        if resolved in seen:
            cycle = " -> ".join(str(p) for p in [*seen, resolved])
            # Point at the `extends:` that closes the loop.
            raise InputError([Problem(chain[-1][2].locate(("extends",)), "extends", f"extends cycle: {cycle}")])
        seen.append(resolved)
        data, positions = load_yaml(current, display)
        if not isinstance(data, dict):
            raise InputError([Problem(positions.locate(()), "",
                                      "a profile must be a YAML mapping (apiVersion, kind, metadata, spec)")])
        if data.get("kind") == LOCK_KIND:
            raise InputError([Problem(positions.locate(("kind",)), "kind",
                                      f"this is a lockfile ({LOCK_KIND}), not a profile; did you mean "
                                      f"`stackpin lock --check PROFILE` or `stackpin render {display}`?")])
        chain.append((current, data, positions))
        parent = data.get("extends")
        if parent is None:
            current = None
        elif not isinstance(parent, str) or not parent:
            raise InputError([Problem(positions.locate(("extends",)), "extends",
                                      "must be a path to a base profile")])
        else:
            current = current.parent / parent
            display = str(current)
            try:
                found = current.is_file()
            except OSError:  # a name too long for the filesystem, ...
                found = False
            if not found:
                raise InputError([Problem(positions.locate(("extends",)), "extends",
                                          f"base profile {parent!r} not found")])
            if not any(current.resolve().is_relative_to(root) for root in roots):
                raise InputError([Problem(positions.locate(("extends",)), "extends",
                                          f"base profile {parent!r} is outside the profile's directory, "
                                          "the working directory and the catalog directories")])
    merged: dict[str, Any] = {}
    merged_positions = MergedPositions()
    for _, data, positions in reversed(chain):
        merged = deep_merge(merged, data)
        merged_positions.overlay(positions, data)
    merged.pop("extends", None)  # the effective profile stands alone
    return merged, merged_positions, tuple(p for p, _, _ in chain)


def load_profile(path: str | Path) -> LoadedProfile:
    """Load, merge and type-check one profile. Raises InputError listing every problem."""
    path = Path(path)
    document, positions, sources = _read_chain(path)
    profile = load(document, StackProfile, positions.locate)
    return LoadedProfile(profile, path, sources, positions, document)




def load_profiles(paths: Sequence[str | Path]) -> list[LoadedProfile]:
    """Load every profile; one InputError lists the problems of all of them, not just the first file's."""
    loaded, problems = [], []
    for path in paths:
        try:
            loaded.append(load_profile(path))
        except InputError as exc:
            problems.extend(exc.problems)
    if problems:
        raise InputError(problems)
    return loaded
