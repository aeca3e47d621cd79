"""`stackpin upgrade check`: the newer Dynamo releases on a package index and in the site's release feeds,
for each profile, with the vLLM, FlashInfer and NIXL each one pins.

stackpin follows Dynamo's pins: a Dynamo release brings the vLLM and NIXL its `vllm` extra pins
(ai-dynamo's Requires-Dist), and the FlashInfer that vLLM release pins (vllm's Requires-Dist). Pins come
from the profile's catalog (versions.yaml) when it knows the release (the same metadata, read when the
release was added), else from the index. The upgrade offered is the newest Dynamo release newer than the
profile's (final releases only unless `pre`) that is on the index and whose pins the index has too: a
release only a feed has (GitHub releases, container tags: stackpin.upgrade.feeds) is listed with where it
is, not offered (`upgrade propose` reads its pins and packages from the index), and one whose pin the
index lacks is listed with that pin (stackpin.upgrade.installable). Newer vLLM, FlashInfer and NIXL
releases that no newer Dynamo release pins are listed too, as information: stackpin does not propose them.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version
from pydantic import computed_field

from stackpin.catalog import load_catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.engines.index import PackageIndex
from stackpin.engines.pins import exact
from stackpin.errors import StackpinError
from stackpin.profile.loader import LoadedProfile, load_profiles
from stackpin.upgrade.feeds import FeedListing
from stackpin.upgrade.installable import MissingPin, missing_pins
from stackpin.upgrade.model import _Model  # the records' shape: frozen, camelCase keys

DYNAMO, VLLM, FLASHINFER, NIXL = "ai-dynamo", "vllm", "flashinfer-python", "nixl"
ENGINES = {VLLM: "vllm", FLASHINFER: "flashinfer", NIXL: "nixl"}  # project -> spec.versions field


class Pins(_Model):
    """A Dynamo release and what it brings; None where the release's metadata pins nothing."""

    dynamo: str
    vllm: str | None
    flashinfer: str | None
    nixl: str | None


class Found(_Model):
    """Where a release was found: `index` (its URL), or a feed (its release page or image reference)."""

    feed: str  # "index", github:OWNER/REPO, registry:HOST/REPOSITORY
    url: str | None


class Candidate(_Model):
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


class ProfileCheck(_Model):
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

    def dynamo(self, version: str, known: dict[str, tuple[str, str]]) -> tuple[str | None, str | None]:
        """The vLLM and NIXL a Dynamo release's `vllm` extra pins."""
        if version in known:
            return known[version]
        requires = self.requires(DYNAMO, version)
        return exact(requires, VLLM, "vllm"), exact(requires, NIXL, "vllm")

    def flashinfer(self, vllm: str | None, known: dict[str, str]) -> str | None:
        """The FlashInfer a vLLM release pins; None when neither the catalog nor the index has that vLLM."""
        if vllm is None:
            return None
        if vllm in known:
            return known[vllm]
        if _version(vllm) not in self.index.releases(VLLM, pre=True):
            return None
        return exact(self.requires(VLLM, vllm), FLASHINFER)


def _catalog_pins(loaded: LoadedProfile) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """The profile's catalog pins: Dynamo -> (vLLM, NIXL) and vLLM -> FlashInfer, by normalized version."""
    where = str(loaded.locate(("spec", "catalogPath")))
    with profile_catalogs(loaded.profile.spec.catalog_path, where):
        versions = load_catalog().versions
    dynamo = {str(v): (pin.vllm, pin.nixl) for key, pin in versions.dynamo.items() if (v := _version(key))}
    vllm = {str(v): pin.flashinfer for key, pin in versions.vllm.items() if (v := _version(key))}
    return dynamo, vllm


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
                  feeds: Sequence[FeedListing] = ()) -> ProfileCheck:
    pinned = pinned or _Pinned(index, cache_dir)
    versions = loaded.profile.spec.versions
    current = Pins(dynamo=versions.dynamo, vllm=versions.vllm, flashinfer=versions.flashinfer, nixl=versions.nixl)
    known_dynamo, known_vllm = _catalog_pins(loaded)
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
        vllm, nixl = pinned.dynamo(str(release), known_dynamo)
        pins = Pins(dynamo=str(release), vllm=vllm, nixl=nixl, flashinfer=pinned.flashinfer(vllm, known_vllm))
        releases.append(pins)
        missing = missing_pins(index, [(VLLM, vllm, f"{DYNAMO} {release}"),
                                       (FLASHINFER, pins.flashinfer, f"{VLLM} {vllm}")])
        candidates.append(Candidate(dynamo=str(release), prerelease=flagged, pins=pins, missing=missing,
                                    found=[Found(feed="index", url=index.shown), *found]))
    unshipped: dict[str, list[str]] = {}
    for project, field in ENGINES.items():
        mine = Version(getattr(versions, field))
        shipped = {str(v) for p in releases if (text := getattr(p, field)) and (v := _version(text))}
        later = [str(v) for v in index.releases(project, pre) if v > mine and str(v) not in shipped]
        if later:
            unshipped[project] = later
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
