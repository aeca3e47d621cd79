"""The OCI distribution client: digest resolution, blob and manifest push and pull over one shared
httpx client, with retries, deadlines and registry auth (stackpin.lock.oci.auth).

httpx is imported inside functions so that importing this module (e.g. for `stackpin --help`) stays cheap.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import stackpin.jsonio as jsonio
from stackpin.errors import IntegrityError, RegistryUnreachable, ResolveError
from stackpin.jsonio import canonical_json
from stackpin.lock.deadline import call_with_deadline, remaining
from stackpin.lock.oci.auth import authorization
from stackpin.lock.oci.credentials import Credential, RegistryCredentials, auth_files, default_docker_config
from stackpin.lock.oci.media import (
    EMPTY_JSON,
    INDEX_TYPES,
    MANIFEST_ACCEPT,
    MANIFEST_TYPES,
    OCI_MANIFEST,
    Resolved,
    annotations_of,
    artifact_manifest,
    descriptor,
    descriptor_digest,
    manifest_media_type,
    parse_manifest,
    platforms_of,
    sha256_digest,
    verify_digest,
)
from stackpin.lock.oci.reference import (
    DOCKER_HUB,
    DOCKER_HUB_API,
    ImageRef,
    apply_mirror,
    as_image_ref,
    check_digest,
    hostname,
    is_loopback,
    mirror_for,
)

if TYPE_CHECKING:
    import httpx

_T = TypeVar("_T")
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


def _error_codes(resp: httpx.Response) -> list[str]:
    """The `errors[].code` values of a distribution error body (absent for HEAD)."""
    try:
        errors = jsonio.loads(resp.content).get("errors") or []
        return [str(e.get("code")) for e in errors if isinstance(e, dict)]
    except (ValueError, AttributeError):
        return []


def _tries(attempts: int) -> str:
    return f" after {attempts} attempts" if attempts > 1 else ""


def _transport_reason(exc: BaseException) -> str:
    """What failed, in words: httpx keeps the socket's own error in its chain of causes."""
    import errno
    import socket
    import ssl

    words = {errno.ECONNREFUSED: "connection refused", errno.ENETUNREACH: "network unreachable",
             errno.EHOSTUNREACH: "host unreachable"}
    cause: BaseException | None = exc
    for _ in range(8):
        if cause is None:
            break
        if isinstance(cause, socket.gaierror):  # before OSError: its errno is the resolver's, not the kernel's
            temporary = " (temporary failure in name resolution)" if cause.errno == socket.EAI_AGAIN else ""
            return "name not resolved" + temporary
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake failed ({cause.reason or cause})"
        if isinstance(cause, OSError) and cause.errno in words:
            return words[cause.errno]
        cause = cause.__cause__ or cause.__context__
    text = str(exc)
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "name not resolved"
    return "connection refused" if "refused" in text.lower() else (text or type(exc).__name__)


