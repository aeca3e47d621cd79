"""Published package files from a Python package index, as pip finds them, without pip.

`pip download` cannot fetch vLLM's sdist without building its metadata (torch, cmake), so the simple
repository page pip reads is read directly: PEP 691 JSON, else PEP 503 HTML (pypiserver, most mirrors),
or a directory of files (`--find-links DIR`, air-gapped sites). A file is checked against the sha256 the
index publishes. Which file: a pure-Python wheel when there is one (ai-dynamo, flashinfer-python; its
METADATA is the built one), else the sdist (vLLM's wheels are 330 MB of compiled code, its sdist 47 MB
of the same Python), else a manylinux x86_64 wheel. A release's Requires-Dist comes from its PEP 658
`.metadata` file when the index offers one, else from the file itself.
"""

from __future__ import annotations

import base64
import hashlib
import tempfile
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from stackpin.engines.package import normalize, requires_of
from stackpin.engines.pipconfig import DEFAULT_INDEX, Endpoint, endpoint, index_url, redact_text
from stackpin.engines.simple import MAX_PAGE, FileEntry, PageError, parse_directory, parse_html, parse_json, release_of
from stackpin.engines.watchdog import Sockets, Watchdog
from stackpin.errors import ResolveError, StackpinError, clip

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_INDEX", "JSON_INDEX", "IndexFile", "PackageIndex", "choose", "default_index", "fetch"]

JSON_INDEX = "application/vnd.pypi.simple.v1+json"
# pip's Accept: JSON first, HTML (PEP 503) from indexes that only serve that.
ACCEPT = f"{JSON_INDEX}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
MAX_DOWNLOAD = 2 << 30  # one package file; vLLM's largest wheels are ~400 MB
REQUEST_SECONDS = 30.0  # one request, from connecting to its last byte, however slowly they come
MIN_RATE = float(256 << 10)  # bytes/s: a download earns 4 s per MiB received (vLLM's 47 MB sdist: +188 s)


def default_index() -> str:
    """The index pip would read: $PIP_INDEX_URL, else pip's configuration files, else PyPI."""
    return index_url(None)


def read_capped(response: httpx.Response, limit: int, where: str) -> bytes:
    """A streamed response's body, refused (ResolveError naming `where`) past `limit` bytes, declared or sent:
    a server cannot make a reader hold more than it asked for."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ResolveError(f"{where}: {declared} bytes, more than the {limit} read")
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise ResolveError(f"{where}: more than the {limit} bytes read")
    return bytes(body)


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str


def _rank(filename: str) -> tuple[int, int]:
    if filename.endswith("-none-any.whl"):
        return 0, 0
    if filename.endswith((".tar.gz", ".zip")):
        return 1, 0
    return 2, 0 if "x86_64" in filename else 1


def _of_version(project: str, version: str, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in files if release_of(project, f.get("filename", "")) == version.lower() and not f.get("yanked")]


def choose(project: str, version: str, files: list[dict[str, Any]]) -> IndexFile:
    """The file of `project==version` stackpin reads, from an index page's file list."""
    matching = [f for f in _of_version(project, version, files) if f.get("hashes", {}).get("sha256")]
    if not matching:
        raise ResolveError(f"{project}=={version}: no wheel or sdist with a sha256 on the index")
    best = min(matching, key=lambda f: _rank(f["filename"]))
    return IndexFile(best["filename"], best["url"], best["hashes"]["sha256"])


class _HostAuth:
    """Basic credentials for the index's own origin only: a file served from elsewhere (a CDN) is fetched
    without them, as pip does."""

    def __init__(self, where: Endpoint) -> None:
        self.where = where

    def applies(self, url: httpx.URL) -> bool:
        return self.where.credentials is not None and _origin(url) == self.where.origin

    def header(self) -> str:
        assert self.where.credentials is not None
        user, password = self.where.credentials
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)


class _NotFound(Exception):
    pass


