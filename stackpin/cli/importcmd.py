"""`stackpin import`: an existing DynamoGraphDeployment (file or kustomize directory) -> a stackpin profile."""

from __future__ import annotations

import json
from pathlib import Path

import click

from stackpin.cli.common import STDOUT, emit, user_errors


@click.command(name="import")
@click.argument("source", metavar="DGD.yaml|DIR")
@click.option("--out", "out", metavar="PROFILE.yaml", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the profile here (default, or `-`: stdout). An existing file is refused unless --force.")
@click.option("--force", is_flag=True, help="Replace an existing --out file.")
@click.option("--platform", metavar="NAME", help="Target platform when the node selector names none.")
@click.option("--dynamo", metavar="VERSION", help="Pin this Dynamo release instead of the image tag's.")
@click.option("--report", "report", metavar="FILE|-", type=click.Path(dir_okay=False, allow_dash=True),
              help="Also lock the profile against stand-in pins (no registry), render it and write the round-trip "
                   "report (JSON: every item per component, upstream and rendered value, status, reason) here; "
                   "`-` is stdout (then the profile needs --out). Each difference is also a line on stderr.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: the profile (stdout or --out), what was not carried over on stderr; json: both on stdout.")
@user_errors
def import_(source: str, out: str | None, force: bool, platform: str | None, dynamo: str | None, report: str | None,
            output: str) -> None:
    """Write the stackpin profile equivalent to an existing DynamoGraphDeployment (v1alpha1 or v1beta1), with
    a report of what could not be carried over. Exit 0 written, 2 bad input."""
    from stackpin.errors import InputError, Location, Problem
    from stackpin.imports.profile import import_dgd
    from stackpin.imports.source import read_dgds
    from stackpin.profile.model import StackProfile
    from stackpin.records import problems_of
    from stackpin.yamlio import dump_yaml, write_output

    if out == STDOUT:
        out = None
    if report == STDOUT and out is None and output == "text":
        raise InputError([Problem(Location(source), "", "--report - and the profile would share stdout; pass "
                                  "--out PROFILE.yaml or --report FILE")])
    dgds = read_dgds(Path(source))
    if len(dgds) != 1:
        raise InputError([Problem(Location(source), "", f"holds {len(dgds)} DynamoGraphDeployments "
                                  f"({', '.join(d.name for d in dgds)}); import one file each")])
    imported = import_dgd(dgds[0], platform=platform, dynamo=dynamo)
    # The importer's own output must be a valid profile; say which field if not.
    if problems := problems_of(imported.profile, StackProfile):
        why = "; ".join(f"{'.'.join(map(str, path))}: {message}" for path, message in problems[:3])
        raise InputError([Problem(Location(source), "", f"the imported profile is not valid: {why}")])
    trip = None
    if report is not None:
        from stackpin.imports.roundtrip import round_trip

        trip = round_trip(dgds[0], imported)
    text = f"# Imported by `stackpin import` from {source}\n" + dump_yaml(imported.profile, sort_keys=False)
    if report is not None and report != STDOUT and not Path(report).parent.is_dir():
        # Before the profile is written: a report that cannot be written leaves nothing half-done.
        raise InputError([Problem(Location(report), "", f"cannot write: {Path(report).parent} is not a directory")])
    if out is not None:
        target = Path(out)
        if (target.exists() or target.is_symlink()) and not force:
            raise InputError([Problem(Location(out), "", "exists; pass --force to replace it")])
        if target.is_symlink():
            raise InputError([Problem(Location(out), "", "is a symbolic link; stackpin writes only the file named")])
        write_output(target, text)
    if trip is not None and report != STDOUT:
        write_output(Path(report), json.dumps(trip.to_data(), indent=2) + "\n")  # type: ignore[arg-type]
    if output == "json":
        emit({"profile": imported.profile, "notCarried": [
            {"component": n.component, "item": n.item, "message": n.message} for n in imported.notes],
            **({"roundTrip": trip.to_data()} if trip is not None else {})}, "json")
    elif trip is not None and report == STDOUT:
        click.echo(json.dumps(trip.to_data(), indent=2))
    if output == "json":
        return
    if out is None:
        click.echo(text, nl=False)
    for note in imported.notes:
        click.echo(f"not carried: {note}", err=True)
    for item in trip.differences if trip is not None else ():
        click.echo(f"round trip: {item.component}: {item.item}: {item.status}: upstream {_shown(item.upstream)}, "
                   f"rendered {_shown(item.rendered)}: {item.reason or 'UNEXPLAINED'}", err=True)
    if out is not None:
        click.echo(f"wrote {out} ({len(imported.notes)} note(s) above)", err=True)


def _shown(value: str | None) -> str:
    if value is None:
        return "-"
    flat = value.replace("\n", " ")
    return flat if len(flat) <= 80 else flat[:77] + "..."
