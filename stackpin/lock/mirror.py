"""Library twin of `stackpin mirror`: copy every artifact locks pin (each image's index, every
platform's manifest, config and layers; the autotune cache) to an OCI image layout or a registry, for
a site that cannot reach the origin.

What is copied is byte for byte what the lock named, every blob checked against its digest on the
way, so `stackpin lock` against the copy (`--oci-layout DIR`, or `--mirror REGISTRY=DEST`) resolves
the same digests and writes the same stackDigest. A layout names each image by its full reference
(`org.opencontainers.image.ref.name`, as `LayoutWriter` does); a registry keeps each repository's
path under the destination's prefix (`apply_mirror`'s mapping). A run can stop anywhere: blobs and
manifests appear only whole (a layout's through a rename; a registry commits an upload only at its
digest), and a re-run skips what the destination already holds.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stackpin.errors import IntegrityError, ResolveError, StackpinError
from stackpin.jsonio import canonical_json
from stackpin.lock.localcopy import copy_verified, only_writer, part_of, present, publish, sweep_parts, write_whole
from stackpin.lock.oci.media import INDEX_TYPES, MANIFEST_TYPES, manifest_media_type, parse_manifest
from stackpin.lock.oci.reference import ImageRef, apply_mirror, check_digest

if TYPE_CHECKING:
    from stackpin.lock.hfmirror import MirroredModel
    from stackpin.lock.lockfile import StackLock
    from stackpin.lock.oci.client import RegistryClient
    from stackpin.lock.progress import Advance

REF_NAME = "org.opencontainers.image.ref.name"
MAX_MANIFEST = 4 << 20  # distribution's own limit on a manifest's size
MAX_INDEX_JSON = 64 << 20
MAX_DEPTH = 4  # an index of indexes of ... deeper than this is refused
# Layers a registry may not serve (Windows base layers): left where their `urls` say, as skopeo does.
FOREIGN = ("nondistributable", "foreign")


@dataclass(frozen=True)
class Pin:
    """One tree a lock pins: the image or artifact named `ref` (tagged, no digest) at `digest`."""

    ref: ImageRef
    digest: str
    used_by: tuple[str, ...]  # "gb300-tuned image runtime", "gb300-tuned autotune cache"


@dataclass(frozen=True)
class MirroredImage:
    reference: str
    digest: str
    to: str  # where it now lives: `oci-layout DIR` entry name, or the registry reference
    used_by: tuple[str, ...]
    blobs_copied: int
    blobs_present: int
    bytes_copied: int


@dataclass(frozen=True)
class MirrorReport:
    destination: str
    images: list[MirroredImage]
    models: list[MirroredModel]
    lock_flags: list[str]  # what `stackpin lock` needs to resolve from the copy

    def to_data(self) -> dict[str, Any]:
        return {"destination": self.destination, "lockFlags": self.lock_flags,
                "images": [{"reference": i.reference, "digest": i.digest, "to": i.to, "usedBy": list(i.used_by),
                            "blobsCopied": i.blobs_copied, "blobsPresent": i.blobs_present,
                            "bytesCopied": i.bytes_copied} for i in self.images],
                "models": [m.to_data() for m in self.models]}


# -- what locks pin --


def lock_pins(locks: Sequence[StackLock]) -> list[Pin]:
    """Every image and autotune cache the locks pin, once each, in a stable order. One name pinned to
    two digests (two revisions of a stack) cannot be one tag at the destination: refused."""
    found: dict[tuple[ImageRef, str], list[str]] = {}
    for lock in locks:
        name = lock.metadata.name
        pinned = [(f"{name} image {role}", image.reference, image.digest)
                  for role, image in sorted(lock.resolved.images.items())]
        cache = lock.resolved.autotune_cache
        if cache is not None:
            pinned.append((f"{name} autotune cache", cache.reference, cache.digest))
        for used_by, reference, digest in pinned:
            ref = ImageRef.parse(reference)
            check_digest(digest, f"lock {name}: {reference}")
            if ref.digest and ref.digest != digest:
                raise StackpinError(f"lock {name}: {reference} is pinned to {digest}, not the digest it names")
            found.setdefault((replace(ref, digest=None) if ref.tag else ref, digest), []).append(used_by)
    by_name: dict[str, tuple[str, str]] = {}
    for (ref, digest), used in found.items():
        if ref.tag and (other := by_name.get(str(ref))) and other[0] != digest:
            raise StackpinError(f"{ref} is pinned to {other[0]} by {other[1]} and to {digest} by {used[0]}: "
                                "one destination tag cannot hold both", "mirror those locks separately")
        by_name.setdefault(str(ref), (digest, used[0]))
    return [Pin(ref, digest, tuple(sorted(used))) for (ref, digest), used in sorted(
        found.items(), key=lambda item: (str(item[0][0]), item[0][1]))]


# -- sources: where the bytes come from --


class Source(Protocol):
    where: str

    def manifest(self, ref: ImageRef, digest: str) -> tuple[bytes, str | None]:
        """The manifest's bytes, checked against `digest`, and the media type the transport declared."""

    def blob_file(self, digest: str) -> Path | None:
        """A local file holding the blob (unchecked: the copy checks it), or None for a remote source."""

    def pull(self, ref: ImageRef, digest: str, size: int, dest: Path, on_bytes: Advance) -> None:
        """Write the blob to the file `dest`, checked against `digest` and `size`."""

    def origin(self, ref: ImageRef) -> ImageRef | None:
        """Where `ref` lives, when that is a registry (for a cross-repository mount)."""


