"""`stackpin mirror`: copy everything lockfiles pin to an OCI layout or a registry (an air-gapped site's copy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from stackpin.cli.common import OUTPUT, emit, finite, user_errors
from stackpin.cli.lock import DOCKER_CONFIG, _parse_mirrors

if TYPE_CHECKING:
    from stackpin.lock.lockfile import StackLock


@click.command()
@click.argument("lockfiles", nargs=-1, required=True, metavar="LOCK|DIR...")
@click.option("--to", "to", required=True, metavar="DEST",
              help="oci:DIR (or a path) for an OCI image layout; REGISTRY[/prefix] for a registry, where each "
                   "repository keeps its path under the prefix.")
@click.option("--from-oci-layout", type=click.Path(file_okay=False), metavar="DIR",
              help="Read the artifacts from this OCI image layout instead of their registries.")
@click.option("--mirror", "mirrors", multiple=True, metavar="REGISTRY=MIRROR",
              help="Read REGISTRY's artifacts through MIRROR (host[:port][/prefix]); adds to spec.mirrors.")
@click.option("--hf-cache", type=click.Path(file_okay=False), metavar="DIR",
              help="Also copy each locked model revision's snapshot from this Hugging Face cache (with --hf-to).")
@click.option("--hf-to", type=click.Path(file_okay=False), metavar="DIR",
              help="The Hugging Face cache directory the snapshots are copied to.")
@DOCKER_CONFIG
@click.option("--timeout", type=finite(min=0, min_open=True), metavar="SECONDS",
              help="Give up after this long in all (each blob has its own bound anyway: a minute plus its size "
                   "at 1 MiB/s).")
@OUTPUT
@user_errors
def mirror(lockfiles: tuple[str, ...], to: str, from_oci_layout: str | None, mirrors: tuple[str, ...],
           hf_cache: str | None, hf_to: str | None, docker_config: str | None, timeout: float | None,
           output: str) -> None:
    """Copy every image, autotune cache and (with --hf-cache) model snapshot LOCKs pin to DEST.

    Every blob is checked against its digest; what DEST already holds is skipped, so an interrupted run
    is finished by running it again. `stackpin lock` against DEST then writes the same stackDigest.
    """
    from pathlib import Path

    from stackpin.errors import RegistryUnreachable
    from stackpin.lock.mirror import mirror_locks

    try:
        report = mirror_locks(read_locks(lockfiles), to, from_oci_layout=Path(from_oci_layout) if from_oci_layout
                              else None, mirrors=_parse_mirrors(mirrors), docker_config=docker_config,
                              hf_cache=Path(hf_cache) if hf_cache else None, hf_to=Path(hf_to) if hf_to else None,
                              timeout=timeout)
    except RegistryUnreachable as exc:  # the ways around an unreachable origin are this command's own flags
        hint = ("the destination (--to) must be reachable from here; else mirror to an OCI layout (--to oci:DIR), "
                "carry it across and mirror from it there (--from-oci-layout DIR)" if exc.registry == to.split("/")[0]
                else "read the origin through a mirror this machine reaches (--mirror REGISTRY=HOST[:PORT][/PREFIX]) "
                "or from a copied OCI layout (--from-oci-layout DIR)")
        raise RegistryUnreachable(exc.message, f"{hint}; behind a proxy, set HTTPS_PROXY",
                                  registry=exc.registry) from None
    if output != "text":
        emit(report.to_data(), output)
        return
    click.echo(f"mirrored {len(report.images)} image(s) to {report.destination}")
    for image in report.images:
        click.echo(f"  {image.reference}  {image.digest[:19]}  {image.blobs_copied} blob(s) copied "
                   f"({_size(image.bytes_copied)}), {image.blobs_present} already there")
    for model in report.models:
        files = "a stand-in revision: no files" if model.stand_in and not model.files else (
            f"{model.files} file(s), {model.blobs_copied} blob(s) copied, {model.blobs_present} already there")
        click.echo(f"mirrored model {model.id}@{model.revision} to hf-cache {model.to} ({files})")
    click.echo(f"lock against it: stackpin lock PROFILE... {' '.join(report.lock_flags)}")


def read_locks(args: tuple[str, ...]) -> list[StackLock]:
    """Each LOCK, or every *.lock.yaml of a DIR."""
    from pathlib import Path

    from stackpin.errors import StackpinError
    from stackpin.lock.lockfile import read_lock

    paths: list[Path] = []
    for arg in args:
        path = Path(arg)
        found = sorted(path.glob("*.lock.yaml")) if path.is_dir() else [path]
        if not found:
            raise StackpinError(f"{arg}: no *.lock.yaml in this directory")
        paths += found
    return [read_lock(path) for path in paths]


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    scaled, units = count / 1024, ["KiB", "MiB", "GiB"]
    while scaled >= 1024 and len(units) > 1:
        scaled, units = scaled / 1024, units[1:]
    return f"{scaled:.1f} {units[0]}"
