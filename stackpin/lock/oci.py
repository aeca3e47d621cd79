"""OCI distribution client: image references, mirrors, digest resolution, blob/manifest push and pull.

Every manifest and blob fetched is checked against the sha256 digest that names it; a mismatch is an
`IntegrityError`. Every other failure a user can hit (unknown tag, credentials, network) is a one-line
`ResolveError`; no httpx exception escapes.

httpx is imported inside functions so that importing this module (e.g. for `stackpin --help`) stays cheap.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackpin.errors import IntegrityError, ResolveError
from stackpin.lock.canonical import canonical_json
from stackpin.lock.deadline import call_with_deadline, remaining

if TYPE_CHECKING:
    import httpx

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

DOCKER_HUB = "docker.io"
# Docker Hub's API lives on a different host than the name users write.
DOCKER_HUB_API = "registry-1.docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

_DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


# --- references ------------------------------------------------------------------------------


def check_digest(digest: str, context: str) -> str:
    """`digest` if it is a well-formed sha256 digest (the only algorithm supported), else a ResolveError."""
    if not _DIGEST_RE.fullmatch(digest):
        raise ResolveError(f"invalid digest {digest!r} in {context}: expected 'sha256:' and 64 lowercase hex digits")
    return digest


def _normalize_registry(host: str) -> str:
    return DOCKER_HUB if host.lower() in _HUB_ALIASES else host


@dataclass(frozen=True)
class ImageRef:
    """A fully qualified image reference: `registry/repository[:tag][@digest]`."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Parse like docker does: `nginx` is `docker.io/library/nginx:latest`; the first path
        component is a registry only if it has a `.` or `:`, is `localhost`, or has upper case."""
        where = f"image reference {text!r}"
        if not text or text != text.strip():
            raise ResolveError(f"invalid {where}: empty or surrounded by whitespace")
        name, at, digest = text.partition("@")
        if at:
            check_digest(digest, where)
        tag = None
        # A ':' after the last '/' starts the tag; one before it belongs to host:port.
        colon = name.rfind(":")
        if colon > name.rfind("/"):
            name, tag = name[:colon], name[colon + 1 :]
            if not _TAG_RE.fullmatch(tag):
                raise ResolveError(
                    f"invalid {where}: tag {tag!r} must be 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'"
                )
        first, slash, rest = name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
            registry, repository = _normalize_registry(first), rest
        else:
            registry, repository = DOCKER_HUB, name
        if not _HOST_RE.fullmatch(registry):
            raise ResolveError(f"invalid {where}: registry {registry!r} is not host[:port]")
        if registry == DOCKER_HUB and "/" not in repository:
            repository = f"library/{repository}"
        for component in repository.split("/"):
            if not _COMPONENT_RE.fullmatch(component):
                raise ResolveError(
                    f"invalid {where}: repository component {component!r} must be lowercase "
                    "letters and digits separated by '.', '_', '__' or '-'"
                )
        if len(registry) + 1 + len(repository) > 255:
            raise ResolveError(f"invalid {where}: name longer than 255 characters")
        if tag is None and not at:
            tag = "latest"
        return cls(registry, repository, tag, digest if at else None)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    @property
    def name(self) -> str:
        """`registry/repository`, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What goes after `/manifests/` in the API: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    def with_digest(self, digest: str) -> ImageRef:
        return replace(self, digest=check_digest(digest, f"pin for {self}"))


def as_image_ref(ref: ImageRef | str) -> ImageRef:
    """Accept either form wherever a reference is expected."""
    return ref if isinstance(ref, ImageRef) else ImageRef.parse(ref)


def mirror_for(registry: str, mirrors: Mapping[str, str]) -> str | None:
    """The mirror configured for `registry` (keys like `index.docker.io` count as `docker.io`)."""
    for key, value in mirrors.items():
        if _normalize_registry(key) == registry:
            return value
    return None


def apply_mirror(ref: ImageRef, mirrors: Mapping[str, str]) -> ImageRef:
    """Where to fetch `ref` from: a mirror value `host[:port][/path/prefix]` replaces the registry
    and prefixes the repository. Refs of registries without a mirror come back unchanged."""
    mirror = mirror_for(ref.registry, mirrors)
    if mirror is None:
        return ref
    host, _, prefix = mirror.strip("/").partition("/")
    bad_prefix = prefix and not all(_COMPONENT_RE.fullmatch(c) for c in prefix.split("/"))
    if "://" in mirror or not _HOST_RE.fullmatch(host) or bad_prefix:
        raise ResolveError(
            f"invalid mirror {mirror!r} for {ref.registry}: expected host[:port][/path/prefix] without a scheme"
        )
    repository = f"{prefix}/{ref.repository}" if prefix else ref.repository
    return replace(ref, registry=host, repository=repository)


