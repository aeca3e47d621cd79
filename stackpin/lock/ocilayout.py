"""OCI image layout directories (`oci-layout`, `index.json`, `blobs/sha256/<hex>`).

`LayoutResolver` answers the same `Resolved` as a registry, verifying every blob it reads.
An index.json entry matches a reference when its `org.opencontainers.image.ref.name` annotation is
either the bare tag (`1.6.1`, as skopeo/oras write) or the full reference. `LayoutWriter` writes the
full canonical reference (`nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1`), so one layout can hold the
images of several repositories, and writes deterministically: same inputs, same digests.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import stackpin.jsonio as jsonio
from stackpin.errors import IntegrityError, ResolveError
from stackpin.jsonio import canonical_json
from stackpin.lock.oci.client import RegistryClient
from stackpin.lock.oci.media import (
    EMPTY_JSON,
    INDEX_TYPES,
    OCI_CONFIG,
    OCI_EMPTY,
    OCI_INDEX,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    Resolved,
    annotations_of,
    artifact_manifest,
    descriptor,
    descriptor_digest,
    manifest_media_type,
    parse_manifest,
    platform_key,
    platforms_of,
    verify_digest,
)
from stackpin.lock.oci.reference import ImageRef, apply_mirror, as_image_ref, check_digest

REF_NAME = "org.opencontainers.image.ref.name"
LAYOUT_VERSION = {"imageLayoutVersion": "1.0.0"}

Platform = tuple[str, str] | tuple[str, str, str] | str


def _ref_name_matches(name: str, ref: ImageRef) -> bool:
    if name == ref.tag:
        return True
    try:
        named = ImageRef.parse(name)
    except ResolveError:
        return False
    return named.name == ref.name and named.tag == ref.tag


MAX_INDEX_BYTES = 64 << 20  # an index.json of descriptors: a mirror of thousands of images is a few MB


class LayoutResolver:
    """Resolve references against an OCI image layout directory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.source = f"oci-layout {os.fspath(path)}"

    def resolve(self, ref: ImageRef | str) -> Resolved:
        """A pinned ref is looked up by digest; otherwise by the index.json ref-name annotation."""
        asked = as_image_ref(ref)
        desc: dict[str, Any] = {"digest": asked.digest} if asked.digest else self._find(asked)
        digest = descriptor_digest(desc, f"{self.source} entry for {asked}")
        data = self.read_blob(digest, desc.get("size"))
        manifest = parse_manifest(data, f"manifest {digest} in {self.source}")
        media_type = manifest_media_type(manifest, desc.get("mediaType"))
        return Resolved(
            ref=asked,
            digest=digest,
            media_type=media_type,
            size=len(data),
            platforms=platforms_of(manifest, digest, media_type, self.read_blob),
            source=self.source,
            annotations=annotations_of(manifest),
        )

    def entries(self) -> list[dict[str, Any]]:
        """The descriptors listed in index.json."""
        if not (self.path / "oci-layout").is_file():
            raise ResolveError(f"{self.path} is not an OCI image layout (no oci-layout file)")
        from stackpin.yamlio import read_regular

        try:
            index = jsonio.loads(read_regular(self.path / "index.json", MAX_INDEX_BYTES))
        except FileNotFoundError:
            raise ResolveError(f"{self.source} has no index.json") from None
        except OSError as exc:
            raise ResolveError(f"{self.source}: cannot read index.json: {exc.strerror}") from None
        except jsonio.NestingError as exc:
            raise ResolveError(f"{self.source}: index.json: {exc}") from None
        except ValueError:
            raise ResolveError(f"{self.source}: index.json is not valid JSON") from None
        manifests = index.get("manifests") if isinstance(index, dict) else None
        return [m for m in manifests or [] if isinstance(m, dict)]

    def read_blob(self, digest: str, size: int | None = None) -> bytes:
        """The blob's bytes, verified against its digest (and size, when a descriptor gives one)."""
        what = f"blob {digest} in {self.source}"
        check_digest(digest, what)
        try:
            data = (self.path / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
        except FileNotFoundError:
            raise ResolveError(f"{what} is missing") from None
        except OSError as exc:
            raise ResolveError(f"cannot read {what}: {exc.strerror}") from None
        if size is not None and size != len(data):
            raise IntegrityError(f"{what}: {len(data)} bytes, descriptor says {size}")
        return verify_digest(data, digest, what)

    def _find(self, ref: ImageRef) -> dict[str, Any]:
        names = [(m, (m.get("annotations") or {}).get(REF_NAME)) for m in self.entries()]
        found = [m for m, name in names if isinstance(name, str) and _ref_name_matches(name, ref)]
        if not found:
            raise ResolveError(
                f"tag {ref.tag} not found in {self.source} (no index.json entry named {ref.tag!r} or {str(ref)!r})"
            )
        if len({m.get("digest") for m in found}) > 1:
            raise ResolveError(f"{ref} is ambiguous in {self.source}: several entries match")
        return found[0]


def _platform(spec: Platform) -> tuple[str, str, str | None]:
    parts = tuple(spec.split("/")) if isinstance(spec, str) else tuple(spec)
    if len(parts) not in (2, 3) or not all(parts):
        raise ResolveError(f"invalid platform {spec!r}: expected os/arch[/variant]")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def _standin_layer(ref: ImageRef, os_name: str, arch: str, variant: str | None) -> bytes:
    """A one-file tar naming the image and platform; fixed metadata keeps the digest stable."""
    body = f"stackpin stand-in layer for {ref} {platform_key(os_name, arch, variant)}\n".encode()
    info = tarfile.TarInfo("stackpin-standin.txt")
    info.size, info.mtime, info.mode = len(body), 0, 0o644
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


class LayoutWriter:
    """Add blobs, stand-in images and artifacts to a layout (created if missing). index.json is
    rewritten, sorted, after every addition; an existing entry with the same name is replaced."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.source = f"oci-layout {os.fspath(path)}"
        (self.path / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        if not (self.path / "oci-layout").exists():
            (self.path / "oci-layout").write_bytes(canonical_json(LAYOUT_VERSION))
        index = self.path / "index.json"
        self._entries = LayoutResolver(self.path).entries() if index.exists() else []

    def add_blob(self, data: bytes, media_type: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Store `data` and return its descriptor."""
        desc = descriptor(data, media_type, annotations)
        blob = self.path / "blobs" / "sha256" / desc["digest"].removeprefix("sha256:")
        if not blob.exists():
            tmp = blob.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(blob)
        return desc

    def add_image(
        self,
        ref_name: ImageRef | str,
        platforms: Sequence[Platform],
        annotations: Mapping[str, str] | None = None,
    ) -> Resolved:
        """A stand-in image (config + one tiny layer per platform); an index if several platforms."""
        ref = self._tagged(ref_name)
        specs = [_platform(p) for p in platforms]
        if not specs or len(set(specs)) != len(specs):
            raise ResolveError(f"{ref}: platforms must be given, each once: {list(platforms)}")
        children = []
        for os_name, arch, variant in specs:
            layer = self.add_blob(_standin_layer(ref, os_name, arch, variant), OCI_LAYER_TAR)
            config: dict[str, Any] = {
                "architecture": arch,
                "os": os_name,
                "config": {},
                "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
            }
            if variant:
                config["variant"] = variant
            manifest: dict[str, Any] = {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": self.add_blob(canonical_json(config), OCI_CONFIG),
                "layers": [layer],
            }
            plat = {k: v for k, v in config.items() if k in ("architecture", "os", "variant")}
            children.append((manifest, plat))
        if len(children) == 1:
            top, media_type = children[0][0], OCI_MANIFEST
            if annotations:
                top["annotations"] = dict(annotations)
        else:
            entries = [{**self.add_blob(canonical_json(m), OCI_MANIFEST), "platform": plat} for m, plat in children]
            top, media_type = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, OCI_INDEX
            if annotations:
                top["annotations"] = dict(annotations)
        return self._tag(ref, canonical_json(top), media_type)

    def add_artifact(
        self,
        ref_name: ImageRef | str,
        layers: Sequence[tuple[bytes, str, Mapping[str, str] | None]],
        artifact_type: str,
        annotations: Mapping[str, str] | None = None,
    ) -> Resolved:
        """An OCI 1.1 artifact; `layers` are (bytes, media type, annotations)."""
        ref = self._tagged(ref_name)
        self.add_blob(EMPTY_JSON, OCI_EMPTY)
        descs = [self.add_blob(data, media_type, ann) for data, media_type, ann in layers]
        manifest = canonical_json(artifact_manifest(descs, artifact_type, annotations))
        return self._tag(ref, manifest, OCI_MANIFEST)

    def _tagged(self, ref_name: ImageRef | str) -> ImageRef:
        ref = as_image_ref(ref_name)
        if ref.digest or not ref.tag:
            raise ResolveError(f"{ref}: a layout entry needs a tag and no digest")
        return ref

    def _tag(self, ref: ImageRef, manifest: bytes, media_type: str) -> Resolved:
        desc = self.add_blob(manifest, media_type, {REF_NAME: str(ref)})
        self._entries = [e for e in self._entries if (e.get("annotations") or {}).get(REF_NAME) != str(ref)]
        self._entries.append(desc)
        self._entries.sort(key=lambda e: ((e.get("annotations") or {}).get(REF_NAME, ""), e.get("digest", "")))
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": self._entries}
        (self.path / "index.json").write_text(json.dumps(index, sort_keys=True, indent=2) + "\n")
        return LayoutResolver(self.path).resolve(ref)


def push_layout_to_registry(
    layout_path: str | os.PathLike[str], client: RegistryClient, mirrors: Mapping[str, str]
) -> list[Resolved]:
    """Copy every named image/artifact of a layout to where `mirrors` send its reference, so that
    `client.resolve(ref, mirrors)` finds it (fills a loopback mirror for demos and tests).
    Entries must be named by full reference, and every registry needs a mirror."""
    layout = LayoutResolver(layout_path)
    pushed = []
    for entry in layout.entries():
        name = (entry.get("annotations") or {}).get(REF_NAME)
        if not isinstance(name, str):
            continue
        ref = ImageRef.parse(name)
        target = apply_mirror(ref, mirrors)
        if target == ref:
            raise ResolveError(f"no mirror configured for registry {ref.registry} (entry {name})")
        _push_tree(layout, client, target, entry)
        pushed.append(client.resolve(ref, mirrors))
    return pushed


def _push_tree(layout: LayoutResolver, client: RegistryClient, target: ImageRef, desc: dict[str, Any]) -> None:
    """Push a manifest after everything it references: registries refuse dangling references."""
    digest = descriptor_digest(desc, f"{layout.source} entry for {target}")
    data = layout.read_blob(digest, desc.get("size"))
    manifest = parse_manifest(data, f"manifest {digest} in {layout.source}")
    media_type = manifest_media_type(manifest, desc.get("mediaType"))
    if media_type in INDEX_TYPES:
        for child in manifest.get("manifests") or []:
            _push_tree(layout, client, replace(target, tag=None), child)
    else:
        for blob in [manifest.get("config"), *(manifest.get("layers") or [])]:
            blob_digest = descriptor_digest(blob, f"manifest {digest} in {layout.source}")
            client.push_blob(target, layout.read_blob(blob_digest))
    client.push_manifest(target if target.tag else target.with_digest(digest), data, media_type)
