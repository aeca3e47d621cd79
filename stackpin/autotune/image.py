"""Pack a cache into a deterministic tar and a mountable OCI image; push it to a registry or an OCI layout."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import Field

from stackpin.autotune.cache import (
    ANNOTATION_PREFIX,
    ARTIFACT_TYPE,
    CACHE_DIR_NAME,
    IMAGE_PLATFORMS,
    LAYER_TAR_GZIP,
    TITLE,
    TITLE_ANNOTATION,
    TYPE_ANNOTATION,
    CacheFile,
    CacheInfo,
    FrozenModel,
    bad_input,
    inspect_cache,
)

if TYPE_CHECKING:
    from stackpin.lock.oci.client import RegistryClient
    from stackpin.lock.oci.media import Resolved
    from stackpin.lock.ocilayout import LayoutWriter




# --- pack ----------------------------------------------------------------------------------------


def pack_cache(path: str | os.PathLike[str], compress: bool = True) -> bytes:
    """A reproducible tar (gzip by default) of the cache, rooted at `flashinfer_autotune_cache/` so
    that unpacking it into `$VLLM_CACHE_ROOT` is all a worker needs. Sorted entries, mtime 0,
    uid/gid 0, empty owner names, modes 0755/0644, USTAR (no pax timestamps): the same files give
    the same bytes whenever and wherever they were copied."""
    info = inspect_cache(path)  # never pack what we could not read
    return pack_info(info, compress)


def pack_info(info: CacheInfo, compress: bool = True) -> bytes:
    root = Path(info.root)
    dirs: set[str] = set()
    for file in info.files:
        parents = PurePosixPath(file.path).parents
        dirs.update(str(p) for p in parents if str(p) != ".")
    entries: list[tuple[str, CacheFile | None]] = sorted(
        [(d, None) for d in dirs] + [(f.path, f) for f in info.files], key=lambda e: e[0])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        top = tarfile.TarInfo(CACHE_DIR_NAME)
        _normalize(top, tarfile.DIRTYPE, 0o755)
        tar.addfile(top)
        for rel, f in entries:
            member = tarfile.TarInfo(f"{CACHE_DIR_NAME}/{rel}")
            if f is None:
                _normalize(member, tarfile.DIRTYPE, 0o755)
                tar.addfile(member)
                continue
            data = (root / rel).read_bytes()
            if hashlib.sha256(data).hexdigest() != f.sha256:
                raise bad_input(root / rel, "changed while being packed")
            _normalize(member, tarfile.REGTYPE, 0o644)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    raw = buf.getvalue()
    # gzip header: mtime 0 and no file name, so the bytes depend on the content only.
    return gzip.compress(raw, compresslevel=9, mtime=0) if compress else raw


def _normalize(member: tarfile.TarInfo, kind: bytes, mode: int) -> None:
    member.type, member.mode, member.mtime = kind, mode, 0
    member.uid = member.gid = 0
    member.uname = member.gname = ""


# --- push / layout ---------------------------------------------------------------------------------


def cache_annotations(info: CacheInfo) -> dict[str, str]:
    from stackpin.jsonio import canonical_json

    return {
        f"{ANNOTATION_PREFIX}flashinfer": ",".join(info.flashinfer_versions),
        f"{ANNOTATION_PREFIX}device": ",".join(info.values("gpu")) or "unknown",
        f"{ANNOTATION_PREFIX}arch": ",".join(info.arch_lists),
        f"{ANNOTATION_PREFIX}ranks": info.ranks_summary(),
        # Every file's sha256: a lock records it, and each worker's attestation checks the mounted files.
        f"{ANNOTATION_PREFIX}files": canonical_json({f.path: f.sha256 for f in info.files}).decode("utf-8"),
        TITLE_ANNOTATION: TITLE,
    }


class CacheImage(FrozenModel):
    """A packed cache as a minimal OCI image: what `push_cache` and `write_cache_to_layout` store.

    `blobs` are (bytes, media type): the layer, then one config per platform; `manifests` the
    platform image manifests, in `IMAGE_PLATFORMS` order; `index` the image index over them. Store
    them in that order (registries refuse a manifest whose blobs or children are missing)."""

    blobs: tuple[tuple[bytes, str], ...]
    manifests: tuple[bytes, ...]
    index: bytes
    annotations: dict[str, str]
    platforms: dict[str, str] = Field(description="os/arch -> platform manifest digest.")

    @property
    def digest(self) -> str:
        from stackpin.lock.oci.media import sha256_digest

        return sha256_digest(self.index)


def cache_image(info: CacheInfo, annotations: Mapping[str, str] | None = None) -> CacheImage:
    """The image form of a cache; `annotations` are added to the index's (stand-in notes, say).
    Deterministic: no timestamps anywhere, canonical JSON, so the same files give the same digests."""
    from stackpin.jsonio import canonical_json
    from stackpin.lock.oci.media import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, descriptor, platform_key

    raw = pack_info(info, compress=False)
    layer_bytes = gzip.compress(raw, compresslevel=9, mtime=0)  # == pack_info(info): same bytes, one tar pass
    layer = descriptor(layer_bytes, LAYER_TAR_GZIP, {TITLE_ANNOTATION: TITLE})
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    blobs: list[tuple[bytes, str]] = [(layer_bytes, LAYER_TAR_GZIP)]
    manifests: list[bytes] = []
    entries: list[dict[str, Any]] = []
    platforms: dict[str, str] = {}
    for os_name, arch in IMAGE_PLATFORMS:
        config = canonical_json({"architecture": arch, "os": os_name, "config": {},
                                 "rootfs": {"type": "layers", "diff_ids": [diff_id]}})
        blobs.append((config, OCI_CONFIG))
        manifest = canonical_json({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": descriptor(config, OCI_CONFIG),
            "layers": [layer],
            "annotations": {TYPE_ANNOTATION: ARTIFACT_TYPE},
        })
        manifests.append(manifest)
        entry = descriptor(manifest, OCI_MANIFEST)
        entries.append({**entry, "platform": {"architecture": arch, "os": os_name}})
        platforms[platform_key(os_name, arch)] = entry["digest"]
    index_annotations = {**cache_annotations(info), TYPE_ANNOTATION: ARTIFACT_TYPE, **(annotations or {})}
    index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries,
                            "annotations": index_annotations})
    return CacheImage(blobs=tuple(blobs), manifests=tuple(manifests), index=index,
                      annotations=index_annotations, platforms=platforms)


def push_cache(path: str | os.PathLike[str], ref: str, client: RegistryClient) -> Resolved:
    """Pack and push the cache as an OCI image (see `cache_image`); the returned index digest is
    what a profile pins."""
    from dataclasses import replace

    from stackpin.lock.oci.media import OCI_INDEX, OCI_MANIFEST, Resolved, sha256_digest
    from stackpin.lock.oci.reference import as_image_ref

    target = as_image_ref(ref)
    image = cache_image(inspect_cache(path))
    for data, _ in image.blobs:
        client.push_blob(target, data)
    untagged = replace(target, tag=None)
    for manifest in image.manifests:  # children before the index that names them
        client.push_manifest(untagged.with_digest(sha256_digest(manifest)), manifest, OCI_MANIFEST)
    digest = client.push_manifest(target, image.index, OCI_INDEX)
    return Resolved(ref=target, digest=digest, media_type=OCI_INDEX, size=len(image.index),
                    platforms=dict(image.platforms), source=f"registry {target.registry}",
                    annotations=dict(image.annotations))


def add_cache_to_layout(writer: LayoutWriter, ref: str, info: CacheInfo,
                        annotations: Mapping[str, str] | None = None) -> Resolved:
    """Store the image form of `info` in an OCI layout under the full reference `ref`."""
    from stackpin.lock.oci.media import OCI_INDEX, OCI_MANIFEST

    image = cache_image(info, annotations)
    tagged = writer._tagged(ref)  # LayoutWriter has no public "tag this index" yet
    for data, media_type in image.blobs:
        writer.add_blob(data, media_type)
    for manifest in image.manifests:
        writer.add_blob(manifest, OCI_MANIFEST)
    return writer._tag(tagged, image.index, OCI_INDEX)


def write_cache_to_layout(path: str | os.PathLike[str], layout: str | os.PathLike[str], ref: str) -> Resolved:
    """Pack the cache into an OCI layout directory under the full reference `ref` (no registry)."""
    from stackpin.lock.ocilayout import LayoutWriter

    return add_cache_to_layout(LayoutWriter(layout), ref, inspect_cache(path))


def pinned(resolved: Resolved) -> str:
    """`registry/repo@sha256:...`: the form `spec.autotune.cache` pins."""
    ref = resolved.ref
    return f"{ref.name}@{resolved.digest}"


