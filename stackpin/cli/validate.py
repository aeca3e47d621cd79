"""`stackpin validate`, `schema`, `rules`: check profiles and rendered manifests; print the schema and rules."""

from __future__ import annotations

import json
import sys

import click

from stackpin.cli.common import OUTPUT, emit, fail, user_errors


@click.command()
@click.argument("paths", nargs=-1, metavar="PROFILE|DIR...")
@click.option("--manifests", is_flag=True,
              help="PATHS are rendered Kubernetes manifests (files or directories): check them against the "
                   "bundled CRDs and Kubernetes schemas.")
@click.option("--upgrade-to", metavar="ENGINE==X",
              help="Report what in each profile breaks or changes meaning under release X of its engine "
                   "(vllm==X, sglang==X; removed flags, env vars "
                   "and backends, changed defaults it relies on, an autotune cache X will not read, the Dynamo "
                   "release that ships X) instead of validating it as pinned.")
@click.option("--fail-on", type=click.Choice(["error", "warning"]), default="error", show_default=True,
              help="Lowest severity that makes the command exit 1; findings the profile acknowledges "
                   "(spec.acknowledge) do not count.")
@OUTPUT
@user_errors
def validate(paths: tuple[str, ...], manifests: bool, upgrade_to: str | None, fail_on: str, output: str) -> None:
    """Check profiles (files or directories) against the hardware, the model and the pinned engines;
    with --upgrade-to ENGINE==X (vllm==X, sglang==X: the stacks' own engine), report what moving them to its
    release X breaks or changes; with --manifests, check rendered manifests instead.

    Exit 0 when no finding reaches --fail-on (acknowledged ones do not), 1 when one does, 2 on
    unreadable or malformed input.
    """
    if not paths:
        raise click.UsageError("give at least one profile or directory (or --manifests DIR|FILE...)")
    if manifests:
        if upgrade_to:
            raise click.UsageError("--upgrade-to checks profiles, not --manifests")
        _validate_manifests(paths, output)
        return
    profiles = paths
    from stackpin.validate import Severity
    from stackpin.validate.check import check_profiles, expand_profile_args

    target = None
    if upgrade_to is not None:
        from stackpin.validate.upgrade import parse_target

        try:
            target = parse_target(upgrade_to)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--upgrade-to") from None
    result = check_profiles(expand_profile_args(profiles), upgrade_to=target)
    if output == "text":
        from stackpin.cli.report import print_reports

        print_reports(result)
    else:
        emit(result.to_data(), output)
    if result.input_errors:
        if output == "text":
            fail(list(result.input_errors), 2)
        sys.exit(2)
    if result.failed(Severity(fail_on)):
        sys.exit(1)


def _validate_manifests(paths: tuple[str, ...], output: str) -> None:
    from pathlib import Path

    from stackpin.extras import require
    from stackpin.validate.manifests import validate_paths

    require("manifests", "stackpin validate --manifests")  # before any file is read: the same answer for every input
    errors = validate_paths([Path(p) for p in paths])
    if output == "text":
        for err in errors:
            click.echo(str(err))
        if not errors:
            click.echo(f"manifests valid: {', '.join(paths)}")  # the answer asked for: stdout
    else:
        import msgspec

        emit({"errors": [msgspec.structs.asdict(e) for e in errors]}, output)
    if errors:
        sys.exit(1)


@click.command()
def schema() -> None:
    """Print the StackProfile JSON Schema (generated from the models)."""
    from stackpin.profile.model import profile_json_schema

    click.echo(json.dumps(profile_json_schema(), indent=2, sort_keys=True))


@click.command()
@OUTPUT
def rules(output: str) -> None:
    """List the validation rules with their stable codes."""
    from stackpin.validate import all_rules

    table = [{"code": r.code, "severity": str(r.severity), "title": r.title, "warningWhen": r.warning_when,
              "acknowledgeable": r.acknowledgeable} for r in all_rules()]
    if output == "text":
        for row in table:
            lowered = f" (a warning when {row['warningWhen']})" if row["warningWhen"] else ""
            click.echo(f"{row['code']}  {row['severity']:<7}  {row['title']}{lowered}")
    else:
        emit(table, output)
