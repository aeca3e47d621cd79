"""`stackpin upgrade propose` (stackpin.upgrade.propose does the work; this prints it)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from stackpin.cli.common import file_only, user_errors
from stackpin.errors import escape_controls


@click.command("propose")
@click.argument("profile", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--to", "to", metavar="dynamo==X", help="The Dynamo release to move to; the stack's engine, "
              "FlashInfer and NIXL follow its pins.")
@click.option("--find-links", "from_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), metavar="DIR",
              help="Read the packages from this directory of wheels and sdists (air-gapped sites; pip's --find-links).")
@click.option("--index-url", metavar="URL", help="PEP 691 package index [default: $PIP_INDEX_URL or "
              "https://pypi.org/simple].")
@click.option("--catalog", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Catalog directory the new releases go into [default: the profile's first spec.catalogPath "
              "entry, else the first of $STACKPIN_CATALOG_PATH].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), metavar="DIR", callback=file_only,
              help="The proposal directory [default: proposals/<candidate name>].")
@click.option("--force", is_flag=True, help="Replace an existing candidate profile and proposal.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json prints proposal.json.")
@user_errors
def propose(profile: Path, to: str | None, from_dir: Path | None, index_url: str | None, catalog: Path | None,
            out: Path | None, force: bool, output: str) -> None:
    """Propose PROFILE's upgrade to Dynamo X: the releases into a catalog, the candidate profile beside
    PROFILE (renamed flags rewritten, changed defaults pinned, a stale autotune cache set to be captured
    again), and the proposal directory: proposal.md (a pull request body), proposal.json, capture-job.yaml.

    Exit 0 proposed, 1 blocked (a flag the release removed with no successor: the proposal says why and no
    candidate is written) or the candidate has validation errors, 2 bad input. Nothing is replaced without
    --force.
    """
    from stackpin.upgrade.markdown import title
    from stackpin.upgrade.propose import proposal_json
    from stackpin.upgrade.propose import propose as run
    from stackpin.upgrade.releases import Source

    if from_dir is not None and index_url is not None:
        raise click.UsageError("give --find-links or --index-url, not both")
    done = run(profile, to=to, source=Source(from_dir, index_url), catalog=catalog, out=out, force=force)
    p = done.proposal
    if output == "json":
        click.echo(proposal_json(p), nl=False)
    else:
        click.echo(title(p))
        for r in p.rewrites:
            click.echo(f"  rewritten  {r.path}: {r.old} -> {r.new}")
        for d in p.pinned:
            click.echo(f"  pinned     {d.path}: {d.value} (default {d.old_default} -> {d.new_default})")
        for b in p.blockers:  # messages quote the profile's values: one line each, whatever they hold
            click.echo(escape_controls(f"  blocker    {b.path}: {b.message}"))
        for f in p.findings:
            click.echo(escape_controls(f"  finding    {f.severity} {f.code} {f.path}: {f.message}"))
        for m in p.remeasure:
            click.echo(f"  remeasure  {m}")
        for path in done.files:
            click.echo(f"  wrote      {path}")
    if p.blocked or any(f.severity == "error" for f in p.findings):
        sys.exit(1)
