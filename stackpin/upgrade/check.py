"""`stackpin upgrade check`: the newer Dynamo releases on a package index and in the site's release feeds,
for each profile, with the engine release, FlashInfer and NIXL each one pins.

stackpin follows Dynamo's pins: a Dynamo release brings the engine release and NIXL its extra for the stack's
engine pins (ai-dynamo's Requires-Dist; `vllm`: vllm and nixl, `sglang`: sglang and nixl), and the FlashInfer
that engine release pins (its own Requires-Dist). The engine's extra, project and pins are its backend's
(stackpin.backends.pins), so every engine is checked by the same code. Pins come
from the profile's catalog (versions.yaml) when it knows the release (the same metadata, read when the
release was added), else from the index. The upgrade offered is the newest Dynamo release newer than the
profile's (final releases only unless `pre`) that is on the index and whose pins the index has too: a
release only a feed has (GitHub releases, container tags: stackpin.upgrade.feeds) is listed with where it
is, not offered (`upgrade propose` reads its pins and packages from the index), and one whose pin the
index lacks is listed with that pin (stackpin.upgrade.installable). Newer engine, FlashInfer and NIXL
releases that no newer Dynamo release pins are listed too, as information: stackpin does not propose them.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version
from pydantic import Field, computed_field

from stackpin.backends import DEFAULT, engine, names
from stackpin.backends.base import ServingEngine
from stackpin.backends.pins import dynamo_pins as catalog_dynamo_pins
from stackpin.backends.pins import project, release_pins, required_dynamo_pins
from stackpin.catalog import NIXL, load_catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.engines.index import PackageIndex
from stackpin.engines.pins import exact
from stackpin.errors import StackpinError
from stackpin.models import CamelModel  # the records' shape: frozen, camelCase keys
from stackpin.profile.loader import LoadedProfile, load_profiles
from stackpin.upgrade.feeds import FeedListing
from stackpin.upgrade.installable import MissingPin, missing_pins
from stackpin.upgrade.model import EngineRelease

DYNAMO, FLASHINFER = "ai-dynamo", "flashinfer-python"


def _engine(name: str) -> ServingEngine:
    try:
        return engine(name)
    except KeyError:
        raise StackpinError(f"Dynamo pins no engine {name!r}: {' or '.join(names())}") from None


def tracked(name: str) -> dict[str, str]:
    """Project -> spec.versions field of what a stack running engine `name` follows Dynamo's pins for."""
    return {project(_engine(name)): name, FLASHINFER: "flashinfer", NIXL: "nixl"}


def dynamo_pins(requires: tuple[str, ...], name: str = DEFAULT) -> tuple[str | None, str | None]:
    """The engine release and the NIXL that a Dynamo release's extra for engine `name` pins exactly, from its
    Requires-Dist; None for one it pins no exact version of (Dynamo 1.3.1's sglang extra: a nixl range)."""
    return required_dynamo_pins(_engine(name), requires)


class Pins(EngineRelease):
    """A Dynamo release and what it brings; None where the release's metadata pins nothing. The release of the
    stack's engine is kept under the engine's name, as in spec.versions (`vllm: 0.31.0`, `sglang: 0.5.21`)."""

    __pydantic_extra__: dict[str, str | None] = Field(init=False)  # the engine's release; None: none pinned

    dynamo: str
    flashinfer: str | None
    nixl: str | None

    @classmethod
    def of(cls, name: str, release: str | None, *, dynamo: str, flashinfer: str | None, nixl: str | None) -> Pins:
        """The pins of a stack running engine `name`, whose release is `release`."""
        return cls.model_validate({"dynamo": dynamo, "flashinfer": flashinfer, "nixl": nixl, name: release})


class Found(CamelModel):
    """Where a release was found: `index` (its URL), or a feed (its release page or image reference)."""

    feed: str  # "index", github:OWNER/REPO, registry:HOST/REPOSITORY
    url: str | None


