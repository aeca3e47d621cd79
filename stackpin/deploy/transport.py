"""HTTP to one Kubernetes API server over the official `kubernetes` client's connection pool
(kubernetes.client.rest.RESTClientObject: urllib3 with the kubeconfig's TLS, client certificate,
tls-server-name, and an http(s):// or socks5:// proxy), with its retries: a 429 (or 503) that carries
Retry-After is sent again after the wait the server asks for, as client-go does, for any verb (the server
did not act on it), at most MAX_RETRY_AFTER times and never past the command's request budget.

Why not the client's ApiClient.call_api: stackpin sends its own JSON (server-side apply bodies, custom
resources, discovery) and reads every answer with a size bound; the pool is the part that carries the
kubeconfig. Why not kubernetes.watch.Watch: it needs a generated list function and reads a line without
bound; a watch here is one streamed GET read line by line, each line bounded.

Redirects are never followed (a credential must not reach another host), and no request is resent after a
connection error: a write may have been acted on, and a dead server costs the budget once. An idle kept
connection the server has closed is noticed by urllib3 before it is used and replaced.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlencode

from urllib3.util.retry import Retry

from stackpin.deploy.credentials import Credentials

MAX_ANSWER_BYTES = 256 * 1024 * 1024  # one answer read whole: a list of every object of a kind
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one watch event (one object)
MAX_RETRY_AFTER = 10  # client-go's maxRetries for a Retry-After answer


class TooLarge(Exception):
    """An answer larger than this module reads whole."""


class Busy(Exception):
    """The server asked to wait (429 Retry-After) longer than the request budget has left."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"{wait_s:g}s")
        self.wait_s = wait_s


class _RetryAfter(Retry):
    """urllib3's Retry as client-go retries: only an answer carrying Retry-After (429, or a 5xx), whatever the
    method; no retry after a connection or read error; a wait past `deadline` (monotonic) is Busy, not slept."""

    def __init__(self, *args: Any, deadline: float = float("inf"), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def new(self, **kw: Any) -> _RetryAfter:
        retry: _RetryAfter = super().new(**kw)
        retry.deadline = self.deadline
        return retry

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:  # noqa: ARG002
        return bool(self.total) and has_retry_after and (status_code == 429 or status_code >= 500)

    def sleep(self, response: Any = None) -> None:
        wait = self.get_retry_after(response) if response is not None else None
        if wait is not None and time.monotonic() + wait > self.deadline:
            raise Busy(wait)
        super().sleep(response)


def retries(deadline: float = float("inf")) -> _RetryAfter:
    return _RetryAfter(total=MAX_RETRY_AFTER, connect=0, read=0, redirect=False, other=0,
                       status=MAX_RETRY_AFTER, allowed_methods=None, raise_on_status=False,
                       raise_on_redirect=False, deadline=deadline)


class Answer:
    """One HTTP answer: its status and, unless streamed, its whole body."""

    def __init__(self, status: int, content: bytes, response: Any = None) -> None:
        self.status_code = status
        self.content = content
        self._response = response

    def read(self) -> bytes:
        """A streamed answer's body, whole (bounded)."""
        return _read_whole(self._response) if self._response is not None else self.content

    def iter_lines(self) -> Iterator[bytes]:
        """A streamed answer's lines (a watch's events), each bounded."""
        if self._response is None:
            return
        pending = b""
        for chunk in self._response.stream(65536, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            yield from (line for line in lines if line.strip())
            if len(pending) > MAX_EVENT_BYTES:
                raise TooLarge(f"a watch event larger than {MAX_EVENT_BYTES} bytes")
        if pending.strip():
            yield pending

    def close(self) -> None:
        if self._response is not None:
            self._response.release_conn()
            self._response.close()


def _read_whole(response: Any) -> bytes:
    chunks, total = [], 0
    try:
        for chunk in response.stream(1 << 20, decode_content=True):
            total += len(chunk)
            if total > MAX_ANSWER_BYTES:
                raise TooLarge(f"an answer larger than {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
    except TooLarge:
        response.close()  # the rest is not read: the connection cannot be used again
        raise
    response.release_conn()
    return b"".join(chunks)


class Transport:
    """Requests to one server (the kubeconfig's `server`, a path prefix included) on the client's pool."""

    def __init__(self, configuration: Any, credentials: Credentials, user_agent: str = "stackpin") -> None:
        from kubernetes.client.rest import RESTClientObject

        configuration.retries = retries()
        if not configuration.verify_ssl:  # insecure-skip-tls-verify: kubectl says nothing of it on each request
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._pool = RESTClientObject(configuration).pool_manager
        self._base = configuration.host.rstrip("/")
        self.credentials = credentials
        self._user_agent = user_agent

    def send(self, method: str, path: str, query: Sequence[tuple[str, str]], headers: dict[str, str],
             body: bytes | None, timeout: tuple[float, float], stream: bool = False,
             deadline: float = float("inf")) -> Answer:
        """One exchange (a Retry-After answer waited on and sent again, within `deadline`); after a 401, once
        more when the credential could be renewed."""
        header = self.credentials.header()
        answer = self._exchange(method, path, query, headers, body, timeout, stream, header, deadline)
        if answer.status_code == 401 and self.credentials.refresh(header):
            answer.close()
            answer = self._exchange(method, path, query, headers, body, timeout, stream, self.credentials.header(),
                                    deadline)
        return answer

    def _exchange(self, method: str, path: str, query: Sequence[tuple[str, str]], headers: dict[str, str],
                  body: bytes | None, timeout: tuple[float, float], stream: bool, authorization: str | None,
                  deadline: float) -> Answer:
        import urllib3

        url = self._base + path + (f"?{urlencode(list(query))}" if query else "")
        sent = {"User-Agent": self._user_agent, **headers}
        if authorization:
            sent["Authorization"] = authorization
        response = self._pool.request(method, url, body=body, headers=sent, preload_content=False,
                                      redirect=False, retries=retries(deadline),
                                      timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]))
        if stream:  # a watch: read by the caller, line by line
            return Answer(response.status, b"", response)
        return Answer(response.status, _read_whole(response))
