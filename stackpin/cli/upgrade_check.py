"""`stackpin upgrade check`: newer Dynamo releases for each profile, with the engines they pin, from the
package index and the site's release feeds (GitHub releases, container tags)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import OUTPUT, emit, user_errors

if TYPE_CHECKING:
    from stackpin.upgrade.check import Candidate, Pins, ProfileCheck
    from stackpin.upgrade.feeds import FeedListing


@click.command("check")
@click.argument("paths", nargs=-1, required=True, metavar="PROFILE|DIR...")
@click.option("--index-url", metavar="URL",
              help="Package index (PEP 691 JSON or PEP 503 HTML simple API) [default: $PIP_INDEX_URL, else pip's "
                   "configured index-url, else https://pypi.org/simple]; user:password@ in it, or ~/.netrc, "
                   "for one that asks.")
@click.option("--find-links", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Read the releases from this directory of wheels and sdists instead of an index (air-gapped "
                   "sites).")
@click.option("--feed", "feeds", multiple=True, metavar="FEED", envvar="STACKPIN_UPGRADE_FEEDS",
              help="Also read Dynamo releases from this feed (repeatable): github:OWNER/REPO (the repository's "
                   "GitHub releases, e.g. github:ai-dynamo/dynamo) or registry:HOST/REPOSITORY (a container "
                   "repository's tags, e.g. registry:nvcr.io/nvidia/ai-dynamo/vllm-runtime) [default: "
                   "$STACKPIN_UPGRADE_FEEDS, space-separated]. A release only a feed has is listed, not offered.")
@click.option("--github-api", metavar="URL", envvar="GITHUB_API_URL", default="https://api.github.com",
              show_default=True, help="The GitHub REST API github: feeds read (GitHub Enterprise Server: "
                                      "https://HOST/api/v3) [env: GITHUB_API_URL]; $GITHUB_TOKEN, when set, is "
                                      "sent to it.")
@click.option("--pre", is_flag=True, help="Consider pre-releases and development releases too.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Keep the package files downloaded for their metadata here [default: the user's stackpin "
                   "cache, packages/].")
@OUTPUT
@user_errors
def check(paths: tuple[str, ...], index_url: str | None, find_links: Path | None, feeds: tuple[str, ...],
          github_api: str, pre: bool, cache_dir: Path | None, output: str) -> None:
    """Check a package index, and any release feeds, for Dynamo releases newer than each profile's, with
    the engine release, NIXL and FlashInfer each one pins: stackpin follows Dynamo's pins. The upgrade offered is the
    newest one the index can install; one only a feed has, or whose pins the index lacks, is listed with
    where it is or the pin it lacks. Newer engine releases no Dynamo release ships are listed as information.

    Exit 0 when no profile has an upgrade the index can install, 1 when one has, 2 on bad input or an index
    or feed that cannot be read.
    """
    if index_url and find_links:
        raise click.UsageError("give --index-url or --find-links, not both")
    import os

    from stackpin.engines.index import PackageIndex
    from stackpin.upgrade.check import check_profiles, default_cache_dir
    from stackpin.upgrade.feeds import parse_feed, read_feeds
    from stackpin.validate.check import expand_profile_args

    wanted = [parse_feed(text) for text in feeds]
    profiles = expand_profile_args(paths)
    with PackageIndex(index_url, find_links=find_links) as index:
        listings = read_feeds(wanted, github_api=github_api, token=os.environ.get("GITHUB_TOKEN") or None)
        results = check_profiles(profiles, index, pre=pre, cache_dir=cache_dir or default_cache_dir(),
                                 feeds=listings)
    if output == "text":
        _print(results, index.shown, listings)
    else:
        emit({"index": index.shown, "pre": pre, "feeds": [f.model_dump(mode="json", by_alias=True) for f in listings],
              "profiles": [r.model_dump(mode="json", by_alias=True) for r in results]}, output)
    sys.exit(1 if any(r.upgrade_available for r in results) else 0)


def _change(name: str, old: str | None, new: str | None) -> str:
    if new is None:  # the release pins none, or its engine release is on neither the catalog nor the index
        return f"{name} {old} -> ?"
    return f"{name} {new}" if old == new else f"{name} {old} -> {new}"


def _pins(current: Pins, available: Pins) -> str:
    shared = [_change(name, getattr(current, name), getattr(available, name)) for name in ("flashinfer", "nixl")]
    return ", ".join([_change(current.engine, current.release, available.release), *shared])


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _feed_line(listing: FeedListing) -> str:
    """`feed NAME (what was read): N releases (M pre-releases); skipped: ...`."""
    read = f" ({listing.source})" if listing.source != listing.feed.partition(":")[2] else ""
    text = f"feed {listing.feed}{read}: {_count(len(listing.releases), 'release', 'releases')}"
    pre = sum(r.prerelease for r in listing.releases)
    text += f" ({_count(pre, 'pre-release', 'pre-releases')})" if pre else ""
    skipped = [_count(listing.drafts, "draft", "drafts")] if listing.drafts else []
    if listing.other_tags:
        more = ", ..." if listing.other_tags > len(listing.other_examples) else ""
        skipped.append(_count(listing.other_tags, "tag that is not a version", "tags that are not versions")
                       + f" ({', '.join(listing.other_examples)}{more})")
    return text + (f"; skipped: {', '.join(skipped)}" if skipped else "")


def _where(candidate: Candidate, shown: str) -> str:
    """Where a release is, and why it is not offered when it is not."""
    places = ", ".join(f.feed for f in candidate.found) + (" (pre-release)" if candidate.prerelease else "")
    if not candidate.on_index:
        page = next((f.url for f in candidate.found if f.url), None)
        return (f"{places}; not on the index: cannot be proposed until {shown} has ai-dynamo {candidate.dynamo}"
                + (f" (see {page})" if page else ""))
    if candidate.missing:
        lacks = "; ".join(f"{m.pinned_by} pins {m.requirement}" for m in candidate.missing)
        return f"{places}; cannot be installed from the index: {lacks}, which {shown} does not have"
    return places


def _print(results: list[ProfileCheck], shown: str, listings: list[FeedListing]) -> None:
    rows = [("stack", "current", "available", "pins")]
    for r in results:
        current = f"dynamo {r.current.dynamo}"
        if r.available is None:
            rows.append((r.stack, current, "none installable" if r.releases else "up to date", ""))
        else:
            rows.append((r.stack, current, f"-> {r.available.dynamo}", _pins(r.current, r.available)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    click.echo(f"index: {shown}")
    for listing in listings:
        click.echo(_feed_line(listing))
    for row in rows:
        click.echo("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[3]]).rstrip())
    from packaging.version import Version

    # Where each newer release is: when a feed was read, or one is not offered (the table says the rest).
    shown_too = listings or any(not c.installable for r in results for c in r.releases)
    lines = {(c.dynamo, _where(c, shown)) for r in results for c in r.releases} if shown_too else set()
    if lines:
        click.echo("newer Dynamo releases:")
        width = max(len(version) for version, _ in lines)
        for version, where in sorted(lines, key=lambda line: (Version(line[0]), line[1])):
            click.echo(f"  {version.ljust(width)}  {where}")
    notes = {(project, v) for r in results for project, versions in r.unshipped.items() for v in versions}
    if notes:
        click.echo("not shipped by any newer Dynamo release; stackpin follows Dynamo's pins:")
        for project in sorted({p for p, _ in notes}):
            click.echo(f"  {project} " + ", ".join(sorted((v for p, v in notes if p == project), key=Version)))
