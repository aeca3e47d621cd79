"""The stackpin command line: parse, call one library function, print. Heavy imports stay inside commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

OUTPUT = click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text",
                      show_default=True, help="Output format; json and yaml have stable keys.")


def _fail(lines: list[str], code: int) -> None:
    for line in lines:
        click.echo(f"error: {line}" if not line.startswith(("error", "warning")) else line, err=True)
    sys.exit(code)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn StackpinError into one line per problem on stderr and its exit code; never a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from stackpin.errors import StackpinError

        try:
            return fn(*args, **kwargs)
        except StackpinError as exc:
            _fail(exc.lines(), exc.exit_code)

    return wrapper


def emit(data: Any, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        from stackpin.yamlio import dump_yaml

        click.echo(dump_yaml(data), nl=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="stackpin")
def main() -> None:
    """Pin, validate, lock and render LLM serving stacks (vLLM + FlashInfer + NVIDIA Dynamo)."""


@main.command()
@click.argument("profiles", nargs=-1)
@click.option("--manifests", "manifests", multiple=True, metavar="DIR|FILE",
              help="Validate rendered Kubernetes manifests against the bundled CRDs and Kubernetes schemas.")
@click.option("--fail-on", type=click.Choice(["error", "warning"]), default="error", show_default=True,
              help="Lowest severity that makes the command exit 1.")
@OUTPUT
@user_errors
def validate(profiles: tuple[str, ...], manifests: tuple[str, ...], fail_on: str, output: str) -> None:
    """Check PROFILES (files or directories) against the hardware, the model and the pinned engines.

    Exit 0 when no finding reaches --fail-on, 1 when one does, 2 on unreadable or malformed input.
    """
    if not profiles and not manifests:
        raise click.UsageError("give at least one profile, or --manifests DIR|FILE")
    if manifests:
        _validate_manifests(manifests, output)
    if not profiles:
        return
    from stackpin.checks import check_profiles, expand_profile_args
    from stackpin.validate import Severity

    result = check_profiles(expand_profile_args(profiles))
    if output == "text":
        from stackpin.report import print_reports

        print_reports(result)
    else:
        emit(result.model_dump(mode="json"), output)
    if result.input_errors:
        if output == "text":
            _fail(list(result.input_errors), 2)
        sys.exit(2)
    if result.failed(Severity(fail_on)):
        sys.exit(1)


def _validate_manifests(paths: tuple[str, ...], output: str) -> None:
    from pathlib import Path

    from stackpin.render.schemas import validate_paths

    errors = validate_paths([Path(p) for p in paths])
    if output == "text":
        for err in errors:
            click.echo(str(err))
        if not errors:
            click.echo(f"manifests valid: {', '.join(paths)}", err=True)
    else:
        emit({"errors": [vars(e) if not hasattr(e, "__dataclass_fields__") else
                         {k: getattr(e, k) for k in e.__dataclass_fields__} for e in errors]}, output)
    if errors:
        sys.exit(1)


@main.command()
def schema() -> None:
    """Print the StackProfile JSON Schema (generated from the models)."""
    from stackpin.profile import profile_json_schema

    click.echo(json.dumps(profile_json_schema(), indent=2, sort_keys=True))


@main.command()
@OUTPUT
def rules(output: str) -> None:
    """List the validation rules with their stable codes."""
    from stackpin.validate import all_rules

    table = [{"code": r.code, "severity": str(r.severity), "title": r.title} for r in all_rules()]
    if output == "text":
        for row in table:
            click.echo(f"{row['code']}  {row['severity']:<7}  {row['title']}")
    else:
        emit(table, output)
