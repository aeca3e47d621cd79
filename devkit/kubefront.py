"""A loopback HTTPS front for an envtest API server: every request is passed on to the server and
recorded (method, path and query), so a test or a bench can count the round trips a command makes;
a hook may answer a request itself instead (a watch that ends in an ERROR event, say).

The front serves the API server's own certificate (envtest's self-signed `apiserver.crt`, made for
127.0.0.1), so a kubeconfig that trusts the server trusts the front: `front.kubeconfig(original)`
writes a copy of a kubeconfig pointing at the front. HTTP/1.1 only (no ALPN h2): kubectl falls back.
Watches are passed on as they arrive (chunked), not read whole.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from devkit.envtest import Envtest

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host",
       "content-length"}
MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # without the query
    query: dict[str, list[str]]
    agent: str

    @property
    def watch(self) -> bool:
        return self.query.get("watch", [""])[0] in ("1", "true")

    def __str__(self) -> str:
        return f"{self.method} {self.path}" + (" (watch)" if self.watch else "")


# A hook gets the request; it returns (status, lines of the body) to answer it itself, or None to pass it on.
Hook = Callable[[Seen], "tuple[int, list[bytes]] | None"]


@dataclass
class Front:
    env: Envtest
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    hook: Hook | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, original: Path, name: str = "kubeconfig-front") -> Path:
        doc = json.loads(original.read_text(encoding="utf-8"))
        for cluster in doc["clusters"]:
            cluster["cluster"]["server"] = self.url
        path = original.parent / f"{name}-{self.port}"
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        path.chmod(0o600)
        return path

    def reset(self) -> list[Seen]:
        """The requests seen so far, and forget them."""
        with self._lock:
            out, self.seen = self.seen, []
        return out

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)


def _handler(front: Front) -> type[BaseHTTPRequestHandler]:
    upstream = ssl.create_default_context(cafile=str(front.env.ca))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def _any(self) -> None:
            url = urlsplit(self.path)
            seen = Seen(self.command, url.path, parse_qs(url.query), self.headers.get("User-Agent", ""))
            front._record(seen)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, MAX_BODY)) if length else None
            answer = front.hook(seen) if front.hook else None
            if answer is not None:
                status, lines = answer
                data = b"".join(lines)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            conn = http.client.HTTPSConnection("127.0.0.1", front.env.port, context=upstream, timeout=120)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP:
                        self.send_header(key, value)
                if seen.watch:  # pass the events on as they come
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while chunk := resp.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    data = resp.read(MAX_BODY)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

    return Handler


@contextmanager
def front_of(env: Envtest, hook: Hook | None = None) -> Iterator[Front]:
    """A Front on a free loopback port, served from a thread until the `with` ends."""
    front = Front(env, hook=hook)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(front))
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    certs = env.workdir / "certs"
    context.load_cert_chain(str(certs / "apiserver.crt"), str(certs / "apiserver.key"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    front.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="kubefront", daemon=True)
    thread.start()
    try:
        yield front
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
