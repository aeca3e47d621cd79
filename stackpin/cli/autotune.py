"""`stackpin autotune`: inspect, verify and pack FlashInfer autotune caches (see stackpin.autotune).

Registered in stackpin/cli/main.py with `main.add_command(autotune)`. Heavy imports (httpx via stackpin.lock.oci.client)
stay inside the commands so `stackpin --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stackpin.cli.common import OUTPUT, emit, emit_objects, file_only, user_errors

if TYPE_CHECKING:
    from stackpin.autotune.cache import CacheInfo

LAYOUT = click.option("--oci-layout", "layout", metavar="DIR", type=click.Path(file_okay=False),
                      help="Read REF from this OCI layout directory instead of a registry.")


@click.group()
def autotune() -> None:
    """FlashInfer autotune caches as pinned, verified, mountable OCI images."""


def _is_ref(source: str, layout: str | None) -> bool:
    """A source is a reference when it is not a path here and names its registry explicitly (so a
    mistyped directory never turns into a Docker Hub lookup)."""
    from stackpin.errors import ResolveError
    from stackpin.lock.oci.reference import ImageRef

    if os.path.exists(source):
        return False
    try:
        ImageRef.parse(source)
    except ResolveError:
        return False
    first = source.split("/", 1)[0]
    explicit = "/" in source and ("." in first or ":" in first or first == "localhost")
    return layout is not None or explicit or "@" in source


def _load(source: str, layout: str | None, stack: ExitStack) -> tuple[CacheInfo, str | None, bool]:
    """(cache info, manifest digest or None, mountable) for a directory or a reference (fetched to a
    temp dir); mountable is False for a reference in the earlier artifact form."""
    from stackpin.autotune.cache import inspect_cache
    from stackpin.autotune.fetch import fetch_cache
    from stackpin.errors import StackpinError

    if not _is_ref(source, layout):
        if layout is not None:
            raise StackpinError(f"--oci-layout needs a reference (registry/repository:tag), got path {source!r}")
        return inspect_cache(source), None, True
    import tempfile  # only a command that unpacks a cache needs it

    dest = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stackpin-autotune-")))
    if layout is not None:
        fetched = fetch_cache(source, dest, layout=layout)
    else:
        from stackpin.lock.oci.client import RegistryClient

        client = stack.enter_context(RegistryClient())
        fetched = fetch_cache(source, dest, client=client)
    return fetched.info, fetched.digest, fetched.mountable


def _print_info(info: CacheInfo, digest: str | None, source: str) -> None:
    click.echo(f"cache: {source}" + (f"@{digest}" if digest and "@" not in source else ""))
    click.echo(f"flashinfer: {', '.join(info.flashinfer_versions)}  arch: {', '.join(info.arch_lists)}  "
               f"device: {', '.join(info.values('gpu')) or '(no metadata)'}")
    metas = {str(sorted((f.metadata or {}).items())): f.metadata for f in info.files}
    for meta in metas.values():
        if meta:
            click.echo("metadata: " + " ".join(f"{k}={v}" for k, v in meta.items()))
    for directory, files in info.directories().items():
        click.echo(f"{directory}/  ({len(files)} file{'s' if len(files) != 1 else ''})")
        for f in files:
            where = "shared" if f.rank is None else f"dp{f.dp} rank{f.rank}"
            gen = f"  generation {f.generation[:12]}" if f.generation else ""
            click.echo(f"  {f.name}  {where}  {f.entries} entries{gen}")


@autotune.command("inspect")
@click.argument("source", metavar="DIR|REF")
@LAYOUT
@OUTPUT
@user_errors
def inspect_cmd(source: str, layout: str | None, output: str) -> None:
    """Show what a captured cache (directory) or a pushed one (REF) holds, file by file."""
    from stackpin.autotune.fetch import LEGACY_FORM

    with ExitStack() as stack:
        info, digest, mountable = _load(source, layout, stack)
        if not mountable:
            click.echo(f"warning: {source} is {LEGACY_FORM}", err=True)
        if output == "text":
            _print_info(info, digest, source)
        else:
            data: dict[str, Any] = info.summary()
            data["digest"] = digest
            data["mountable"] = mountable
            if digest:
                data["root"] = source  # the temp dir it was unpacked to is gone when this returns
            emit(data, output)


@autotune.command()
@click.argument("source", metavar="DIR|REF")
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--runtime-metadata", "runtime_file", type=click.Path(dir_okay=False),
              help="JSON of FlashInfer's _collect_metadata() in the pinned runtime image (the capture Job writes "
                   "runtime-metadata-<pool>.json): every _metadata field is then checked as FlashInfer checks it.")
@LAYOUT
@OUTPUT
@user_errors
def verify(source: str, profile: str, runtime_file: str | None, layout: str | None, output: str) -> None:
    """Check a cache against PROFILE as FlashInfer and the pinned vLLM read it: FlashInfer version, GPU
    arch, every _metadata field against the runtime, _records, and one file per rank for every pool (and,
    for a REF, that it is an image workers can mount). Exit 0 when it fits, 1 listing each mismatch, 2 on
    unreadable input. What it could not check (runtime fields without --runtime-metadata) is listed too."""
    from stackpin.autotune.fetch import LEGACY_FORM
    from stackpin.autotune.verify import Mismatch, read_runtime_metadata, require_replayable, verify_cache
    from stackpin.catalog import load_catalog
    from stackpin.profile.loader import load_profile
    from stackpin.profile.topology import topology_of

    loaded = load_profile(profile)
    require_replayable(loaded.profile)  # before reading the cache: for an engine that reads none, say only that
    runtime = read_runtime_metadata(Path(runtime_file)) if runtime_file else None
    with ExitStack() as stack:
        info, digest, mountable = _load(source, layout, stack)
        found = verify_cache(info, loaded.profile, load_catalog(), runtime)
    if not mountable:
        found.append(Mismatch(field="format", message=f"{source} is {LEGACY_FORM}"))
    mismatches = [m for m in found if m.blocking]
    if output == "text":
        for m in mismatches:
            click.echo(f"mismatch: {m}")
        if not mismatches:
            pools = ", ".join(topology_of(loaded.profile, load_catalog()).by_role)
            click.echo(f"ok: {len(info.files)} files fit {loaded.profile.name} (pools: {pools})")
        for m in found:
            if not m.blocking:
                click.echo(f"unchecked: {m}")
    else:
        emit({"ok": not mismatches, "digest": digest, "profile": loaded.profile.name,
              "mismatches": [m.model_dump(mode="json") for m in mismatches],
              "unchecked": [m.model_dump(mode="json") for m in found if not m.blocking]}, output)
    if mismatches:
        sys.exit(1)


@autotune.command()
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--push", "push_ref", metavar="REF", help="Push to a registry as registry/repository:tag.")
@click.option("--out", "output_file", metavar="FILE.tar.gz", type=click.Path(dir_okay=False), callback=file_only,
              help="Write the packed cache to a file.")
@click.option("--oci-layout", "layout", metavar="DIR", type=click.Path(file_okay=False),
              help="Add the cache image to an OCI layout directory (with --tag).")
@click.option("--tag", metavar="REF", help="Full reference the layout entry is named by (registry/repo:tag).")
@OUTPUT
@user_errors
def pack(directory: str, push_ref: str | None, output_file: str | None, layout: str | None,
         tag: str | None, output: str) -> None:
    """Pack a captured cache reproducibly; push it, write it, or add it to an OCI layout. Pushed and
    layout caches are OCI images (an index over linux/arm64 and linux/amd64 images sharing one layer)
    that a Kubernetes image volume mounts. Prints the index digest to pin as spec.autotune.cache."""
    from stackpin.autotune.image import pack_cache, pinned, push_cache, write_cache_to_layout
    from stackpin.errors import StackpinError

    if (layout is None) != (tag is None):
        raise StackpinError("--oci-layout and --tag go together: --oci-layout DIR --tag registry/repo:tag")
    if not (push_ref or output_file or layout):
        raise StackpinError("nothing to do: give --push REF, --out FILE.tar.gz or --oci-layout DIR --tag REF")
    result: dict[str, Any] = {}
    lines: list[str] = []
    if output_file:
        import hashlib

        from stackpin.yamlio import write_output

        blob = pack_cache(directory)
        write_output(Path(output_file), blob)
        digest = f"sha256:{hashlib.sha256(blob).hexdigest()}"
        result["file"] = {"path": output_file, "digest": digest, "size": len(blob)}
        lines.append(f"wrote {output_file} ({digest}, {len(blob)} bytes)")
    if layout and tag:
        resolved = write_cache_to_layout(directory, layout, tag)
        result["layout"] = {"path": layout, "tag": tag, "digest": resolved.digest, "pin": pinned(resolved)}
        lines += [f"layout {layout}: {tag} -> {resolved.digest}", f"pin: {pinned(resolved)}"]
    if push_ref:
        from stackpin.lock.oci.client import RegistryClient

        with RegistryClient() as client:
            resolved = push_cache(directory, push_ref, client)
        result["pushed"] = {"ref": push_ref, "digest": resolved.digest, "pin": pinned(resolved)}
        lines += [f"pushed {push_ref} -> {resolved.digest}", f"pin: {pinned(resolved)}"]
    if output == "text":
        for line in lines:
            click.echo(line)
    else:
        emit(result, output)


@autotune.command("capture-job")
@click.argument("stack", metavar="PROFILE|LOCK")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where a profile's lock is looked up (it must be current).")
@click.option("--storage", default="20Gi", show_default=True, help="Size of the volume the cache is written to.")
@click.option("--out", "output_file", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write here instead of stdout (`-`: stdout).")
@OUTPUT
@user_errors
def capture_job(stack: str, lockdir: str, storage: str, output_file: str | None, output: str) -> None:
    """Render the Jobs that run STACK once on its rack with autotuning on and the cache on a volume.

    The Jobs run exactly the stack's engine flags (vLLM names the cache by a hash of them). When they
    finish, copy the volume's flashinfer_autotune_cache/ out, then `stackpin autotune verify` and
    `stackpin autotune pack --push` it and pin the digest in spec.autotune.cache.
    """
    from stackpin.render.capture import capture_objects
    from stackpin.render.output import load_inputs
    from stackpin.validate.manifests import validate_objects

    [lock], _ = load_inputs([stack], Path(lockdir))
    objects = capture_objects(lock, storage=storage)
    errors = validate_objects([(f"capture-job#{i}", obj) for i, obj in enumerate(objects, 1)])
    if errors:
        for error in errors:
            click.echo(f"error: {error}", err=True)
        sys.exit(1)
    emit_objects(objects, f"stackpin autotune capture-job for {lock.metadata.name} ({lock.stack_digest})", output,
                 output_file)