class PackageIndex:
    """One index (an http(s) URL) or one directory of package files, read as pip reads them. Pages are
    read once per instance; `close()` (or `with`) ends its connections. `timeout` bounds each request as a
    whole, from connecting to its last byte [default: REQUEST_SECONDS]; a download gets a second more per
    MIN_RATE bytes it has received. Not for use by two threads at once."""

    def __init__(self, url: str | None = None, *, find_links: Path | None = None,
                 timeout: float | None = None) -> None:
        self.directory = find_links
        self.where = None if find_links is not None else endpoint(index_url(url))
        self.timeout = REQUEST_SECONDS if timeout is None else timeout
        self._client: httpx.Client | None = None
        self._sockets = Sockets()
        self._pages: dict[str, list[FileEntry]] = {}
        if find_links is not None and not find_links.is_dir():
            raise StackpinError(f"--find-links {find_links}: not a directory")

    @property
    def shown(self) -> str:
        """The index as messages name it: the directory, or the URL without credentials."""
        return str(self.directory) if self.where is None else self.where.shown

    def __enter__(self) -> PackageIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _http(self) -> httpx.Client:
        import httpx  # only commands that read an index import it

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, follow_redirects=True)
        return self._client

    @contextmanager
    def _get(self, url: str, accept: str | None = None) -> Generator[tuple[httpx.Response, Watchdog], None, None]:
        """The streamed response to GET `url`, and the watchdog that ends it at its deadline (read it inside)."""
        import httpx

        request = self._http().build_request("GET", url, headers={"Accept": accept} if accept else None,
                                             extensions={"trace": self._sockets.trace})
        assert self.where is not None
        auth = _HostAuth(self.where)
        sent = auth.applies(request.url)
        if sent:
            request.headers["Authorization"] = auth.header()
        with Watchdog(self.timeout, self._sockets) as watchdog:
            try:
                response = self._http().send(request, stream=True)
            except httpx.HTTPError as exc:
                raise self._late(url, watchdog) if watchdog.fired else self._failed(url, exc) from None
            try:
                if response.status_code == 404:
                    raise _NotFound
                if response.status_code >= 400:
                    hint = None
                    if response.status_code in (401, 403):
                        hint = "it refused the credentials given" if sent else "give credentials in the URL or ~/.netrc"
                    raise ResolveError(f"{self._shown(url)}: HTTP {response.status_code}", hint)
                yield response, watchdog
            except httpx.HTTPError as exc:
                raise self._late(url, watchdog) if watchdog.fired else self._failed(url, exc) from None
            finally:
                response.close()
            if watchdog.fired:  # a body without a length, cut at the deadline, reads as a whole one
                raise self._late(url, watchdog)

    def _late(self, url: str, watchdog: Watchdog) -> ResolveError:
        return ResolveError(f"{self._shown(url)}: no complete answer within {watchdog.seconds:g}s (the whole "
                            "request)", "is the index overloaded? a mirror or --find-links DIR may serve")

    def _shown(self, url: str) -> str:
        return redact_text(clip(url, 200))

    def _failed(self, url: str, exc: Exception) -> ResolveError:
        words = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return ResolveError(f"{self._shown(url)}: {redact_text(clip(words, 200))}")

    def _read(self, url: str, limit: int, accept: str | None = None) -> tuple[bytes, str]:
        """The body of `url`, at most `limit` bytes, and its content type."""
        import httpx

        try:
            with self._get(url, accept) as (response, _):
                return read_capped(response, limit, self._shown(url)), response.headers.get("content-type", "")
        except httpx.HTTPError as exc:  # connecting, before the response
            raise self._failed(url, exc) from None

    def page_url(self, project: str) -> str:
        assert self.where is not None
        return f"{self.where.url.rstrip('/')}/{normalize(project)}/"

    def files(self, project: str) -> list[FileEntry]:
        """Every file of `project` on the index (none when the index does not have the project)."""
        key = normalize(project)
        if key not in self._pages:
            self._pages[key] = self._files(key)
        return self._pages[key]

    def _files(self, project: str) -> list[FileEntry]:
        if self.directory is not None:
            return parse_directory(self.directory, project)
        import httpx

        page = self.page_url(project)
        try:
            body, kind = self._read(page, MAX_PAGE, ACCEPT)
            if "json" in kind:
                files = parse_json(body)
            else:
                files = parse_html(body.decode("utf-8", errors="replace"))
        except _NotFound:
            return []
        except PageError as exc:
            raise ResolveError(f"{project}: {self._shown(page)} is not a simple repository page ({exc})") from None
        joined = []
        for entry in files:  # absolute URLs, against the page they were found on; a link httpx refuses is skipped
            try:
                joined.append({**entry, "url": str(httpx.URL(page).join(entry["url"]))})
            except httpx.InvalidURL:
                continue
        return joined

    def releases(self, project: str, pre: bool = False) -> list[Version]:
        """The versions of `project` with a file on the index that is not yanked, oldest first; final
        releases only unless `pre`."""
        found = set()
        for entry in self.files(project):
            text = release_of(project, entry["filename"])
            if text is None or entry.get("yanked"):
                continue
            try:
                version = Version(text)
            except InvalidVersion:
                continue
            if pre or not (version.is_prerelease or version.is_devrelease):
                found.add(version)
        return sorted(found)

    def download(self, project: str, version: str, directory: Path) -> Path:
        """`project==version`'s file into `directory` (kept: a second call checks its sha256 and reads it
        again) and its path."""
        chosen = choose(project, version, self.files(project))
        if self.directory is not None:
            return Path(self.directory) / chosen.filename  # a local file: hashed when read as a package
        target = directory / chosen.filename
        if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == chosen.sha256:
            return target
        directory.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        digest, size = hashlib.sha256(), 0
        try:
            with self._get(chosen.url) as (response, watchdog), partial.open("wb") as out:
                for chunk in response.iter_bytes():
                    watchdog.extend(len(chunk) / MIN_RATE)
                    size += len(chunk)
                    if size > MAX_DOWNLOAD:
                        raise ResolveError(f"{chosen.filename}: more than {MAX_DOWNLOAD} bytes")
                    digest.update(chunk)
                    out.write(chunk)
        except _NotFound:
            partial.unlink(missing_ok=True)
            raise ResolveError(f"{project}=={version}: {self._shown(chosen.url)}: HTTP 404") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if digest.hexdigest() != chosen.sha256:
            partial.unlink(missing_ok=True)
            raise ResolveError(f"{chosen.filename}: sha256 {digest.hexdigest()} is not the index's {chosen.sha256}")
        partial.replace(target)
        return target

    def requires(self, project: str, version: str, cache_dir: Path | None = None) -> tuple[str, ...]:
        """`project==version`'s Requires-Dist: from the PEP 658 metadata file the index offers, else from
        the package file (downloaded into `cache_dir`, else a temporary directory)."""
        for entry in sorted(_of_version(project, version, self.files(project)), key=lambda f: _rank(f["filename"])):
            if entry.get("core-metadata") and entry["filename"].endswith(".whl"):
                return self._core_metadata(entry)
        if cache_dir is not None:
            return requires_of(self.download(project, version, cache_dir))
        with tempfile.TemporaryDirectory(prefix="stackpin-index-") as tmp:
            return requires_of(self.download(project, version, Path(tmp)))

    def _core_metadata(self, entry: FileEntry) -> tuple[str, ...]:
        url = entry["url"] + ".metadata"
        try:
            body, _ = self._read(url, MAX_PAGE)
        except _NotFound:
            raise ResolveError(f"{self._shown(url)}: HTTP 404 (the index says it has this metadata)") from None
        expected = entry["core-metadata"].get("sha256") if isinstance(entry["core-metadata"], dict) else None
        if expected and hashlib.sha256(body).hexdigest() != expected.lower():
            raise ResolveError(f"{self._shown(url)}: sha256 is not the index's {expected}")
        metadata = HeaderParser().parsestr(body.decode("utf-8", errors="replace"))
        return tuple(sorted(metadata.get_all("Requires-Dist") or ()))


def fetch(project: str, version: str, index: str, directory: Path, timeout: float | None = None) -> Path:
    """Download `project==version` from the index at `index` into `directory` and return its path; `timeout` as
    PackageIndex's."""
    with PackageIndex(index, timeout=timeout) as source:
        return source.download(project, version, directory)

