"""Fetch a pinned cache image back, check every platform image and digest, and unpack it safely."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import Field

from stackpin.autotune.cache import (
    ARTIFACT_TYPE,
    CACHE_DIR_NAME,
    LAYER_TAR,
    LAYER_TAR_GZIP,
    LEGACY_LAYER_TAR,
    LEGACY_LAYER_TAR_GZIP,
    MAX_MEMBERS,
    MAX_UNPACKED_BYTES,
    TYPE_ANNOTATION,
    CacheInfo,
    FrozenModel,
    inspect_cache,
)
from stackpin.errors import IntegrityError, ResolveError, StackpinError

if TYPE_CHECKING:
    from stackpin.lock.oci.client import RegistryClient




# --- fetch ---------------------------------------------------------------------------------------


class Fetched(FrozenModel):
    """A fetched cache: the manifest digest it came from, where from, and what it holds."""

    digest: str
    source: str
    info: CacheInfo
    mountable: bool = Field(True, description=(
        "False for the earlier OCI artifact form, which Kubernetes image volumes cannot mount."))


LEGACY_FORM = (f"an OCI artifact (artifactType {ARTIFACT_TYPE}, empty config), the form stackpin wrote before "
               "caches became images: a Kubernetes image volume cannot mount it, so workers would retune; "
               "re-pack it with `stackpin autotune pack --push`")


def fetch_cache(
    ref: str,
    dest: str | os.PathLike[str],
    *,
    client: RegistryClient | None = None,
    layout: str | os.PathLike[str] | None = None,
) -> Fetched:
    """Pull the cache `ref` (from a registry via `client`, or from an OCI layout), check every
    digest, unpack it safely into `dest` (created; must be empty) and inspect the result.

    The image form: every platform image of the index must hold the same single standard layer, with
    an image config for that platform whose diff_ids name the uncompressed tar (what a runtime checks
    before it mounts). The earlier artifact form is read too and comes back with `mountable=False`."""
    from stackpin.lock.oci.media import INDEX_TYPES, annotations_of, parse_manifest
    from stackpin.lock.oci.reference import as_image_ref

    target = as_image_ref(ref)
    what = str(target)
    if layout is not None:
        from stackpin.lock.ocilayout import LayoutResolver

        resolver = LayoutResolver(layout)
        resolved = resolver.resolve(target)

        def load(digest: str) -> tuple[dict[str, Any], list[bytes]]:
            manifest = parse_manifest(resolver.read_blob(digest), f"manifest {digest}")
            layers = _layers(manifest, what)
            return manifest, [resolver.read_blob(_layer_digest(d, target), d.get("size")) for d in layers]

        def blob(desc: dict[str, Any]) -> bytes:
            return resolver.read_blob(_layer_digest(desc, target), desc.get("size"))
    elif client is not None:
        registry = client
        # Resolve first, then pull by digest: every manifest and blob is checked against the index.
        resolved = registry.resolve(target)

        def load(digest: str) -> tuple[dict[str, Any], list[bytes]]:
            return registry.pull_artifact(target.with_digest(digest))

        def blob(desc: dict[str, Any]) -> bytes:
            return registry.pull_blob(target, _layer_digest(desc, target))
    else:
        raise ValueError("fetch_cache needs a registry client or an OCI layout")

    loaded: dict[str, tuple[dict[str, Any], list[bytes]]] = {}
    if resolved.media_type in INDEX_TYPES:
        if resolved.annotations.get(TYPE_ANNOTATION) != ARTIFACT_TYPE:
            raise ResolveError(f"{target} is not an autotune cache (an image index without the {TYPE_ANNOTATION}: "
                               f"{ARTIFACT_TYPE} annotation)")
    else:
        manifest, blobs = loaded[resolved.digest] = load(resolved.digest)
        if manifest.get("artifactType") == ARTIFACT_TYPE:  # the earlier artifact form
            raw = _tar_bytes(_one_layer(manifest, blobs, (LEGACY_LAYER_TAR_GZIP, LEGACY_LAYER_TAR), what), what)
            _unpack_tar(raw, Path(dest), what)
            return Fetched(digest=resolved.digest, source=resolved.source, info=inspect_cache(dest), mountable=False)
        if manifest.get("artifactType") or annotations_of(manifest).get(TYPE_ANNOTATION) != ARTIFACT_TYPE:
            raise ResolveError(f"{target} is not an autotune cache (artifactType {manifest.get('artifactType')!r}, "
                               f"no {TYPE_ANNOTATION}: {ARTIFACT_TYPE} annotation)")
    if not resolved.platforms:
        raise ResolveError(f"{target}: no platform image (an autotune cache image lists linux/arm64 and linux/amd64)")
    layer_digest: str | None = None
    raw = b""
    for key, child in sorted(resolved.platforms.items()):
        where = f"{what} ({key} image {child[:19]})"
        manifest, blobs = loaded.get(child) or load(child)
        layer = _one_layer(manifest, blobs, (LAYER_TAR_GZIP, LAYER_TAR), where)
        if layer_digest is None:
            layer_digest, raw = _layer_digest(manifest["layers"][0], target), _tar_bytes(layer, what)
        elif _layer_digest(manifest["layers"][0], target) != layer_digest:
            raise ResolveError(f"{where}: holds another layer than the other platforms; every node must mount "
                               "the same cache")
        _check_config(manifest, blob, key, "sha256:" + hashlib.sha256(raw).hexdigest(), where)
    _unpack_tar(raw, Path(dest), what)
    return Fetched(digest=resolved.digest, source=resolved.source, info=inspect_cache(dest))


def _layers(manifest: dict[str, Any], what: str) -> list[dict[str, Any]]:
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not all(isinstance(d, dict) for d in layers):
        raise ResolveError(f"{what}: manifest layers are not a list of descriptors")
    return layers


def _one_layer(manifest: dict[str, Any], blobs: list[bytes], media_types: tuple[str, ...], what: str) -> bytes:
    from stackpin.lock.oci.media import OCI_MANIFEST

    if manifest.get("mediaType", OCI_MANIFEST) != OCI_MANIFEST:
        raise ResolveError(f"{what}: manifest media type {manifest.get('mediaType')!r}, expected {OCI_MANIFEST}")
    layers = _layers(manifest, what)
    if len(layers) != 1 or len(blobs) != 1 or layers[0].get("mediaType") not in media_types:
        raise ResolveError(f"{what}: expected one layer of type {media_types[0]}")
    if layers[0].get("size") is not None and layers[0]["size"] != len(blobs[0]):
        raise ResolveError(f"{what}: layer is {len(blobs[0])} bytes, its descriptor says {layers[0]['size']}")
    return blobs[0]


def _check_config(manifest: dict[str, Any], blob: Any, platform: str, diff_id: str, what: str) -> None:
    """The image config a runtime reads: this platform, and diff_ids naming the uncompressed layer
    (containerd refuses to mount a layer whose diff_id does not match)."""
    from stackpin.lock.oci.media import OCI_CONFIG, parse_manifest, platform_key

    desc = manifest.get("config")
    if not isinstance(desc, dict) or desc.get("mediaType") != OCI_CONFIG:
        raise ResolveError(f"{what}: config is not an image config ({OCI_CONFIG})")
    config = parse_manifest(blob(desc), f"{what}: config")
    got = platform_key(str(config.get("os")), str(config.get("architecture")), config.get("variant"))
    if got != platform:
        raise ResolveError(f"{what}: config says platform {got}, the index says {platform}")
    rootfs = config.get("rootfs")
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers" or rootfs.get("diff_ids") != [diff_id]:
        raise IntegrityError(f"{what}: config rootfs.diff_ids do not name the layer's uncompressed tar {diff_id}")


def _layer_digest(desc: dict[str, Any], target: Any) -> str:
    from stackpin.lock.oci.media import descriptor_digest

    return descriptor_digest(desc, f"layer of {target}")


def unpack_cache(blob: bytes, dest: Path, what: str = "autotune cache") -> None:
    """Extract a packed cache (tar or tar.gz) into `dest` (created if missing, must be empty). Only
    plain directories and files under `flashinfer_autotune_cache/` are accepted: absolute names, `..`,
    links, devices and duplicates are refused before anything is written."""
    _unpack_tar(_tar_bytes(blob, what), dest, what)


def _tar_bytes(blob: bytes, what: str) -> bytes:
    """The uncompressed tar of a layer; gunzipped at most MAX_UNPACKED_BYTES (+1) far, so that a
    small bomb cannot fill the memory."""
    if blob[:2] != b"\x1f\x8b":
        raw = blob
    else:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = inflater.decompress(blob, MAX_UNPACKED_BYTES + 1)
        except zlib.error as exc:
            raise _unsafe(what, f"not a gzip stream: {exc}") from None
        if len(raw) <= MAX_UNPACKED_BYTES and not inflater.eof:
            raise _unsafe(what, "not a gzip stream: truncated")
        if inflater.unused_data:
            raise _unsafe(what, "not a gzip stream: data after the end of the stream")
    if len(raw) > MAX_UNPACKED_BYTES:
        raise _unsafe(what, f"unpacks to more than the {MAX_UNPACKED_BYTES} bytes allowed")
    return raw


def _unpack_tar(raw: bytes, dest: Path, what: str) -> None:
    try:
        tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")
        members = tar.getmembers()
    except tarfile.TarError as exc:
        raise _unsafe(what, f"not a tar archive: {exc}") from None
    if len(members) > MAX_MEMBERS:
        raise _unsafe(what, f"{len(members)} entries, more than the {MAX_MEMBERS} allowed")
    seen: set[str] = set()
    plan: list[tuple[PurePosixPath, tarfile.TarInfo]] = []
    for m in members:
        name = m.name
        parts = PurePosixPath(name).parts
        if name.startswith("/") or "\\" in name or not parts or any(p in ("..", ".", "") for p in parts):
            raise _unsafe(what, f"unsafe entry name {name!r}")
        if parts[0] != CACHE_DIR_NAME:
            raise _unsafe(what, f"entry {name!r} is outside {CACHE_DIR_NAME}/")
        if not (m.isdir() or m.isreg()):
            raise _unsafe(what, f"entry {name!r} is a link or special file")
        rel = PurePosixPath(*parts)
        if str(rel) in seen:
            raise _unsafe(what, f"duplicate entry {name!r}")
        seen.add(str(rel))
        plan.append((rel, m))
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise StackpinError(f"{dest} is not empty; fetch into a new or empty directory")
    for rel, m in plan:
        target = dest.joinpath(*rel.parts)
        try:
            if m.isdir():
                target.mkdir(mode=0o755, parents=True, exist_ok=True)
                continue
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            src = tar.extractfile(m)
            assert src is not None  # regular file
            with open(target, "xb") as fh:  # 'x': never follow or overwrite something already there
                fh.write(src.read())
            os.chmod(target, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        except OSError as exc:  # e.g. a file and a directory of the same name
            raise _unsafe(what, f"cannot unpack {m.name!r}: {exc.strerror or exc}") from None


def _unsafe(what: str, message: str) -> IntegrityError:
    return IntegrityError(f"{what}: {message}")