class Candidate(CamelModel):
    """A newer Dynamo release, wherever it was found, and whether the index can install it."""

    dynamo: str
    prerelease: bool  # by its version, or flagged so by a feed (a GitHub pre-release)
    found: list[Found]  # the index first, then the feeds in the order given
    pins: Pins | None  # None when the index does not have the release: its pins are read from there
    missing: list[MissingPin]  # its pins the index has no file of: it cannot be installed from the index

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def on_index(self) -> bool:
        return self.pins is not None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def installable(self) -> bool:
        return self.pins is not None and not self.missing


class ProfileCheck(CamelModel):
    profile: str  # the file, as given
    stack: str  # metadata.name
    current: Pins
    available: Pins | None  # the newest installable newer Dynamo release and its pins; None: none is
    newer_dynamo: list[str]  # every Dynamo release on the index newer than the current one, oldest first
    releases: list[Candidate]  # every newer Dynamo release, on the index or in a feed, oldest first
    unshipped: dict[str, list[str]]  # project -> its newer releases that no newer Dynamo release pins

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def upgrade_available(self) -> bool:
        return self.available is not None


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


class _Pinned:
    """Pins of releases, read once per index (several profiles share the Dynamo releases they look at)."""

    def __init__(self, index: PackageIndex, cache_dir: Path | None) -> None:
        self.index, self.cache_dir = index, cache_dir
        self._requires: dict[tuple[str, str], tuple[str, ...]] = {}

    def requires(self, project: str, version: str) -> tuple[str, ...]:
        key = (project, version)
        if key not in self._requires:
            self._requires[key] = self.index.requires(project, version, self.cache_dir)
        return self._requires[key]

    def dynamo(self, version: str, known: dict[str, tuple[str, str]],
               runs: ServingEngine) -> tuple[str | None, str | None]:
        """The engine release and NIXL a Dynamo release's extra for the engine `runs` pins."""
        if version in known:
            return known[version]
        return required_dynamo_pins(runs, self.requires(DYNAMO, version))

    def flashinfer(self, release: str | None, known: dict[str, str], runs: ServingEngine) -> str | None:
        """The FlashInfer a release of the engine `runs` pins; None when neither the catalog nor the index has it."""
        if release is None:
            return None
        if release in known:
            return known[release]
        name = project(runs)
        if _version(release) not in self.index.releases(name, pre=True):
            return None
        return exact(self.requires(name, release), FLASHINFER)


def _catalog_pins(loaded: LoadedProfile, runs: ServingEngine) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """The profile's catalog pins: Dynamo -> (engine release, NIXL) and engine release -> FlashInfer, by
    normalized version; a Dynamo entry without the engine's pins (a site file written before stackpin
    recorded the sglang extra) is left to the index."""
    where = str(loaded.locate(("spec", "catalogPath")))
    with profile_catalogs(loaded.profile.spec.catalog_path, where):
        versions = load_catalog().versions
    dynamo: dict[str, tuple[str, str]] = {}
    for key, pin in versions.dynamo.items():
        release, nixl = catalog_dynamo_pins(runs, pin)
        if (v := _version(key)) and release and nixl:
            dynamo[str(v)] = (release, nixl)
    flashinfer = {str(v): pin.flashinfer for key, pin in release_pins(runs, versions).items() if (v := _version(key))}
    return dynamo, flashinfer


_InFeed = tuple[str, bool, str | None]  # the feed, flagged a pre-release there, the release's URL there


def _found(listings: Sequence[FeedListing], pre: bool, newer_than: Version) -> dict[Version, list[_InFeed]]:
    """Version -> where each feed has it, for every feed release newer than `newer_than`; one every feed
    flags a pre-release only with `pre`."""
    found: dict[Version, list[_InFeed]] = {}
    for listing in listings:
        for release in listing.releases:
            version = Version(release.version)
            if version > newer_than:
                found.setdefault(version, []).append((listing.feed, release.prerelease, release.url))
    return {v: where for v, where in found.items() if pre or not all(flagged for _, flagged, _ in where)}