class LayoutSource:
    """An OCI image layout directory (`--from-oci-layout`), read by digest."""

    def __init__(self, path: Path) -> None:
        from stackpin.lock.ocilayout import LayoutResolver

        self.path = path
        self.where = f"oci-layout {path}"
        self._layout = LayoutResolver(path)
        self._layout.entries()  # refuses a directory that is no layout, naming it

    def manifest(self, ref: ImageRef, digest: str) -> tuple[bytes, str | None]:  # noqa: ARG002 - the Protocol's signature
        blob = self.blob_file(digest)
        if blob.stat().st_size > MAX_MANIFEST:
            raise ResolveError(f"manifest {digest} in {self.where} is larger than {MAX_MANIFEST} bytes")
        return self._layout.read_blob(digest), None

    def blob_file(self, digest: str) -> Path:
        what = f"blob {digest} in {self.where}"
        path = self.path / "blobs" / "sha256" / check_digest(digest, what).removeprefix("sha256:")
        if not path.is_file():
            raise ResolveError(f"{what} is missing")
        return path

    def pull(self, ref: ImageRef, digest: str, size: int, dest: Path, on_bytes: Advance) -> None:  # noqa: ARG002 - the Protocol's signature
        copy_verified(self.blob_file(digest), dest, digest, size, f"blob {digest} in {self.where}", on_bytes)

    def origin(self, ref: ImageRef) -> ImageRef | None:  # noqa: ARG002 - the Protocol's signature
        return None


class RegistrySource:
    """The registries the locks name, or their mirrors (the profiles' spec.mirrors and --mirror)."""

    def __init__(self, client: RegistryClient, mirrors: Mapping[str, str]) -> None:
        self.client = client
        self.mirrors = dict(mirrors)
        self.where = "registries" + (f" (mirrors {', '.join(f'{k}={v}' for k, v in sorted(mirrors.items()))})"
                                     if mirrors else "")

    def manifest(self, ref: ImageRef, digest: str) -> tuple[bytes, str | None]:
        target = replace(apply_mirror(ref, self.mirrors), tag=None, digest=digest)
        _, data, media_type = self.client.pull_manifest(target)
        if len(data) > MAX_MANIFEST:
            raise ResolveError(f"manifest {target} is larger than {MAX_MANIFEST} bytes")
        return data, media_type

    def blob_file(self, digest: str) -> Path | None:  # noqa: ARG002 - the Protocol's signature
        return None

    def pull(self, ref: ImageRef, digest: str, size: int, dest: Path, on_bytes: Advance) -> None:
        self.client.pull_blob_to(apply_mirror(ref, self.mirrors), digest, size, dest, on_bytes)

    def origin(self, ref: ImageRef) -> ImageRef | None:
        return apply_mirror(ref, self.mirrors)


# -- the trees: every manifest and blob of one pin, read before anything is written --


@dataclass
class Tree:
    pin: Pin
    manifests: list[tuple[str, bytes, str]] = field(default_factory=list)  # (digest, bytes, media type), children first
    blobs: dict[str, int] = field(default_factory=dict)  # digest -> size, configs and layers

    @property
    def top(self) -> tuple[str, bytes, str]:
        return self.manifests[-1]


def read_tree(source: Source, pin: Pin) -> Tree:
    tree = Tree(pin)
    _walk(source, tree, pin.digest, None, None, 0)
    return tree


