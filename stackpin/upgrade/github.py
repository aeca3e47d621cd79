"""A repository's releases from the GitHub REST API (`GET /repos/{owner}/{repo}/releases`), the JSON
github.com and GitHub Enterprise Server (`https://HOST/api/v3`) both serve: a list of objects with
`tag_name`, `draft`, `prerelease`, `published_at` and `html_url`, 100 a page at most (`per_page`), the
next page named by the `Link: <...>; rel="next"` header. A token (`$GITHUB_TOKEN`) is sent as
`Authorization: Bearer`, only to the API's own origin.

Every page is bounded in bytes and in wall time for the whole request (stackpin.lock.deadline: a per-read
timeout never fires against a server that sends a byte every few seconds), the listing in pages and by
the caller's deadline for all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from stackpin import jsonio
from stackpin.engines.index import read_capped
from stackpin.engines.pipconfig import redact
from stackpin.errors import ResolveError, clip
from stackpin.lock.deadline import call_with_deadline, remaining

if TYPE_CHECKING:
    import httpx

API = "https://api.github.com"
PER_PAGE = 100  # the API's largest page
MAX_PAGE = 16 << 20  # bytes of one page: 100 releases with long notes are a few MB
MAX_PAGES = 20  # 2,000 releases; Dynamo has had well under 100
REQUEST_SECONDS = 30.0  # one page, all of its bytes
ACCEPT = "application/vnd.github+json"
API_VERSION = "2022-11-28"  # X-GitHub-Api-Version GitHub's docs name for this endpoint


@dataclass(frozen=True)
class GithubRelease:
    tag: str
    draft: bool
    prerelease: bool  # the release's own flag, whatever its tag says
    url: str | None  # html_url: the release's page
    published: str | None  # published_at, ISO 8601; None for a draft


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _release(item: object, where: str) -> GithubRelease:
    if not isinstance(item, dict) or not isinstance(item.get("tag_name"), str):
        raise ResolveError(f"{where}: a release without a tag_name: not the GitHub releases API's answer")
    url, published = item.get("html_url"), item.get("published_at")
    return GithubRelease(tag=item["tag_name"], draft=item.get("draft") is True,
                         prerelease=item.get("prerelease") is True, url=url if isinstance(url, str) else None,
                         published=published if isinstance(published, str) else None)


@dataclass(frozen=True)
class _Page:
    body: bytes
    next: str | None  # the Link header's rel="next", as given


def _failure(status: int, headers: httpx.Headers, where: str, token: bool) -> ResolveError:
    if status == 404:
        hint = "is the repository private? set $GITHUB_TOKEN" if not token else None
        return ResolveError(f"{where}: HTTP 404, no such repository", hint)
    if status in (403, 429) and headers.get("x-ratelimit-remaining") == "0":
        return ResolveError(f"{where}: HTTP {status}, GitHub's API rate limit is spent",
                            "set $GITHUB_TOKEN (60 requests an hour without one)" if not token else None)
    if status == 401:
        return ResolveError(f"{where}: HTTP 401", "$GITHUB_TOKEN was refused" if token else "set $GITHUB_TOKEN")
    return ResolveError(f"{where}: HTTP {status}")


def _get(client: httpx.Client, url: str, headers: dict[str, str], where: str, token: bool) -> _Page:
    """One page, at most MAX_PAGE bytes (run in the deadline's thread)."""
    import httpx

    try:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code != 200:
                raise _failure(response.status_code, response.headers, where, token)
            return _Page(read_capped(response, MAX_PAGE, f"{where}: a page"), response.links.get("next", {}).get("url"))
    except httpx.HTTPError as exc:
        words = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ResolveError(f"{where}: {clip(words, 200)}") from None


def list_releases(repo: str, *, api: str = API, token: str | None = None, deadline_at: float | None = None,
                  request_seconds: float | None = None) -> list[GithubRelease]:
    """Every release of `repo` (OWNER/NAME), drafts included (only a token with push access sees them),
    newest first as the API lists them. `request_seconds` bounds each page [default: REQUEST_SECONDS],
    `deadline_at` (a time.monotonic() instant) all of them."""
    import httpx

    request_seconds = REQUEST_SECONDS if request_seconds is None else request_seconds
    first = f"{api.rstrip('/')}/repos/{repo}/releases?per_page={PER_PAGE}"
    where = f"github {repo} ({redact(api)})"
    try:
        home = _origin(httpx.URL(first))
    except httpx.InvalidURL:
        raise ResolveError(f"{where}: not a valid API URL") from None
    if home[0] not in ("http", "https") or not home[1]:
        raise ResolveError(f"{where}: not an http(s) API URL")
    headers = {"Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    released: list[GithubRelease] = []
    url, seen = first, {first}
    with httpx.Client(timeout=request_seconds, follow_redirects=True) as client:
        for _ in range(MAX_PAGES):
            # The token goes to the API's origin only (a next page elsewhere is read without it).
            sent = headers if _origin(httpx.URL(url)) == home else {k: v for k, v in headers.items()
                                                                     if k != "Authorization"}
            page = call_with_deadline(partial(_get, client, url, sent, where, bool(token)),
                                      remaining(request_seconds, deadline_at), where)
            try:
                items = jsonio.loads(page.body)
            except jsonio.NestingError as exc:
                raise ResolveError(f"{where}: {exc}") from None
            except ValueError:
                raise ResolveError(f"{where}: the answer is not JSON") from None
            if not isinstance(items, list):
                raise ResolveError(f"{where}: the answer is not a JSON list of releases")
            released += [_release(item, where) for item in items]
            following = page.next
            if not following:
                return released
            url = str(httpx.URL(url).join(following))
            if url in seen:
                raise ResolveError(f"{where}: the next page links one already read")
            seen.add(url)
    raise ResolveError(f"{where}: more than {MAX_PAGES} pages of releases")

