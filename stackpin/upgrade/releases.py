"""The target of an upgrade and its releases: Dynamo X, the engine release its extra for the stack's engine
pins, the FlashInfer that release pins, added to a catalog directory with `engines add`'s library (stackpin
follows Dynamo's pins; the engine's extra, project and pins are its backend's, stackpin.backends)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stackpin.backends import DEFAULT, engine
from stackpin.backends.pins import dynamo_fields, release_pins
from stackpin.catalog import load_catalog
from stackpin.catalog.search import find_engine_file
from stackpin.catalog.version import parse_version
from stackpin.engines.add import add_release
from stackpin.engines.index import choose
from stackpin.errors import StackpinError
from stackpin.profile.loader import LoadedProfile

_TARGET = re.compile(r"(?:ai-)?dynamo==(\S+)")
DYNAMO, FLASHINFER = "ai-dynamo", "flashinfer-python"


def parse_target(text: str) -> str:
    """The Dynamo version of `dynamo==X`; one line of bad input for anything else."""
    found = _TARGET.fullmatch(text.strip())
    try:
        if found is None:
            raise ValueError
        parse_version(found.group(1))
    except ValueError:
        raise StackpinError(f"--to {text!r}: give the target as dynamo==X (a Dynamo release, e.g. dynamo==1.7.0)"
                            ) from None
    return found.group(1)


def newest_dynamo(loaded: LoadedProfile, *, from_dir: Path | None, index_url: str | None) -> str:
    """The release `upgrade check` offers the profile (stackpin.upgrade.check, the same listing): the newest
    final Dynamo release on the index (or in `from_dir`) newer than the profile's whose vLLM and FlashInfer
    pins the index has too."""
    from stackpin.engines.index import PackageIndex
    from stackpin.upgrade.check import check_profile, default_cache_dir

    current = loaded.profile.spec.versions.dynamo
    with PackageIndex(index_url, find_links=from_dir) as index:
        found = check_profile(loaded, index, cache_dir=default_cache_dir())
    if found.available is not None:
        return found.available.dynamo
    lacking = [c for c in found.releases if c.missing]
    if lacking:
        newest = lacking[-1]
        pins = "; ".join(f"{m.pinned_by} pins {m.requirement}" for m in newest.missing)
        raise StackpinError(f"{index.shown}: no Dynamo release newer than {current} whose pins it has: Dynamo "
                            f"{newest.dynamo}: {pins}, which it does not have",
                            "mirror the pinned packages to the index, then propose again")
    raise StackpinError(f"{index.shown}: no Dynamo release newer than {current}",
                        "the stack is up to date; name a pre-release with --to dynamo==X")


@dataclass(frozen=True)
class Source:
    """Where packages come from: a directory of package files (air-gapped), else an index."""

    from_dir: Path | None = None
    index_url: str | None = None

    def file_for(self, project: str, version: str) -> Path | None:
        """The file of `project==version` in `from_dir`, chosen as from an index page (a pure wheel first,
        then the sdist); None when reading from an index."""
        if self.from_dir is None:
            return None
        from stackpin.engines.simple import parse_directory

        listing = parse_directory(self.from_dir, project)
        try:
            return self.from_dir / choose(project, version, listing).filename
        except StackpinError:
            raise StackpinError(f"{self.from_dir}: no {project} {version} package (wheel or sdist) in it",
                                f"copy it in, e.g. pip download --no-deps {project}=={version}") from None


@dataclass(frozen=True)
class Target:
    dynamo: str
    engine: str  # the stack's engine (a stackpin.backends name), whose release Dynamo's extra pins
    release: str
    flashinfer: str
    nixl: str
    added: tuple[str, ...]  # NAME==VERSION added to the catalog directory by this run


def _forget_read_catalogs() -> None:
    """`engines add` wrote into a directory on the search path: what the process read from it before
    (releases, flag catalogs, version pins, all cached by search path) is stale."""
    from stackpin.catalog import _load, flags

    _load.cache_clear()
    for cached in vars(flags).values():  # every cache of catalog files, whichever engine's
        if callable(getattr(cached, "cache_clear", None)):
            cached.cache_clear()


def add_target(dynamo: str, catalog_dir: Path, source: Source, engine_name: str = DEFAULT) -> Target:
    """Add Dynamo `dynamo`, then the release of engine `engine_name` its extra pins, then the FlashInfer that
    release pins, each unless the catalog search path (profile_catalogs in force) already has it, and return
    the versions. A release is added whole or not at all; one added before a later one fails stays, correct
    and harmless."""
    runs = engine(engine_name)
    catalog_names = {DYNAMO: "dynamo", runs.distribution: runs.name, FLASHINFER: "flashinfer"}  # engines/<name>-<v>
    added: list[str] = []

    def ensure(project: str, version: str) -> dict[str, str] | None:
        """The release's pins as versions.yaml records them (None: look them up), adding it if missing."""
        if find_engine_file(catalog_names[project], version) is not None:
            return None
        done = add_release(f"{project}=={version}", from_file=source.file_for(project, version),
                           catalog_dir=catalog_dir, index_url=source.index_url)
        added.append(f"{project}=={version}")
        _forget_read_catalogs()
        return done.pin

    pin = ensure(DYNAMO, dynamo) or _pins(None, dynamo)
    fields = dynamo_fields(runs)
    release, nixl = (pin.get(field) for field in fields)
    if not release or not nixl:
        raise StackpinError(f"Dynamo {dynamo}: no {' and '.join(fields)} pins in the catalogs' versions.yaml",
                            f"add it again: stackpin engines add ai-dynamo=={dynamo} --catalog {catalog_dir}")
    flashinfer = (ensure(runs.distribution, release) or _pins(engine_name, release)).get("flashinfer")
    if not flashinfer:
        raise StackpinError(f"{runs.label} {release}: no flashinfer pin in the catalogs' versions.yaml",
                            f"add it again: stackpin engines add {runs.distribution}=={release} "
                            f"--catalog {catalog_dir}")
    ensure(FLASHINFER, flashinfer)
    return Target(dynamo, runs.name, release, flashinfer, nixl, tuple(added))


def _pins(engine_name: str | None, version: str) -> dict[str, str]:
    """A release's entry in the catalogs' versions.yaml: Dynamo's (None), else engine `engine_name`'s own."""
    versions = load_catalog().versions
    found = (versions.dynamo if engine_name is None else release_pins(engine(engine_name), versions)).get(version)
    return {k: str(v) for k, v in found.to_data().items() if v is not None} if found is not None else {}
