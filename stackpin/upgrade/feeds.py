"""Dynamo release feeds besides the package index: a Dynamo release is tagged on GitHub and pushed as NGC
containers before (or without) its wheel reaching the site's index, so `upgrade check` can read them too.

- `github:OWNER/REPO`: the repository's GitHub releases (stackpin.upgrade.github); drafts are skipped, and
  a release GitHub flags as a pre-release counts as one whatever its tag says.
- `registry:HOST/REPOSITORY`: a container repository's tags (`GET /v2/<name>/tags/list`, through
  stackpin.lock.oci's RegistryClient: its docker-config credentials, retries and deadlines).

A tag is a release when it is a PEP 440 version (`v1.7.0` and `1.7.0` alike); any other tag (`latest`,
`1.7.0-cuda13`, `nightly`) is counted and skipped. A release's version is normalized as PEP 440 writes it,
so `v1.7.0` on GitHub and `1.7.0` on the index are one release.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from stackpin.errors import ResolveError, StackpinError, clip
from stackpin.models import CamelModel  # the records' shape: frozen, camelCase keys

KINDS = ("github", "registry")
FEED_SECONDS = 120.0  # every feed together, all pages
_GITHUB_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
EXAMPLES = 5  # skipped tags named in the listing


@dataclass(frozen=True)
class Feed:
    kind: str  # one of KINDS
    name: str  # OWNER/REPO, or HOST/REPOSITORY

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def parse_feed(text: str) -> Feed:
    """`github:OWNER/REPO` or `registry:HOST/REPOSITORY`; one line naming the value otherwise."""
    kind, _, name = text.strip().partition(":")
    if kind == "github" and _GITHUB_REPO.fullmatch(name):
        return Feed(kind, name)
    if kind == "registry" and name:
        from stackpin.lock.oci.reference import ImageRef

        try:
            ref = ImageRef.parse(name)
        except ResolveError as exc:
            raise StackpinError(f"--feed {clip(text)}: {exc.message}") from None
        if ref.digest or ref.tag != "latest" or name.endswith(":latest") or "/" not in name:
            raise StackpinError(f"--feed {clip(text)}: give the repository as HOST/REPOSITORY, without a tag",
                                "e.g. registry:nvcr.io/nvidia/ai-dynamo/vllm-runtime")
        return Feed(kind, ref.name)
    raise StackpinError(f"--feed {clip(text)}: not a feed",
                        "give github:OWNER/REPO (GitHub releases) or registry:HOST/REPOSITORY (container tags)")


class FeedRelease(CamelModel):
    version: str  # PEP 440, normalized
    tag: str
    prerelease: bool
    url: str | None  # the release's page, or the image reference


class FeedListing(CamelModel):
    feed: str  # as given: github:OWNER/REPO, registry:HOST/REPOSITORY
    source: str  # what was read: the API URL of the releases, or the registry repository
    releases: list[FeedRelease]  # oldest first
    drafts: int  # GitHub drafts skipped
    other_tags: int  # tags that are not PEP 440 versions, skipped
    other_examples: list[str]  # a few of them, sorted


def _version(tag: str) -> Version | None:
    try:
        return Version(tag)
    except InvalidVersion:
        return None


def _printable(tag: str) -> str:
    return clip("".join(c if c.isprintable() else "?" for c in tag), 40)


def _listing(feed: Feed, source: str, tagged: Sequence[tuple[str, bool, str | None]], drafts: int) -> FeedListing:
    """(tag, flagged pre-release, url) -> the listing; of two tags of one version (`v1.7.0`, `1.7.0`) the
    first in sorted order stands for it."""
    found: dict[Version, FeedRelease] = {}
    other = []
    for tag, flagged, url in sorted(tagged):
        version = _version(tag)
        if version is None:
            other.append(tag)
            continue
        if version not in found:
            found[version] = FeedRelease(version=str(version), tag=tag, url=url,
                                         prerelease=flagged or version.is_prerelease or version.is_devrelease)
    return FeedListing(feed=str(feed), source=source, releases=[found[v] for v in sorted(found)], drafts=drafts,
                       other_tags=len(other), other_examples=[_printable(t) for t in other[:EXAMPLES]])


def _github(feed: Feed, api: str, token: str | None, deadline_at: float) -> FeedListing:
    from stackpin.engines.pipconfig import redact
    from stackpin.upgrade.github import list_releases

    releases = list_releases(feed.name, api=api, token=token, deadline_at=deadline_at)
    published = [(r.tag, r.prerelease, r.url) for r in releases if not r.draft]
    return _listing(feed, f"{redact(api).rstrip('/')}/repos/{feed.name}/releases", published,
                    drafts=sum(r.draft for r in releases))


def _registry(feed: Feed, deadline_at: float, docker_config: str | None) -> FeedListing:
    from stackpin.lock.oci.client import RegistryClient

    with RegistryClient(docker_config=docker_config, request_deadline=30.0, deadline_at=deadline_at) as client:
        tags = client.list_tags(feed.name)
    return _listing(feed, feed.name, [(t, False, f"{feed.name}:{t}") for t in set(tags)], drafts=0)


def read_feeds(feeds: Sequence[Feed], *, github_api: str, token: str | None = None, docker_config: str | None = None,
               seconds: float = FEED_SECONDS) -> list[FeedListing]:
    """Each feed's releases, in the order given; `seconds` bounds all of them together. A feed that cannot
    be read is an error naming it: a check that silently lost a feed would say "up to date" wrongly."""
    deadline_at = time.monotonic() + seconds
    listings = []
    for feed in dict.fromkeys(feeds):
        try:
            if feed.kind == "github":
                listings.append(_github(feed, github_api, token, deadline_at))
            else:
                listings.append(_registry(feed, deadline_at, docker_config))
        except ResolveError as exc:
            raise ResolveError(f"feed {feed}: {exc.message}", exc.hint) from None
    return listings
