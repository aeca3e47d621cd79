"""A deadline on a whole HTTP request, enforced by closing its connection.

httpx's timeouts bound each read: a server that sends a byte every few seconds, of the headers or of the
body, is never cut. A `Watchdog` thread shuts the client's sockets down at the request's deadline, wherever
the request is waiting (its headers, a body chunk, a redirect's); the blocked read returns at once and the
caller reports the deadline. No thread is left reading after the caller has given up.

The sockets are found through httpcore's `trace` request extension (its connect_tcp / start_tls events
return the connection's stream), so a client has one `Sockets` and sends `extensions={"trace": sockets.trace}`
with every request. Shutting them all down suits a client used by one thread at a time (a `PackageIndex`):
an idle pooled connection that is shut down is seen as closed and replaced at its next use.
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from typing import Any


class Sockets:
    """The live sockets of one httpx client, as its connections open them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._cut = False  # the running request's deadline has passed: a connection it opens now is shut too

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace callback: note each new connection's socket (a TLS one replaces the TCP one)."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            found = info.get("return_value")
            sock = found.get_extra_info("socket") if found is not None else None
            if isinstance(sock, socket.socket):
                with self._lock:
                    self._open.add(sock)
                    cut = self._cut
                if cut:
                    _shutdown(sock)

    def arm(self) -> None:
        """A new request begins: connections it opens are left open."""
        with self._lock:
            self._cut = False

    def shut(self) -> None:
        """End every read and write on them now, and on any the request opens from now on."""
        with self._lock:
            self._cut = True
            found = list(self._open)
        for sock in found:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    """shutdown, not close: close does not wake a read blocked in another thread. The plain socket's shutdown:
    an SSLSocket's own would drop its TLS state under the reader."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed, or never connected
        pass


class Watchdog:
    """Shuts `sockets` down `seconds` from now (later by each `extend`), unless `close`d first."""

    def __init__(self, seconds: float, sockets: Sockets) -> None:
        self.seconds = seconds
        self.fired = False
        self._at = time.monotonic() + seconds
        self._sockets = sockets
        sockets.arm()
        self._done = threading.Event()
        threading.Thread(target=self._watch, name="stackpin-watchdog", daemon=True).start()

    def extend(self, seconds: float) -> None:
        """Move the deadline later (a download earns time with the bytes it has received)."""
        self._at += seconds

    def _watch(self) -> None:
        while not self._done.wait(max(0.0, self._at - time.monotonic())):
            if time.monotonic() >= self._at:
                self.fired = True
                self._sockets.shut()
                return

    def close(self) -> None:
        self._done.set()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
