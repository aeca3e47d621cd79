"""Media types, digests, descriptors and manifests: what a registry or an OCI layout stores, read and
checked (shared by the client and stackpin.lock.ocilayout)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import stackpin.jsonio as jsonio
from stackpin.errors import IntegrityError, ResolveError
from stackpin.lock.oci.reference import ImageRef, check_digest

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
EMPTY_JSON = b"{}"

INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST})
IMAGE_CONFIG_TYPES = frozenset({OCI_CONFIG, DOCKER_CONFIG})
MANIFEST_ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))


@dataclass(frozen=True)
class Resolved:
    """What a reference resolved to, and where that answer came from."""

    ref: ImageRef
    digest: str
    media_type: str
    size: int
    platforms: dict[str, str]
    source: str
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def pinned_ref(self) -> ImageRef:
        return self.ref.with_digest(self.digest)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def verify_digest(data: bytes, digest: str, what: str) -> bytes:
    actual = sha256_digest(data)
    if actual != digest:
        raise IntegrityError(f"{what}: content has digest {actual}, expected {digest}")
    return data


def descriptor(data: bytes, media_type: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    desc: dict[str, Any] = {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data)}
    if annotations:
        desc["annotations"] = dict(annotations)
    return desc


def descriptor_digest(desc: Any, what: str) -> str:
    digest = desc.get("digest") if isinstance(desc, dict) else None
    if not isinstance(digest, str):
        raise ResolveError(f"{what}: descriptor without a digest")
    return check_digest(digest, what)


def artifact_manifest(
    layers: Sequence[dict[str, Any]], artifact_type: str, annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    """An OCI 1.1 artifact: an image manifest with `artifactType` and the empty `{}` config."""
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {**descriptor(EMPTY_JSON, OCI_EMPTY), "data": base64.b64encode(EMPTY_JSON).decode()},
        "layers": list(layers),
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    return manifest


def parse_manifest(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = jsonio.loads(data)
    except jsonio.NestingError as exc:
        raise ResolveError(f"{what}: {exc}") from None
    except ValueError:
        raise ResolveError(f"{what} is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ResolveError(f"{what} is not a JSON object")
    return doc


def manifest_media_type(manifest: dict[str, Any], declared: str | None) -> str:
    """`mediaType` is optional in OCI manifests; fall back to what the transport declared."""
    media_type = manifest.get("mediaType") or declared
    if not media_type:
        media_type = OCI_INDEX if "manifests" in manifest else OCI_MANIFEST
    return media_type.split(";")[0].strip()


def platform_key(os_name: str, arch: str, variant: str | None = None) -> str:
    return f"{os_name}/{arch}/{variant}" if variant else f"{os_name}/{arch}"


def platforms_of(
    manifest: dict[str, Any], digest: str, media_type: str, load_blob: Callable[[str], bytes]
) -> dict[str, str]:
    """`os/arch[/variant]` -> platform manifest digest. An index lists them; an image manifest's
    platform is in its config blob; an artifact (non-image config or `artifactType`) has none."""
    if media_type in INDEX_TYPES:
        platforms: dict[str, str] = {}
        for entry in manifest.get("manifests") or []:
            plat = entry.get("platform") if isinstance(entry, dict) else None
            # buildkit attestations are listed as unknown/unknown: not a runnable platform.
            if not isinstance(plat, dict) or plat.get("os") in (None, "unknown") or not plat.get("architecture"):
                continue
            key = platform_key(plat["os"], plat["architecture"], plat.get("variant"))
            platforms.setdefault(key, descriptor_digest(entry, f"index {digest}"))
        return platforms
    config = manifest.get("config")
    if (
        manifest.get("artifactType")
        or not isinstance(config, dict)
        or config.get("mediaType") not in IMAGE_CONFIG_TYPES
    ):
        return {}
    image_config = parse_manifest(load_blob(descriptor_digest(config, f"manifest {digest}")), f"config of {digest}")
    os_name, arch = image_config.get("os"), image_config.get("architecture")
    if not os_name or not arch:
        return {}
    return {platform_key(os_name, arch, image_config.get("variant")): digest}


def annotations_of(manifest: dict[str, Any]) -> dict[str, str]:
    annotations = manifest.get("annotations")
    return dict(annotations) if isinstance(annotations, dict) else {}