def _walk(source: Source, tree: Tree, digest: str, declared: str | None, size: int | None, depth: int) -> None:
    where = f"{tree.pin.ref} ({source.where})"
    if depth > MAX_DEPTH:
        raise ResolveError(f"{where}: indexes nested deeper than {MAX_DEPTH}")
    data, transport_type = source.manifest(tree.pin.ref, digest)
    if size is not None and size != len(data):
        raise IntegrityError(f"{where}: manifest {digest} is {len(data)} bytes, its descriptor says {size}")
    doc = parse_manifest(data, f"manifest {digest} of {where}")
    media_type = manifest_media_type(doc, declared or transport_type)
    if media_type not in MANIFEST_TYPES:
        raise ResolveError(f"{where}: manifest {digest} has unsupported media type {media_type}")
    if media_type in INDEX_TYPES:
        for child in doc.get("manifests") or []:
            _walk(source, tree, _digest(child, where), _str(child, "mediaType"), _size(child, where), depth + 1)
    else:
        for desc in [doc.get("config"), *(doc.get("layers") or [])]:
            blob = _digest(desc, where)
            if desc.get("urls") and any(word in str(desc.get("mediaType")) for word in FOREIGN):
                continue
            size_ = _size(desc, where)
            if size_ is None:
                raise ResolveError(f"{where}: descriptor of blob {blob} has no size")
            tree.blobs[blob] = size_
    if all(d != digest for d, _, _ in tree.manifests):
        tree.manifests.append((digest, data, media_type))


def _digest(desc: Any, where: str) -> str:
    digest = desc.get("digest") if isinstance(desc, dict) else None
    if not isinstance(digest, str):
        raise ResolveError(f"{where}: a descriptor without a digest")
    return check_digest(digest, where)


def _size(desc: dict[str, Any], where: str) -> int | None:
    size = desc.get("size")
    if size is None:
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ResolveError(f"{where}: descriptor {desc.get('digest')} has size {size!r}, not a count of bytes")
    return size


def _str(desc: dict[str, Any], key: str) -> str | None:
    value = desc.get(key)
    return value if isinstance(value, str) else None


# -- destinations --


@dataclass(frozen=True)
class Counts:
    copied: int = 0
    present: int = 0
    bytes: int = 0

    def add(self, copied: bool, size: int) -> Counts:
        return Counts(self.copied + copied, self.present + (not copied), self.bytes + (size if copied else 0))