# --- manifests and digests (shared with ocilayout) ---------------------------------------------


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
        doc = json.loads(data)
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


# --- credentials --------------------------------------------------------------------------------


def default_docker_config() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def _auth_key(key: str) -> str:
    """`https://index.docker.io/v1/` and `docker.io` name the same registry in config.json."""
    host = key.split("://", 1)[-1].split("/", 1)[0]
    return _normalize_registry(host)


def load_docker_credentials(path: Path) -> dict[str, tuple[str, str]]:
    """registry -> (user, password) from `auths` in a docker config.json. Only inline credentials
    (`auth` = base64 "user:pass", or `username`/`password`) are read: credential helpers
    (`credsStore`, `credHelpers`) and `identitytoken` are not supported. A missing file means none."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ResolveError(f"cannot read docker config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ResolveError(f"docker config {path} is not valid JSON: {exc}") from None
    auths = doc.get("auths") if isinstance(doc, dict) else None
    creds: dict[str, tuple[str, str]] = {}
    for key, entry in (auths if isinstance(auths, dict) else {}).items():
        if not isinstance(entry, dict):
            continue
        user, password = entry.get("username"), entry.get("password")
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except ValueError:
                raise ResolveError(f"docker config {path}: auths.{key}.auth is not base64 of 'user:password'") from None
        if user and password is not None:
            creds[_auth_key(key)] = (user, password)
    return creds


def _hostname(registry: str) -> str:
    if registry.startswith("["):
        return registry[1 : registry.find("]")]
    return registry.rsplit(":", 1)[0]


def is_loopback(registry: str) -> bool:
    host = _hostname(registry)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


def _error_codes(resp: httpx.Response) -> list[str]:
    """The `errors[].code` values of a distribution error body (absent for HEAD)."""
    try:
        errors = resp.json().get("errors") or []
        return [str(e.get("code")) for e in errors if isinstance(e, dict)]
    except (ValueError, AttributeError):
        return []


def _tries(attempts: int) -> str:
    return f" after {attempts} attempts" if attempts > 1 else ""


def _transport_reason(exc: Exception) -> str:
    text = str(exc)
    return "connection refused" if "refused" in text.lower() else (text or type(exc).__name__)


# --- client -------------------------------------------------------------------------------------


class RegistryClient:
    """Talks the OCI distribution API over one shared (thread-safe) httpx client.

    Transport errors (refused, reset, timeout) and HTTP 429/5xx are retried `retries` times with
    exponential backoff starting at `backoff` seconds; other 4xx are final. Registries answering 401
    get the Bearer token flow (or Basic) with credentials from the docker config.json; tokens are
    cached per (registry, scope). Only inline config.json credentials are used: credential helpers
    (`credsStore`/`credHelpers`) are not supported. `plain_http` says which registries speak HTTP
    instead of HTTPS: a predicate or a set of `host` / `host:port`; by default only loopback hosts.
    """

    def __init__(
        self,
        timeout: float = 10.0,
        retries: int = 3,
        docker_config: str | os.PathLike[str] | None = None,
        plain_http: Callable[[str], bool] | Iterable[str] | None = None,
        backoff: float = 0.2,
        request_deadline: float = 60.0,
        deadline_at: float | None = None,
    ) -> None:
        import httpx

        self.timeout = timeout
        self.request_deadline = request_deadline  # one request, all its bytes, however slowly they come
        self.deadline_at = deadline_at  # time.monotonic() instant at which the whole run gives up
        self.retries = max(0, retries)
        self.backoff = backoff
        self.docker_config = Path(docker_config) if docker_config else default_docker_config()
        if plain_http is None:
            self._plain_http: Callable[[str], bool] = is_loopback
        elif callable(plain_http):
            self._plain_http = plain_http
        else:
            hosts = frozenset(plain_http)
            self._plain_http = lambda registry: registry in hosts or _hostname(registry) in hosts
        self._http = httpx.Client(
            timeout=timeout,
            follow_redirects=True,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        self._lock = threading.Lock()
        self._auth: dict[tuple[str, str], str] = {}
        self._creds: dict[str, tuple[str, str]] | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- resolution --

    def resolve(self, ref: ImageRef | str, mirrors: Mapping[str, str] | None = None) -> Resolved:
        """The digest, media type, platforms and annotations `ref` points to, via its mirror if any."""
        asked = as_image_ref(ref)
        mirror = mirror_for(asked.registry, mirrors or {})
        target = apply_mirror(asked, mirrors or {})
        digest, data, media_type = self._get_manifest(target, mirror_of=asked if mirror else None)
        manifest = parse_manifest(data, f"manifest of {target}")
        return Resolved(
            ref=asked,
            digest=digest,
            media_type=media_type,
            size=len(data),
            platforms=platforms_of(manifest, digest, media_type, lambda d: self.pull_blob(target, d)),
            source=f"mirror {mirror}" if mirror else f"registry {asked.registry}",
            annotations=annotations_of(manifest),
        )

    def resolve_many(
        self,
        refs: Iterable[ImageRef | str],
        mirrors: Mapping[str, str] | None = None,
        max_workers: int = 16,
        on_done: Callable[[], None] | None = None,
    ) -> list[Resolved]:
        """`resolve` for each ref concurrently, in the order given. On failure the pending ones
        are cancelled, running ones finish, and the first failing ref (in input order) raises.
        `on_done` is called once per resolved reference (from worker threads), for progress."""
        asked = [as_image_ref(r) for r in refs]
        unique = list(dict.fromkeys(asked))
        if not unique:
            return []

        def one(ref: ImageRef) -> Resolved:
            resolved = self.resolve(ref, mirrors)
            if on_done is not None:
                on_done()
            return resolved

        pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(unique))))
        try:
            futures = {r: pool.submit(one, r) for r in unique}
            wait(futures.values(), return_when=FIRST_EXCEPTION)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        for future in futures.values():
            error = None if future.cancelled() else future.exception()
            if error is not None:
                raise error
        return [futures[r].result() for r in asked]

    def _get_manifest(self, target: ImageRef, mirror_of: ImageRef | None = None) -> tuple[str, bytes, str]:
        """(digest, bytes, media type) of the manifest `target` names, checked against every
        digest claimed for it: the pinned one and the registry's `Docker-Content-Digest`.
        One GET, no HEAD first: a single answer cannot mix two states of a moving tag, and it
        halves the round trips of a lock."""
        repo = target.repository
        resp = self._request("GET", target, f"/v2/{repo}/manifests/{target.reference}",
                             headers={"Accept": MANIFEST_ACCEPT})
        if resp.status_code == 404:
            raise self._not_found(resp, target, mirror_of)
        if resp.status_code != 200:
            raise self._failure(resp, target, f"pull {target.name}")
        data = resp.content
        digest = sha256_digest(data)
        claims = (
            (target.digest, "the pinned digest"),
            (resp.headers.get("Docker-Content-Digest"), "the registry's Docker-Content-Digest"),
        )
        for claimed, what in claims:
            if claimed and claimed.startswith("sha256:") and claimed != digest:
                raise IntegrityError(
                    f"manifest {target} from registry {target.registry} has digest {digest}, not {what} {claimed}"
                )
        media_type = manifest_media_type(
            parse_manifest(data, f"manifest of {target}"), resp.headers.get("Content-Type")
        )
        if media_type not in MANIFEST_TYPES:
            raise ResolveError(f"{target}: unsupported manifest media type {media_type}")
        return digest, data, media_type

    # -- blobs, manifests, artifacts --

    def pull_blob(self, target: ImageRef | str | tuple[str, str], digest: str) -> bytes:
        """The blob's bytes, verified against `digest`."""
        ref = _repo_ref(target)
        check_digest(digest, f"blob of {ref.name}")
        resp = self._request("GET", ref, f"/v2/{ref.repository}/blobs/{digest}")
        if resp.status_code == 404:
            raise ResolveError(f"blob {digest} not found in registry {ref.registry} ({ref.repository})")
        if resp.status_code != 200:
            raise self._failure(resp, ref, f"pull {ref.name}")
        return verify_digest(resp.content, digest, f"blob {digest} from {ref.name}")

    def push_blob(self, target: ImageRef | str | tuple[str, str], data: bytes) -> str:
        """Upload `data` (monolithic POST + PUT) unless the registry has it; returns its digest."""
        import httpx

        ref = _repo_ref(target)
        digest = sha256_digest(data)
        blobs = f"/v2/{ref.repository}/blobs/"
        doing = f"push to {ref.name}"
        head = self._request("HEAD", ref, blobs + digest, push=True)
        if head.status_code == 200:
            return digest
        start = self._request("POST", ref, blobs + "uploads/", push=True)
        location = start.headers.get("Location")
        if start.status_code != 202 or not location:
            raise self._failure(start, ref, doing)
        upload = httpx.URL(self._url(ref.registry, blobs)).join(location)
        put = self._request(
            "PUT",
            ref,
            str(upload.copy_merge_params({"digest": digest})),
            push=True,
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        if not put.is_success:
            raise self._failure(put, ref, doing)
        self._check_stored(put, digest, f"blob pushed to {ref.name}")
        return digest

    def push_manifest(self, ref: ImageRef | str, manifest: bytes, media_type: str) -> str:
        """PUT `manifest` under the ref's tag (or its digest when untagged); returns its digest."""
        target = as_image_ref(ref)
        digest = sha256_digest(manifest)
        if target.digest and target.digest != digest:
            raise IntegrityError(f"manifest for {target} has digest {digest}")
        resp = self._request(
            "PUT",
            target,
            f"/v2/{target.repository}/manifests/{target.tag or digest}",
            push=True,
            content=manifest,
            headers={"Content-Type": media_type},
        )
        if not resp.is_success:
            raise self._failure(resp, target, f"push manifest {target}")
        self._check_stored(resp, digest, f"manifest pushed to {target}")
        return digest

    def push_artifact(
        self,
        ref: ImageRef | str,
        layers: Sequence[tuple[bytes, str, Mapping[str, str] | None]],
        artifact_type: str,
        annotations: Mapping[str, str] | None = None,
    ) -> Resolved:
        """Push an OCI 1.1 artifact: `layers` are (bytes, media type, annotations)."""
        target = as_image_ref(ref)
        self.push_blob(target, EMPTY_JSON)
        descs = []
        for data, media_type, layer_annotations in layers:
            self.push_blob(target, data)
            descs.append(descriptor(data, media_type, layer_annotations))
        manifest = canonical_json(artifact_manifest(descs, artifact_type, annotations))
        digest = self.push_manifest(target, manifest, OCI_MANIFEST)
        return Resolved(
            ref=target,
            digest=digest,
            media_type=OCI_MANIFEST,
            size=len(manifest),
            platforms={},
            source=f"registry {target.registry}",
            annotations=dict(annotations or {}),
        )

    def pull_artifact(self, ref: ImageRef | str) -> tuple[dict[str, Any], list[bytes]]:
        """The artifact's manifest and its layers' bytes, every one verified."""
        target = as_image_ref(ref)
        _, data, media_type = self._get_manifest(target)
        if media_type in INDEX_TYPES:
            raise ResolveError(f"{target} is an image index, not an artifact")
        manifest = parse_manifest(data, f"manifest of {target}")
        layers = manifest.get("layers") or []
        blobs = [self.pull_blob(target, descriptor_digest(d, f"layer of {target}")) for d in layers]
        return manifest, blobs

    # -- HTTP plumbing --

    def _url(self, registry: str, path: str) -> str:
        host = DOCKER_HUB_API if registry == DOCKER_HUB else registry
        return f"{'http' if self._plain_http(registry) else 'https'}://{host}{path}"

    def _credentials(self, registry: str) -> tuple[str, str] | None:
        with self._lock:
            if self._creds is None:
                self._creds = load_docker_credentials(self.docker_config)
            return self._creds.get(registry)

    def _request(
        self,
        method: str,
        ref: ImageRef,
        path_or_url: str,
        *,
        push: bool = False,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        """One registry call with auth: a 401 triggers one challenge round, then the retry."""
        scope = f"repository:{ref.repository}:{'pull,push' if push else 'pull'}"
        key = (ref.registry, scope)
        url = path_or_url if "://" in path_or_url else self._url(ref.registry, path_or_url)
        headers = dict(headers or {})
        with self._lock:
            cached = self._auth.get(key)
        if cached:
            headers["Authorization"] = cached
        where = f"registry {ref.registry}"
        resp = self._send(method, url, where, headers=headers, content=content)
        if resp.status_code == 401:
            fresh = self._authorize(ref, resp.headers.get("WWW-Authenticate", ""), scope)
            if fresh and fresh != cached:
                with self._lock:
                    self._auth[key] = fresh
                headers["Authorization"] = fresh
                resp = self._send(method, url, where, headers=headers, content=content)
        return resp

    def _authorize(self, ref: ImageRef, challenge: str, scope: str) -> str | None:
        """The Authorization header value answering a 401 challenge, or None if we have nothing."""
        import httpx

        scheme, params = _parse_challenge(challenge)
        creds = self._credentials(ref.registry)
        if scheme == "basic":
            if not creds:
                return None
            return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        if scheme != "bearer":
            return None
        realm = params.get("realm")
        if not realm or "://" not in realm:
            raise ResolveError(f"registry {ref.registry} sent a Bearer challenge without a realm URL")
        query = [("scope", s) for s in (params.get("scope") or scope).split()]
        if "service" in params:
            query.append(("service", params["service"]))
        try:
            realm_host = httpx.URL(realm).netloc.decode()
        except httpx.InvalidURL:
            raise ResolveError(f"registry {ref.registry} sent an invalid token realm {realm!r}") from None
        resp = self._send("GET", realm, f"token service {realm_host}", params=query, auth=creds or None)
        if resp.status_code in (401, 403):
            raise self._unauthorized(ref)
        if resp.status_code != 200:
            raise ResolveError(
                f"token service {realm_host} for registry {ref.registry} answered HTTP {resp.status_code}"
            )
        try:
            body = resp.json()
            token = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise ResolveError(f"token service {realm_host} answered without a token")
        return f"Bearer {token}"

    def _send(self, method: str, url: str, where: str, **kwargs: Any) -> httpx.Response:
        """Send with bounded retries of transport errors and 429/5xx; the last answer is returned."""
        import httpx

        attempts = self.retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                resp = call_with_deadline(lambda: self._http.request(method, url, **kwargs),
                                          remaining(self.request_deadline, self.deadline_at),
                                          f"{where}: {method} {httpx.URL(url).path}")
            except httpx.TimeoutException:
                if last:
                    raise ResolveError(f"{where} did not answer within {self.timeout:g}s{_tries(attempts)}") from None
            except httpx.TransportError as exc:
                if last:
                    raise ResolveError(f"cannot reach {where}: {_transport_reason(exc)}") from None
            except httpx.HTTPError as exc:  # e.g. too many redirects: retrying will not help
                raise ResolveError(f"{where}: {exc}") from None
            else:
                if last or resp.status_code not in _RETRY_STATUS:
                    return resp
                resp.close()
            time.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _check_stored(self, resp: httpx.Response, digest: str, what: str) -> None:
        stored = resp.headers.get("Docker-Content-Digest")
        if stored and stored.startswith("sha256:") and stored != digest:
            raise IntegrityError(f"{what}: registry stored {stored}, we sent {digest}")

    def _unauthorized(self, ref: ImageRef) -> ResolveError:
        return ResolveError(
            f"not authorized to access {ref.repository} on registry {ref.registry}: "
            f"check credentials in {self.docker_config}"
        )

    def _failure(self, resp: httpx.Response, ref: ImageRef, doing: str) -> ResolveError:
        status = resp.status_code
        if status in (401, 403):
            return self._unauthorized(ref)
        if status in _RETRY_STATUS:
            return ResolveError(f"registry {ref.registry} answered HTTP {status} to {doing}{_tries(self.retries + 1)}")
        codes = ", ".join(_error_codes(resp))
        return ResolveError(
            f"registry {ref.registry} refused to {doing}: HTTP {status}" + (f" {codes}" if codes else "")
        )

    def _not_found(self, resp: httpx.Response, target: ImageRef, mirror_of: ImageRef | None) -> ResolveError:
        what = f"digest {target.digest}" if target.digest else f"tag {target.tag}"
        detail = f"repository {target.repository}"
        if "NAME_UNKNOWN" in _error_codes(resp):
            detail += " does not exist"
        if mirror_of:
            detail += f", mirror of {mirror_of.registry}"
        return ResolveError(f"{what} not found in registry {target.registry} ({detail})")


def _repo_ref(target: ImageRef | str | tuple[str, str]) -> ImageRef:
    """Blob calls only need (registry, repository); accept a ref or that pair."""
    if isinstance(target, tuple):
        registry, repository = target
        return ImageRef(registry, repository)
    return as_image_ref(target)
