"""The stackpin command line: parse, call one library function, print. Heavy imports stay inside commands."""

from __future__ import annotations

import json
import sys

import click

from stackpin.cli_common import OUTPUT, emit, fail, user_errors


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
            fail(list(result.input_errors), 2)
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
        from dataclasses import asdict

        emit({"errors": [asdict(e) for e in errors]}, output)
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


def _parse_mirrors(values: tuple[str, ...]) -> dict[str, str]:
    mirrors = {}
    for value in values:
        registry, sep, mirror = value.partition("=")
        if not sep or not registry or not mirror:
            raise click.BadParameter(f"{value!r} is not REGISTRY=MIRROR (e.g. nvcr.io=registry.local:5000/nvcr)",
                                     param_hint="--mirror")
        mirrors[registry] = mirror
    return mirrors


@main.command()
@click.argument("profiles", nargs=-1, required=True)
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where lockfiles are written (<name>.lock.yaml).")
@click.option("--check", is_flag=True, help="Exit 1 if a lockfile is missing or stale; write nothing.")
@click.option("--offline", is_flag=True, help="Use only pins already in the lockfiles; fail on anything floating.")
@click.option("--mirror", "mirrors", multiple=True, metavar="REGISTRY=MIRROR",
              help="Resolve REGISTRY's images through MIRROR (host[:port][/prefix]); adds to spec.mirrors.")
@click.option("--oci-layout", type=click.Path(exists=True, file_okay=False),
              help="Resolve images and artifacts from this OCI image layout instead of registries.")
@click.option("--hf-cache", type=click.Path(exists=True, file_okay=False),
              help="Resolve model revisions from this Hugging Face cache directory.")
@click.option("--hf-endpoint", help="Resolve model revisions through this Hub API endpoint (default $HF_ENDPOINT "
              "or https://huggingface.co).")
@click.option("--docker-config", type=click.Path(dir_okay=False), help="docker config.json with registry "
              "credentials (default $DOCKER_CONFIG/config.json or ~/.docker/config.json).")
@user_errors
def lock(profiles: tuple[str, ...], lockdir: str, check: bool, offline: bool, mirrors: tuple[str, ...],
         oci_layout: str | None, hf_cache: str | None, hf_endpoint: str | None, docker_config: str | None) -> None:
    """Pin every floating reference of PROFILES and write lockfiles/<name>.lock.yaml.

    Nothing is written unless every profile validates and every reference resolves.
    """
    from pathlib import Path

    from stackpin.checks import expand_profile_args

    paths = expand_profile_args(profiles)
    if check:
        from stackpin.lock import check_locks

        outcomes = check_locks(paths, Path(lockdir))
        for o in outcomes:
            line = f"{o.status:<8} {o.lockfile} ({o.profile})" + (f": {o.detail}" if o.detail else "")
            click.echo(line, err=o.status != "current")
        if any(o.status != "current" for o in outcomes):
            sys.exit(1)
        return
    from stackpin.lockrun import run_lock

    written = run_lock(paths, Path(lockdir), offline=offline, mirrors=_parse_mirrors(mirrors),
                       oci_layout=oci_layout, hf_cache=hf_cache, hf_endpoint=hf_endpoint, docker_config=docker_config,
                       on_note=lambda note: click.echo(f"warning: {note}", err=True))
    for path, lock_ in written:
        note = "  [stand-in pins: demo mirror]" if lock_.resolved.stand_in else ""
        click.echo(f"locked {path}  {lock_.stack_digest}{note}")


def _register() -> None:
    # Command groups live in their own modules; importing them costs only their click definitions.
    from stackpin.cli_autotune import autotune
    from stackpin.cli_render import render

    main.add_command(autotune)
    main.add_command(render)


_register()
