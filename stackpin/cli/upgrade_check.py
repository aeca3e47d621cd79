"""`stackpin upgrade check`: newer Dynamo releases for each profile, with the engines they pin."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import OUTPUT, emit, user_errors

if TYPE_CHECKING:
    from stackpin.upgrade.check import Pins, ProfileCheck


@click.command("check")
@click.argument("paths", nargs=-1, required=True, metavar="PROFILE|DIR...")
@click.option("--index-url", metavar="URL",
              help="Package index (PEP 691 JSON or PEP 503 HTML simple API) [default: $PIP_INDEX_URL, else pip's "
                   "configured index-url, else https://pypi.org/simple]; user:password@ in it, or ~/.netrc, "
                   "for one that asks.")
@click.option("--find-links", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Read the releases from this directory of wheels and sdists instead of an index (air-gapped "
                   "sites).")
@click.option("--pre", is_flag=True, help="Consider pre-releases and development releases too.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Keep the package files downloaded for their metadata here [default: the user's stackpin "
                   "cache, packages/].")
@OUTPUT
@user_errors
def check(paths: tuple[str, ...], index_url: str | None, find_links: Path | None, pre: bool,
          cache_dir: Path | None, output: str) -> None:
    """Check a package index for Dynamo releases newer than each profile's, with the vLLM, NIXL and
    FlashInfer each one pins: stackpin follows Dynamo's pins. Newer engine releases no Dynamo release
    ships are listed as information.

    Exit 0 when every profile is up to date, 1 when an upgrade is available for one, 2 on bad input or an
    index that cannot be read.
    """
    if index_url and find_links:
        raise click.UsageError("give --index-url or --find-links, not both")
    from stackpin.engines.index import PackageIndex
    from stackpin.upgrade.check import check_profiles, default_cache_dir
    from stackpin.validate.check import expand_profile_args

    profiles = expand_profile_args(paths)
    with PackageIndex(index_url, find_links=find_links) as index:
        results = check_profiles(profiles, index, pre=pre, cache_dir=cache_dir or default_cache_dir())
    if output == "text":
        _print(results, index.shown)
    else:
        emit({"index": index.shown, "pre": pre,
              "profiles": [r.model_dump(mode="json", by_alias=True) for r in results]}, output)
    sys.exit(1 if any(r.upgrade_available for r in results) else 0)


def _change(name: str, old: str | None, new: str | None) -> str:
    if new is None:  # the release pins none, or its vLLM is on neither the catalog nor the index
        return f"{name} {old} -> ?"
    return f"{name} {new}" if old == new else f"{name} {old} -> {new}"


def _pins(current: Pins, available: Pins) -> str:
    return ", ".join(_change(name, getattr(current, name), getattr(available, name))
                     for name in ("vllm", "flashinfer", "nixl"))


def _print(results: list[ProfileCheck], shown: str) -> None:
    rows = [("stack", "current", "available", "pins")]
    for r in results:
        current = f"dynamo {r.current.dynamo}"
        if r.available is None:
            rows.append((r.stack, current, "up to date", ""))
        else:
            rows.append((r.stack, current, f"-> {r.available.dynamo}", _pins(r.current, r.available)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    click.echo(f"index: {shown}")
    for row in rows:
        click.echo("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[3]]).rstrip())
    notes = {(project, v) for r in results for project, versions in r.unshipped.items() for v in versions}
    if notes:
        click.echo("not shipped by any newer Dynamo release; stackpin follows Dynamo's pins:")
        from packaging.version import Version

        for project in sorted({p for p, _ in notes}):
            click.echo(f"  {project} " + ", ".join(sorted((v for p, v in notes if p == project), key=Version)))