class LayoutDestination:
    """An OCI image layout directory, created if missing. index.json names every top manifest by its
    full reference and is replaced (rename) once the tree's every blob and manifest is in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = f"oci-layout {path}"
        self.blobs = path / "blobs" / "sha256"

    def open(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise ResolveError(f"{self.path} is not a directory")
        if (self.path.is_dir() and any(self.path.iterdir()) and not (self.path / "oci-layout").is_file()):
            raise ResolveError(f"{self.path} is neither empty nor an OCI image layout (no oci-layout file)")
        self.blobs.mkdir(parents=True, exist_ok=True)
        if not (self.path / "oci-layout").is_file():
            write_whole(self.path / "oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"}))
        self._entries = self._read_index()
        sweep_parts(self.blobs)
        sweep_parts(self.path)

    def _read_index(self) -> list[dict[str, Any]]:
        import stackpin.jsonio as jsonio
        from stackpin.yamlio import read_regular

        index = self.path / "index.json"
        if not index.exists():
            return []
        try:
            doc = jsonio.loads(read_regular(index, MAX_INDEX_JSON))
        except OSError as exc:
            raise ResolveError(f"cannot read {index}: {exc.strerror}") from None
        except jsonio.NestingError as exc:
            raise ResolveError(f"{index}: {exc}") from None
        except ValueError:
            raise ResolveError(f"{index} is not valid JSON") from None
        manifests = doc.get("manifests") if isinstance(doc, dict) else None
        if not isinstance(manifests, list) or not all(isinstance(m, dict) for m in manifests):
            raise ResolveError(f"{index} has no list of manifest descriptors")
        return manifests

    def has(self, ref: ImageRef, digest: str, size: int) -> bool:  # noqa: ARG002 - the Protocol's signature
        return present(self._blob(digest), size)

    def put_blob(self, source: Source, ref: ImageRef, digest: str, size: int, on_bytes: Advance) -> None:
        source.pull(ref, digest, size, part_of(self._blob(digest)), on_bytes)
        publish(part_of(self._blob(digest)), self._blob(digest))

    def put_tree(self, tree: Tree) -> str:
        for digest, data, _ in tree.manifests:
            if not present(self._blob(digest), len(data)):
                write_whole(self._blob(digest), data)
        digest, data, media_type = tree.top
        ref = tree.pin.ref
        entry: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": len(data)}
        name = str(ref) if ref.tag else None
        if name:
            entry["annotations"] = {REF_NAME: name}
        self._entries = [e for e in self._entries if not _same_entry(e, name, digest)] + [entry]
        self._entries.sort(key=lambda e: ((e.get("annotations") or {}).get(REF_NAME, ""), str(e.get("digest"))))
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                 "manifests": self._entries}
        import json

        write_whole(self.path / "index.json", (json.dumps(index, sort_keys=True, indent=2) + "\n").encode())
        return f"{self.where} {name or digest}"

    def lock_flags(self, pins: Sequence[Pin]) -> list[str]:  # noqa: ARG002 - the Protocol's signature
        return [f"--oci-layout {self.path}"]

    def _blob(self, digest: str) -> Path:
        return self.blobs / digest.removeprefix("sha256:")


def _same_entry(entry: dict[str, Any], name: str | None, digest: str) -> bool:
    named = (entry.get("annotations") or {}).get(REF_NAME)
    return named == name if name else (named is None and entry.get("digest") == digest)


class RegistryDestination:
    """A registry, `host[:port][/prefix]`: each repository keeps its path under the prefix, so that
    `--mirror <origin registry>=<this>` finds it (reference.apply_mirror)."""

    def __init__(self, mirror: str, client: RegistryClient, scratch: Path) -> None:
        self.mirror = mirror.strip("/")
        self.client = client
        self.scratch = scratch  # a blob from a remote source passes through a file here
        self.where = f"registry {self.mirror}"

    def target(self, ref: ImageRef) -> ImageRef:
        return apply_mirror(ref, {ref.registry: self.mirror})

    def open(self) -> None:
        self.target(ImageRef.parse("stackpin.invalid/check:mirror"))  # refuses a malformed destination

    def has(self, ref: ImageRef, digest: str, size: int) -> bool:  # noqa: ARG002 - the Protocol's signature
        return self.client.has_blob(self.target(ref), digest)

    def put_blob(self, source: Source, ref: ImageRef, digest: str, size: int, on_bytes: Advance) -> None:
        target = self.target(ref)
        origin = source.origin(ref)
        if (origin is not None and origin.registry == target.registry and origin.repository != target.repository
                and self.client.mount_blob(target, digest, origin.repository)):
            on_bytes(size)
            return
        local = source.blob_file(digest)
        if local is not None:
            self.client.push_blob_from(target, digest, size, local, on_bytes)
            return
        spool = self.scratch / digest.removeprefix("sha256:")
        try:
            source.pull(ref, digest, size, spool, on_bytes)  # counted once: as it comes
            self.client.push_blob_from(target, digest, size, spool)
        finally:
            spool.unlink(missing_ok=True)

    def put_tree(self, tree: Tree) -> str:
        target = self.target(tree.pin.ref)
        for digest, data, media_type in tree.manifests[:-1]:
            self.client.push_manifest(replace(target, tag=None, digest=digest), data, media_type)
        digest, data, media_type = tree.top
        top = replace(target, digest=digest)
        self.client.push_manifest(top, data, media_type)
        return str(top)

    def lock_flags(self, pins: Sequence[Pin]) -> list[str]:
        return [f"--mirror {registry}={self.mirror}" for registry in sorted({p.ref.registry for p in pins})]


class Destination(Protocol):
    where: str

    def open(self) -> None: ...
    def has(self, ref: ImageRef, digest: str, size: int) -> bool: ...
    def put_blob(self, source: Source, ref: ImageRef, digest: str, size: int, on_bytes: Advance) -> None: ...
    def put_tree(self, tree: Tree) -> str: ...
    def lock_flags(self, pins: Sequence[Pin]) -> list[str]: ...


def parse_destination(text: str) -> tuple[str, str]:
    """("layout", DIR) or ("registry", host[:port][/prefix]) for `--to`: `oci:DIR`, a path (starting with
    `/`, `.` or `~`, or an existing directory) or a bare name without a dot is a layout; a first component
    with a `.` or `:`, or `localhost`, names a registry (as docker reads image references)."""
    if not text or text != text.strip():
        raise StackpinError(f"--to {text!r}: empty or surrounded by whitespace")
    if text.startswith("oci:"):
        if not text[4:]:
            raise StackpinError("--to oci: needs a directory (oci:DIR)")
        return "layout", text[4:]
    first = text.split("/", 1)[0]
    if text.startswith(("/", ".", "~")) or Path(text).is_dir() or not (
            "." in first or ":" in first or first == "localhost"):
        return "layout", os.path.expanduser(text)
    if "://" in text:
        raise StackpinError(f"--to {text!r}: a registry is host[:port][/prefix], without a scheme")
    return "registry", text


# -- the run --


def mirror_locks(locks: Sequence[StackLock], to: str, *, from_oci_layout: Path | None = None,
                 mirrors: Mapping[str, str] | None = None, docker_config: str | None = None,
                 hf_cache: Path | None = None, hf_to: Path | None = None,
                 timeout: float | None = None) -> MirrorReport:
    """Copy what `locks` pin to `to` (see parse_destination) from `from_oci_layout`, or else from their
    registries through `mirrors` (added to each profile's spec.mirrors), and their models' snapshots
    from the Hugging Face cache `hf_cache` to `hf_to`. Every manifest is read (and checked) before the
    first byte is written; then each tree's blobs, its manifests, and its name, in that order."""
    import time

    from stackpin.lock.oci.client import RegistryClient

    if (hf_cache is None) != (hf_to is None):
        raise StackpinError("--hf-cache and --hf-to go together: the cache to copy from and the directory to copy to")
    if hf_cache is not None and not hf_cache.is_dir():
        raise StackpinError(f"--hf-cache {hf_cache}: not a directory")
    kind, where = parse_destination(to)
    deadline_at = None if timeout is None else time.monotonic() + timeout
    pins = lock_pins(locks)
    merged: dict[str, str] = {}
    for lock in locks:
        merged.update(lock.stack_profile.spec.mirrors)
    merged.update(mirrors or {})
    with RegistryClient(docker_config=docker_config, deadline_at=deadline_at) as client, \
            tempfile.TemporaryDirectory(prefix="stackpin-mirror-") as scratch:
        source: Source = LayoutSource(from_oci_layout) if from_oci_layout else RegistrySource(client, merged)
        dest: Destination = (LayoutDestination(Path(where)) if kind == "layout"
                             else RegistryDestination(where, client, Path(scratch)))
        trees = [read_tree(source, pin) for pin in pins]  # everything read and checked before a byte is written
        if isinstance(dest, RegistryDestination):
            _refuse_clashes(trees, dest)
        with only_writer(Path(where), f"--to {to}") if kind == "layout" else contextlib.nullcontext():
            dest.open()
            images = _copy(trees, source, dest, deadline_at)
    flags = dest.lock_flags(pins)
    models: list[MirroredModel] = []
    if hf_cache is not None and hf_to is not None:
        from stackpin.lock.hfmirror import mirror_models

        models = mirror_models(locks, hf_cache, hf_to)
        flags.append(f"--hf-cache {hf_to}")
    return MirrorReport(destination=dest.where, images=images, models=models, lock_flags=flags)


def _copy(trees: Sequence[Tree], source: Source, dest: Destination, deadline_at: float | None) -> list[MirroredImage]:
    import time

    from stackpin.lock.deadline import DeadlineExceeded
    from stackpin.lock.progress import progress

    total = sum(size for tree in trees for size in tree.blobs.values())
    done: list[MirroredImage] = []
    with progress(f"mirroring to {dest.where}", total, transfer=True) as advance:
        for tree in trees:
            counts = Counts()
            for digest, size in tree.blobs.items():
                if deadline_at is not None and time.monotonic() > deadline_at:
                    raise DeadlineExceeded(f"mirroring to {dest.where}: --timeout passed before blob {digest} "
                                           f"of {tree.pin.ref}; run it again to go on")
                have = dest.has(tree.pin.ref, digest, size)
                if have:
                    advance(size)
                else:
                    dest.put_blob(source, tree.pin.ref, digest, size, advance)
                counts = counts.add(not have, size)
            to = dest.put_tree(tree)
            done.append(MirroredImage(reference=str(tree.pin.ref), digest=tree.pin.digest, to=to,
                                      used_by=tree.pin.used_by, blobs_copied=counts.copied,
                                      blobs_present=counts.present, bytes_copied=counts.bytes))
    return done


def _refuse_clashes(trees: Sequence[Tree], dest: RegistryDestination) -> None:
    """Two origin names sent to one destination tag (nvcr.io/a:1 and ghcr.io/a:1 under one prefix)."""
    seen: dict[str, Pin] = {}
    for tree in trees:
        pin = tree.pin
        target = str(replace(dest.target(pin.ref), digest=None))
        other = seen.setdefault(target, pin)
        if other.digest != pin.digest:
            raise StackpinError(f"{other.ref} and {pin.ref} would both be {target} in {dest.where}",
                                "mirror each registry's images to its own prefix")
