"""`stackpin lock`: pin every floating reference of profiles into lockfiles, or check them (`--check`)."""

from __future__ import annotations

import sys

import click

from stackpin.cli.common import OUTPUT, emit, finite, user_errors


def _parse_mirrors(values: tuple[str, ...]) -> dict[str, str]:
    mirrors = {}
    for value in values:
        registry, sep, mirror = value.partition("=")
        if not sep or not registry or not mirror:
            raise click.BadParameter(f"{value!r} is not REGISTRY=MIRROR (e.g. nvcr.io=registry.local:5000/nvcr)",
                                     param_hint="--mirror")
        mirrors[registry] = mirror
    return mirrors


def _unreachable_hint(registry: str, lockdir: str) -> str:
    return (f"try --offline to use the pins already in {lockdir}/, --mirror {registry}=HOST[:PORT][/PREFIX] to "
            "resolve through a mirror this machine reaches, or --oci-layout DIR to resolve from a copied OCI "
            "layout; behind a proxy, set HTTPS_PROXY")


# Every command that reads a registry (lock, mirror): where its credentials come from.
DOCKER_CONFIG = click.option(
    "--docker-config", type=click.Path(dir_okay=False),
    help="Read registry credentials from this docker config.json or containers auth.json alone (default: "
         "$REGISTRY_AUTH_FILE, else podman's auth.json and docker's config.json; docs/lockfiles.md, Registry "
         "credentials).")


@click.command()
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
@DOCKER_CONFIG
@click.option("--timeout", default=300.0, show_default=True, type=finite(min=0, min_open=True),
              metavar="SECONDS", help="Give up resolving after this long, naming what had not answered.")
@OUTPUT
@user_errors
def lock(profiles: tuple[str, ...], lockdir: str, check: bool, offline: bool, mirrors: tuple[str, ...],
         oci_layout: str | None, hf_cache: str | None, hf_endpoint: str | None, docker_config: str | None,
         timeout: float, output: str) -> None:
    """Pin every floating reference of PROFILES and write lockfiles/<name>.lock.yaml.

    Nothing is written unless every profile validates and every reference resolves.
    """
    from pathlib import Path

    from stackpin.validate.check import expand_profile_args

    paths = expand_profile_args(profiles)
    if check:
        from stackpin.lock.lockfile import check_locks

        outcomes = check_locks(paths, Path(lockdir))
        current = all(o.status == "current" for o in outcomes)
        if output == "text":
            for o in outcomes:
                click.echo(f"{o.status:<8} {o.lockfile} ({o.profile})" + (f": {o.detail}" if o.detail else ""))
        else:
            emit({"current": current, "lockfiles": [{"profile": o.profile, "lockfile": o.lockfile, "status": o.status,
                                                     "detail": o.detail} for o in outcomes]}, output)
        if not current:
            click.echo("error: lockfiles are not current; run stackpin lock", err=True)
            sys.exit(1)
        return
    from stackpin.errors import RegistryUnreachable
    from stackpin.lock.run import run_lock

    try:
        written = run_lock(paths, Path(lockdir), offline=offline, mirrors=_parse_mirrors(mirrors),
                           oci_layout=oci_layout, hf_cache=hf_cache, hf_endpoint=hf_endpoint,
                           docker_config=docker_config, timeout=timeout,
                           on_note=lambda note: click.echo(f"warning: {note}", err=True))
    except RegistryUnreachable as exc:  # the ways to lock without that registry are this command's flags
        raise RegistryUnreachable(exc.message, _unreachable_hint(exc.registry or "REGISTRY", lockdir),
                                  registry=exc.registry) from None
    if output != "text":
        emit({"locked": [{"lockfile": str(path), "name": lock_.metadata.name, "stackDigest": lock_.stack_digest,
                          "standIn": lock_.resolved.stand_in} for path, lock_ in written]}, output)
        return
    for path, lock_ in written:
        note = "  [stand-in pins: demo mirror]" if lock_.resolved.stand_in else ""
        click.echo(f"locked {path}  {lock_.stack_digest}{note}")