class RegistryClient:
    """Talks the OCI distribution API over one shared (thread-safe) httpx client.

    Transport errors (refused, reset, timeout) and HTTP 429/5xx are retried `retries` times with
    exponential backoff starting at `backoff` seconds; other 4xx are final. Registries answering 401
    get the Bearer token flow (or Basic) with credentials found as docker, crane and skopeo find them
    (`stackpin.lock.oci.credentials`: `docker_config` alone when given, else $REGISTRY_AUTH_FILE, or
    podman's auth.json files then docker's config.json; inline `auth`, `identitytoken`, and `credHelpers`
    / `credsStore` helpers), looked up once per registry at its first 401; tokens are cached per
    (registry, scope). An unreachable registry raises `RegistryUnreachable` naming it and the reference.
    `plain_http` says which registries speak HTTP instead of HTTPS: a predicate or a set of `host` /
    `host:port`; by default only loopback hosts.
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
        self.credentials = RegistryCredentials(auth_files(docker_config), deadline_at=deadline_at)
        if plain_http is None:
            self._plain_http: Callable[[str], bool] = is_loopback
        elif callable(plain_http):
            self._plain_http = plain_http
        else:
            hosts = frozenset(plain_http)
            self._plain_http = lambda registry: registry in hosts or hostname(registry) in hosts
        self._http = httpx.Client(
            timeout=timeout,
            follow_redirects=True,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        self._lock = threading.Lock()
        self._auth: dict[tuple[str, str], str] = {}

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
                             headers={"Accept": MANIFEST_ACCEPT}, asked=mirror_of)
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

    def list_tags(self, target: ImageRef | str | tuple[str, str], *, page_size: int = 1000, max_pages: int = 100,
                  max_page_bytes: int = 4 << 20) -> list[str]:
        """Every tag of the repository, in the registry's order: `GET /v2/<name>/tags/list?n=`, following
        the `Link: <...>; rel="next"` pages (the distribution spec's pagination; a registry that ignores
        `n` answers in one page). Each page is bounded by `request_deadline` and `max_page_bytes` (the
        body is read whole before its size is checked), and the listing by `max_pages`."""
        import httpx

        ref = _repo_ref(target)
        url = self._url(ref.registry, f"/v2/{ref.repository}/tags/list?n={page_size}")
        tags: list[str] = []
        seen = {url}
        for _ in range(max_pages):
            resp = self._request("GET", ref, url, headers={"Accept": "application/json"})
            if resp.status_code == 404:
                raise ResolveError(f"repository {ref.repository} not found in registry {ref.registry}")
            if resp.status_code != 200:
                raise self._failure(resp, ref, f"list the tags of {ref.name}")
            if len(resp.content) > max_page_bytes:
                raise ResolveError(f"registry {ref.registry}: a tags page of {ref.repository} is "
                                   f"{len(resp.content)} bytes, more than the {max_page_bytes} read")
            try:
                page = jsonio.loads(resp.content).get("tags") or []
            except (ValueError, AttributeError):
                page = None
            if not isinstance(page, list) or not all(isinstance(t, str) for t in page):
                raise ResolveError(f"registry {ref.registry}: the tags of {ref.repository} are not a JSON "
                                   '{"tags": [...]} list')
            tags += page
            following = resp.links.get("next", {}).get("url")
            if not following:
                return tags
            url = str(httpx.URL(url).join(following))
            if url in seen or httpx.URL(url).host != httpx.URL(self._url(ref.registry, "/")).host:
                raise ResolveError(f"registry {ref.registry}: the tags of {ref.repository} link a page "
                                   "already read or on another host")
            seen.add(url)
        raise ResolveError(f"registry {ref.registry}: {ref.repository} has more than {max_pages} pages of tags")

    # -- HTTP plumbing --

    def _url(self, registry: str, path: str) -> str:
        host = DOCKER_HUB_API if registry == DOCKER_HUB else registry
        return f"{'http' if self._plain_http(registry) else 'https'}://{host}{path}"

    def _credentials(self, ref: ImageRef) -> Credential | None:
        return self.credentials.lookup(ref.registry, ref.repository)

    def _request(
        self,
        method: str,
        ref: ImageRef,
        path_or_url: str,
        *,
        push: bool = False,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        asked: ImageRef | None = None,
    ) -> httpx.Response:
        """One registry call with auth: a 401 triggers one challenge round, then the retry. An unreachable
        registry is reported with the reference (`asked`, when `ref` is its mirror's)."""
        try:
            return self._request_once(method, ref, path_or_url, push=push, headers=headers, content=content)
        except RegistryUnreachable as exc:
            subject = f"{asked} via mirror {ref.registry}" if asked else str(ref)
            raise RegistryUnreachable(f"{exc.message}; needed for {subject}", exc.hint,
                                      registry=(asked or ref).registry) from None

    def _request_once(self, method: str, ref: ImageRef, path_or_url: str, *, push: bool,
                      headers: dict[str, str] | None, content: bytes | None) -> httpx.Response:
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
        return authorization(ref, challenge, scope, self._credentials(ref), self._send,
                             lambda: self._unauthorized(ref))

    def _send(self, method: str, url: str, where: str, **kwargs: Any) -> httpx.Response:
        """Send with bounded retries of transport errors and 429/5xx; the last answer is returned."""
        import httpx

        def once(last: bool) -> httpx.Response:
            resp = call_with_deadline(lambda: self._http.request(method, url, **kwargs),
                                      remaining(self.request_deadline, self.deadline_at),
                                      f"{where}: {method} {httpx.URL(url).path}")
            if last or resp.status_code not in _RETRY_STATUS:
                return resp
            resp.close()
            raise _RetryableStatus(f"{where} answered HTTP {resp.status_code}")

        return self._retrying(once, where)

    def _check_stored(self, resp: httpx.Response, digest: str, what: str) -> None:
        stored = resp.headers.get("Docker-Content-Digest")
        if stored and stored.startswith("sha256:") and stored != digest:
            raise IntegrityError(f"{what}: registry stored {stored}, we sent {digest}")

    def _unauthorized(self, ref: ImageRef) -> ResolveError:
        creds = self._credentials(ref)
        hint = None
        if creds is None:
            hint = f"log in with `docker login {ref.registry}` or `skopeo login {ref.registry}`"
            if hostname(ref.registry) == "nvcr.io":
                hint += " (username $oauthtoken, password an NGC API key)"
        where = creds.source if creds else self.credentials.describe()
        return ResolveError(f"not authorized to access {ref.repository} on registry {ref.registry}: "
                            f"check credentials in {where}", hint)

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

    # -- streamed blob copy (stackpin mirror): layers are gigabytes, never held in memory --

    min_rate = float(1 << 20)  # bytes/s: a blob's transfer has request_deadline plus its size at this rate

    def pull_manifest(self, ref: ImageRef | str) -> tuple[str, bytes, str]:
        """(digest, bytes, media type) of the manifest `ref` names, checked against every digest claimed."""
        return self._get_manifest(as_image_ref(ref))

    def has_blob(self, target: ImageRef | str | tuple[str, str], digest: str) -> bool:
        """Whether the repository holds the blob (HEAD; a 404 is no)."""
        ref = _repo_ref(target)
        resp = self._request("HEAD", ref, f"/v2/{ref.repository}/blobs/{check_digest(digest, f'blob of {ref.name}')}")
        if resp.status_code in (200, 404):
            return resp.status_code == 200
        raise self._failure(resp, ref, f"look up blob {digest} in {ref.name}")

    def pull_blob_to(self, target: ImageRef | str | tuple[str, str], digest: str, size: int, dest: Path,
                     on_bytes: Callable[[int], None] | None = None) -> None:
        """Stream the blob into the file `dest` (created or truncated), checking its size and sha256 as the
        bytes come: a body longer than `size` is cut off, and a wrong one raises IntegrityError. The caller
        renames `dest` into place only when this returns. Each attempt has `blob_deadline(size)`;
        `on_bytes(n)` reports progress (negative when a failed attempt takes back what it counted)."""
        import hashlib

        ref = _repo_ref(target)
        path = f"/v2/{ref.repository}/blobs/{check_digest(digest, f'blob of {ref.name}')}"
        what = f"blob {digest} from {ref.name}"
        stop = threading.Event()  # set when the caller gave up: the abandoned attempt stops writing

        def attempt() -> None:
            counted = 0
            resp = self._open_stream("GET", ref, path)
            try:
                if resp.status_code == 404:
                    raise ResolveError(f"blob {digest} not found in registry {ref.registry} ({ref.repository})")
                if resp.status_code != 200:
                    resp.read()
                    error = self._failure(resp, ref, f"pull {ref.name}")
                    raise _RetryableStatus(str(error)) if resp.status_code in _RETRY_STATUS else error
                hasher = hashlib.sha256()
                with dest.open("wb") as out:
                    for chunk in resp.iter_bytes(BLOB_CHUNK):
                        if stop.is_set():
                            raise ResolveError(f"{what}: abandoned at its deadline")
                        counted += len(chunk)
                        if counted > size:
                            raise IntegrityError(f"{what}: more than the {size} bytes its descriptor says")
                        hasher.update(chunk)
                        out.write(chunk)
                        if on_bytes is not None:
                            on_bytes(len(chunk))
                    out.flush()
                    os.fsync(out.fileno())
                _check_blob(what, digest, size, counted, "sha256:" + hasher.hexdigest())
            except BaseException:
                if on_bytes is not None and counted:
                    on_bytes(-counted)
                raise
            finally:
                resp.close()

        try:
            self._retry_stream(lambda: call_with_deadline(
                attempt, remaining(self.blob_deadline(size), self.deadline_at), f"pull {what}"),
                f"registry {ref.registry}")
        finally:
            stop.set()

    def mount_blob(self, target: ImageRef | str | tuple[str, str], digest: str, from_repository: str) -> bool:
        """Whether the registry mounted blob `digest` of its repository `from_repository` into the target's
        (`POST .../blobs/uploads/?mount=&from=`, no bytes sent). A registry that will not (no such blob,
        no pull access there) opens an upload instead, which is cancelled: False."""
        import httpx

        ref = _repo_ref(target)
        uploads = f"/v2/{ref.repository}/blobs/uploads/"
        start = self._request("POST", ref, uploads + f"?mount={check_digest(digest, f'blob of {ref.name}')}"
                              f"&from={from_repository}", push=True)
        if start.status_code == 201:
            self._check_stored(start, digest, f"blob mounted into {ref.name}")
            return True
        if start.status_code == 202 and start.headers.get("Location"):
            self._cancel_upload(ref, httpx.URL(self._url(ref.registry, uploads)).join(start.headers["Location"]))
            return False
        raise self._failure(start, ref, f"push to {ref.name}")

    def push_blob_from(self, target: ImageRef | str | tuple[str, str], digest: str, size: int, source: Path,
                       on_bytes: Callable[[int], None] | None = None) -> bool:
        """Upload the file `source` as blob `digest` unless the repository has it; whether bytes were sent.
        The upload is chunked (POST, a PATCH per BLOB_CHUNK with its Content-Range, PUT ?digest=) and the
        file hashed as it is read: bytes that are not `digest` are never committed (the upload is
        cancelled), and the registry checks the digest again at the PUT."""
        import hashlib

        import httpx

        ref = _repo_ref(target)
        check_digest(digest, f"blob of {ref.name}")
        what = f"blob {digest} for {ref.name}"
        doing = f"push to {ref.name}"
        if self.has_blob(ref, digest):
            return False
        uploads = f"/v2/{ref.repository}/blobs/uploads/"
        start = self._request("POST", ref, uploads, push=True)
        location = start.headers.get("Location")
        if start.status_code != 202 or not location:
            raise self._failure(start, ref, doing)
        url = httpx.URL(self._url(ref.registry, uploads)).join(location)
        hasher, sent = hashlib.sha256(), 0
        with source.open("rb") as blob:
            while chunk := blob.read(min(BLOB_CHUNK, size + 1 - sent)):
                if sent + len(chunk) > size:
                    self._cancel_upload(ref, url)
                    raise IntegrityError(f"{what}: {source} holds more than the {size} bytes its descriptor says")
                hasher.update(chunk)
                patch = self._request("PATCH", ref, str(url), push=True, content=chunk, headers={
                    "Content-Type": "application/octet-stream", "Content-Range": f"{sent}-{sent + len(chunk) - 1}"})
                if patch.status_code != 202 or not patch.headers.get("Location"):
                    raise self._failure(patch, ref, doing)
                url = url.join(patch.headers["Location"])
                sent += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        try:
            _check_blob(f"{what} ({source})", digest, size, sent, "sha256:" + hasher.hexdigest())
        except IntegrityError:
            self._cancel_upload(ref, url)
            raise
        put = self._request("PUT", ref, str(url.copy_merge_params({"digest": digest})), push=True, content=b"",
                            headers={"Content-Type": "application/octet-stream"})
        if not put.is_success:
            raise self._failure(put, ref, doing)
        self._check_stored(put, digest, f"blob pushed to {ref.name}")
        return True

    def blob_deadline(self, size: int) -> float:
        """Seconds one attempt at a blob's transfer may take: `request_deadline` plus its size at `min_rate`."""
        return self.request_deadline + size / self.min_rate

    def _cancel_upload(self, ref: ImageRef, url: httpx.URL) -> None:
        """DELETE an upload session; the registry expires it anyway, so a failure here is not reported."""
        try:
            self._request("DELETE", ref, str(url), push=True).close()
        except ResolveError:
            pass

    def _open_stream(self, method: str, ref: ImageRef, path: str) -> httpx.Response:
        """A streamed response (the caller reads its body and closes it), with `_request`'s auth round."""
        scope = f"repository:{ref.repository}:pull"
        url = self._url(ref.registry, path)
        with self._lock:
            cached = self._auth.get((ref.registry, scope))
        headers = {"Authorization": cached} if cached else {}
        resp = self._http.send(self._http.build_request(method, url, headers=headers), stream=True)
        if resp.status_code != 401:
            return resp
        resp.close()
        fresh = self._authorize(ref, resp.headers.get("WWW-Authenticate", ""), scope)
        if not fresh or fresh == cached:
            return self._http.send(self._http.build_request(method, url, headers=headers), stream=True)
        with self._lock:
            self._auth[(ref.registry, scope)] = fresh
        return self._http.send(self._http.build_request(method, url, headers={"Authorization": fresh}), stream=True)

    def _retry_stream(self, fn: Callable[[], None], where: str) -> None:
        """`fn()`, again after a transport error or a 429/5xx answer (`_RetryableStatus`), as `_send` retries."""
        self._retrying(lambda _last: fn(), where)

    def _retrying(self, once: Callable[[bool], _T], where: str) -> _T:
        """`once(last)`, tried `retries` more times with exponential backoff after a transport error or a
        `_RetryableStatus`; other HTTP errors (too many redirects, say) are final. The one retry policy of the
        client's plain and streamed requests."""
        import httpx

        attempts = self.retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                return once(last)
            except httpx.TimeoutException:
                if last:
                    raise RegistryUnreachable(f"{where} did not answer within {self.timeout:g}s"
                                              f"{_tries(attempts)}") from None
            except httpx.TransportError as exc:
                if last:
                    raise RegistryUnreachable(f"cannot reach {where}: {_transport_reason(exc)}") from None
            except httpx.HTTPError as exc:  # e.g. too many redirects: retrying will not help
                raise ResolveError(f"{where}: {exc}") from None
            except _RetryableStatus:
                if last:
                    raise
            time.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

def _repo_ref(target: ImageRef | str | tuple[str, str]) -> ImageRef:
    """Blob calls only need (registry, repository); accept a ref or that pair."""
    if isinstance(target, tuple):
        registry, repository = target
        return ImageRef(registry, repository)
    return as_image_ref(target)


# -- streamed blob copy (stackpin mirror) --

BLOB_CHUNK = 8 << 20  # bytes read, hashed and sent at a time: what a blob copy holds in memory


class _RetryableStatus(ResolveError):
    """A 429/5xx answer to a streamed blob request: tried again, as `_send` retries one request."""


def _check_blob(what: str, digest: str, size: int, got: int, actual: str) -> None:
    if got != size:
        raise IntegrityError(f"{what}: {got} bytes, its descriptor says {size}")
    if actual != digest:
        raise IntegrityError(f"{what}: content has digest {actual}, expected {digest}")
