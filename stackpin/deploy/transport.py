"""HTTP/1.1 to one Kubernetes API server, on the standard library's http.client and ssl.

Why not an HTTP library: a cluster command's start-up was mostly its client's import. lightkube with httpx2
(~250 modules: httpcore2, h2, anyio, asyncio, importlib.metadata) took ~140 ms of a 2-core machine before
the first request, more than the whole of `kubectl get`; the official `kubernetes` client ~285 ms, urllib3
alone ~60 ms, http.client with ssl ~18 ms (bench/bench_deploy.py measures them). What the API server needs
of a client is what http.client does: one kept-alive TLS connection per thread, bodies read whole or line by
line (a watch), a CONNECT tunnel through a proxy. The kubeconfig's credentials are stackpin/deploy/credentials.py.

An idle kept-alive connection the server has closed is noticed before it is used (it reads as ready: an end
of stream) and replaced. Where the server closes it just as a request goes out, a read (GET) is sent again
once on a new connection, as Go's client does; a write is never sent twice. The other resend is after a
401, once, when the credential could be renewed (stackpin/deploy/credentials.py).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from urllib.parse import urlencode

from stackpin.deploy.credentials import Auth

MAX_ANSWER_BYTES = 256 * 1024 * 1024  # one answer read whole: a list of every object of a kind
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one watch event (one object)


class TooLarge(Exception):
    """An answer larger than this module reads whole."""


class _TLSConnection(http.client.HTTPConnection):
    """http.client's connection with TLS set up as a kubeconfig says: the TLS context it builds, and the
    name checked in the server's certificate (tls-server-name, else the server's host, also through a
    CONNECT tunnel)."""

    default_port = 443

    def __init__(self, host: str, port: int, *, timeout: float, tls: ssl.SSLContext, name: str) -> None:
        super().__init__(host, port, timeout=timeout)
        self._tls = tls
        self._name = name

    def connect(self) -> None:
        super().connect()  # TCP, and the proxy's CONNECT tunnel when one is set
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._name)


class Answer:
    """One HTTP answer: its status and, unless streamed, its whole body."""

    def __init__(self, status: int, content: bytes, response: http.client.HTTPResponse | None = None,
                 connection: http.client.HTTPConnection | None = None) -> None:
        self.status_code = status
        self.content = content
        self._response = response
        self._connection = connection

    def read(self) -> bytes:
        """A streamed answer's body, whole (bounded)."""
        return _read_whole(self._response) if self._response is not None else self.content

    def iter_lines(self) -> Iterator[bytes]:
        """A streamed answer's lines (a watch's events), each bounded."""
        if self._response is None:
            return
        while line := self._response.readline(MAX_EVENT_BYTES + 1):
            if len(line) > MAX_EVENT_BYTES and not line.endswith(b"\n"):
                raise TooLarge(f"a watch event larger than {MAX_EVENT_BYTES} bytes")
            if line.strip():
                yield line

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


def _read_whole(response: http.client.HTTPResponse | None) -> bytes:
    if response is None:
        return b""
    chunks, total = [], 0
    while chunk := response.read(1 << 20):
        total += len(chunk)
        if total > MAX_ANSWER_BYTES:
            raise TooLarge(f"an answer larger than {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class Transport:
    """Requests to one server (`scheme://host:port/prefix`), each on this thread's kept-alive connection."""

    def __init__(self, *, host: str, port: int, prefix: str, tls: ssl.SSLContext | None, server_name: str | None,
                 proxy: tuple[str, int, dict[str, str]] | None, auth: Auth, user_agent: str = "stackpin") -> None:
        """`tls` None: plain HTTP (an http:// server)."""
        self._host, self._port, self._prefix = host, port, prefix.rstrip("/")
        self._tls, self._name = tls, server_name or host
        self._proxy = proxy
        self.auth = auth
        self._user_agent = user_agent
        self._local = threading.local()  # the Lease renewals run in a thread of their own

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        host, port = (self._proxy[0], self._proxy[1]) if self._proxy else (self._host, self._port)
        conn: http.client.HTTPConnection
        if self._tls is not None:
            conn = _TLSConnection(host, port, timeout=timeout, tls=self._tls, name=self._name)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        if self._proxy:
            conn.set_tunnel(self._host, self._port, headers=self._proxy[2])
        conn.connect()
        return conn

    def _kept(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it was kept from an earlier request."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and (conn.sock is None or _closed_by_peer(conn.sock)):
            conn.close()
            conn = None
        if conn is not None:
            return conn, True
        conn = self._local.conn = self._connect(timeout)
        return conn, False

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def send(self, method: str, path: str, query: Sequence[tuple[str, str]], headers: dict[str, str],
             body: bytes | None, timeout: tuple[float, float], stream: bool = False) -> Answer:
        """One exchange; after a 401, once more when the credential could be renewed."""
        header = self.auth.header()
        answer = self._exchange(method, path, query, headers, body, timeout, stream, header)
        if answer.status_code == 401 and self.auth.refresh(header):
            if stream:
                answer.close()
            answer = self._exchange(method, path, query, headers, body, timeout, stream, self.auth.header())
        return answer

    def _exchange(self, method: str, path: str, query: Sequence[tuple[str, str]], headers: dict[str, str],
                  body: bytes | None, timeout: tuple[float, float], stream: bool, authorization: str | None) -> Answer:
        target = self._prefix + path + (f"?{urlencode(list(query))}" if query else "")
        sent = {"User-Agent": self._user_agent, **headers}
        if authorization:
            sent["Authorization"] = authorization
        if stream:  # a watch: a connection of its own, closed with the answer
            conn = self._connect(timeout[0])
            try:
                response = self._ask(conn, method, target, body, sent, timeout[1])
            except BaseException:
                conn.close()
                raise
            return Answer(response.status, b"", response, conn)
        conn, kept = self._kept(timeout[0])
        try:
            try:
                response = self._ask(conn, method, target, body, sent, timeout[1])
            except _CLOSED:
                # The server closed a kept connection as the request went out (its idle timeout): a read is
                # sent again on a new one, as Go's client does; a write is not, the server may have acted on it.
                if not kept or method not in ("GET", "HEAD"):
                    raise
                self._drop()
                conn, _ = self._kept(timeout[0])
                response = self._ask(conn, method, target, body, sent, timeout[1])
            content = _read_whole(response)
        except BaseException:
            self._drop()
            raise
        if response.will_close:
            self._drop()
        return Answer(response.status, content)

    @staticmethod
    def _ask(conn: http.client.HTTPConnection, method: str, target: str, body: bytes | None,
             headers: dict[str, str], read_s: float) -> http.client.HTTPResponse:
        assert conn.sock is not None
        conn.sock.settimeout(read_s)
        conn.request(method, target, body=body, headers=headers)
        return conn.getresponse()


# How a kept connection the server closed shows itself when used: no answer at all.
_CLOSED = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection reads as ready: the server closed it (or sent what no request
    asked for). Either way it is not used again."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)