def check_profile(loaded: LoadedProfile, index: PackageIndex, *, pre: bool = False,
                  cache_dir: Path | None = None, pinned: _Pinned | None = None,
                  feeds: Sequence[FeedListing] = (), engine: str | None = None) -> ProfileCheck:
    """The newer Dynamo releases for one profile, following the pins of Dynamo's extra for engine `engine`
    (a stackpin.backends name; default the profile's spec.engine)."""
    runs = _engine(engine or loaded.profile.spec.engine.value)
    name = project(runs)
    pinned = pinned or _Pinned(index, cache_dir)
    versions = loaded.profile.spec.versions
    current = Pins.of(runs.name, getattr(versions, runs.name, None), dynamo=versions.dynamo,  # spec.versions.<engine>
                      flashinfer=versions.flashinfer, nixl=versions.nixl)
    known_dynamo, known_kernel = _catalog_pins(loaded, runs)
    if not index.files(DYNAMO):
        raise StackpinError(f"{index.shown}: has no {DYNAMO} releases", "is it the index your site mirrors PyPI to?")
    newer = [v for v in index.releases(DYNAMO, pre) if v > Version(versions.dynamo)]
    in_feeds = _found(feeds, pre, Version(versions.dynamo))
    releases: list[Pins] = []
    candidates = []
    for release in sorted(set(newer) | set(in_feeds)):
        where = in_feeds.get(release, [])
        found = [Found(feed=feed, url=url) for feed, _, url in where]
        flagged = release.is_prerelease or release.is_devrelease or any(f for _, f, _ in where)
        if release not in newer:
            candidates.append(Candidate(dynamo=str(release), prerelease=flagged, found=found, pins=None, missing=[]))
            continue
        ships, nixl = pinned.dynamo(str(release), known_dynamo, runs)
        flashinfer = pinned.flashinfer(ships, known_kernel, runs)
        pins = Pins.of(runs.name, ships, dynamo=str(release), flashinfer=flashinfer, nixl=nixl)
        releases.append(pins)
        missing = missing_pins(index, [(name, ships, f"{DYNAMO} {release}"),
                                       (FLASHINFER, flashinfer, f"{name} {ships}")])
        candidates.append(Candidate(dynamo=str(release), prerelease=flagged, pins=pins, missing=missing,
                                    found=[Found(feed="index", url=index.shown), *found]))
    unshipped: dict[str, list[str]] = {}
    for tracked_project, field in tracked(runs.name).items():
        if (held := getattr(versions, field, None)) is None:
            continue
        shipped = {str(v) for p in releases if (text := getattr(p, field)) and (v := _version(text))}
        later = [str(v) for v in index.releases(tracked_project, pre) if v > Version(held) and str(v) not in shipped]
        if later:
            unshipped[tracked_project] = later
    installable = [c.pins for c in candidates if c.installable]
    return ProfileCheck(profile=str(loaded.path), stack=loaded.profile.metadata.name, current=current,
                        available=installable[-1] if installable else None, newer_dynamo=[str(v) for v in newer],
                        releases=candidates, unshipped=unshipped)


def check_profiles(paths: Sequence[str | Path], index: PackageIndex, *, pre: bool = False,
                   cache_dir: Path | None = None, feeds: Sequence[FeedListing] = ()) -> list[ProfileCheck]:
    """Each profile's check against one index and the feeds' listings (its pages and the releases'
    metadata read once)."""
    pinned = _Pinned(index, cache_dir)
    return [check_profile(loaded, index, pre=pre, pinned=pinned, feeds=feeds) for loaded in load_profiles(paths)]


def default_cache_dir() -> Path | None:
    """Where downloaded package files are kept: the user's stackpin cache (`$STACKPIN_CACHE_DIR`, else
    `$XDG_CACHE_HOME/stackpin`, else `~/.cache/stackpin`), `packages/` below it; None when it is off."""
    from stackpin.history.verified import cache_dir

    base = cache_dir()
    return base / "packages" if base else None
