"""One streamed chat completion over a kept-alive HTTP/1.1 connection, on raw asyncio streams.

Raw streams rather than an HTTP library: the client must not be the bottleneck, and per token it
does only a chunk read, a split on the SSE event boundary and one small `json.loads` (see
bench/bench_client.py for what that costs against aiperf). Every way an endpoint can fail ends the
request with a one-line `error` and never the run: an HTTP error status, no byte within the
request's deadline (stalled), the connection closing before `data: [DONE]` (dropped), and an event
that is not JSON (bad SSE: noted, the stream is read on).

Each response is acknowledged promptly (TCP_QUICKACK after the request is written, on Linux): a
server that leaves Nagle's algorithm on (Dynamo 1.6.1's frontend does) holds its first token until
the client acknowledges the response head, and a client that sends its next turn the instant the last
answer ended is in the kernel's delayed-ACK mode (40 ms at least). See docs/sim.md, "Turns sent back to
back".
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import stackpin.jsonio as jsonio
from stackpin.bench.gaps import gap_bucket
from stackpin.errors import StackpinError
from stackpin.jsonio import canonical_json

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    base: str  # path prefix before /v1, no trailing slash

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StackpinError(f"--endpoint {url!r}: give an http:// or https:// URL (the server's base, "
                                "before /v1)")
        base = parts.path.rstrip("/").removesuffix("/v1")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise StackpinError(f"--endpoint {url!r}: bad port") from None
        return cls(parts.hostname, port, parts.scheme == "https", base)

    @property
    def chat_path(self) -> str:
        return f"{self.base}/v1/chat/completions"


@dataclass
class Outcome:
    """What one request saw; times from time.monotonic() (one clock for every process on the host)."""

    start: float
    first_token: float | None = None
    last_token: float | None = None
    end: float | None = None
    events: int = 0  # content events
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    usage: bool = False
    text: list[str] = field(default_factory=list)
    error: str | None = None
    gaps: dict[int, int] = field(default_factory=dict)  # gap bucket (stats.gap_bucket) -> count

    @property
    def answer(self) -> str:
        return "".join(self.text)


class _Closed(Exception):
    """The server closed the connection."""


class Connection:
    """One agent's connection; reopened after anything that leaves it in an unknown state."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        host = endpoint.host if ":" not in endpoint.host else f"[{endpoint.host}]"
        self._head = (f"POST {endpoint.chat_path} HTTP/1.1\r\nHost: {host}:{endpoint.port}\r\n"
                      f"Content-Type: application/json\r\nAccept: text/event-stream\r\n{extra}")

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None or self.writer.is_closing():
            context = ssl.create_default_context() if self.endpoint.tls else None
            self.reader, self.writer = await asyncio.open_connection(
                self.endpoint.host, self.endpoint.port, ssl=context, limit=1 << 22)
        return self.reader, self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def chat(self, body: dict[str, Any], timeout_s: float) -> Outcome:
        """POST a streaming chat completion and read it to `data: [DONE]` or the first failure."""
        payload = canonical_json(body)
        outcome = Outcome(start=time.monotonic())
        deadline = outcome.start + timeout_s
        try:
            await asyncio.wait_for(self._exchange(payload, outcome), timeout=timeout_s)
        except TimeoutError:
            self.close()
            got = f"after {outcome.events} token event(s)" if outcome.events else "before the first token"
            outcome.error = outcome.error or f"stalled: no answer within {timeout_s:g}s ({got})"
        except _Closed:
            self.close()
            outcome.error = outcome.error or (
                f"dropped: connection closed mid-stream after {outcome.events} token event(s)"
                if outcome.events else "dropped: connection closed before the answer")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self.close()
            outcome.error = outcome.error or f"connection: {type(exc).__name__}: {str(exc)[:120]}"
        except asyncio.CancelledError:
            self.close()
            raise
        outcome.end = min(time.monotonic(), deadline)
        return outcome

    async def _exchange(self, payload: bytes, outcome: Outcome) -> None:
        reader, writer = await self._open()
        writer.write(f"{self._head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()
        _ack_promptly(writer)
        status, headers = await _read_head(reader)
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        length = int(headers["content-length"]) if "content-length" in headers else None
        keep = headers.get("connection", "").lower() != "close"
        if status != 200:
            body = await _read_all(reader, chunked, length)
            outcome.error = f"http {status}: {_error_message(body)}"
            if not keep or (not chunked and length is None):
                self.close()
            return
        done = await _read_events(reader, chunked, length, outcome)
        if not done:
            self.close()
            raise _Closed
        if not keep or (not chunked and length is None):
            self.close()


def _ack_promptly(writer: asyncio.StreamWriter) -> None:
    """Leave delayed-ACK mode for the response about to arrive. Sending a request right after reading
    the last answer puts Linux's TCP in interactive ("pingpong") mode, where it delays ACKs (40 ms at least)
    hoping to piggyback them on data; against a server with Nagle's algorithm on, that delay holds the
    first token and releases the tokens behind it in a burst. Out of that mode the kernel acknowledges
    each read at once, so the client sees tokens when the server sends them, on a reused connection
    as on a fresh one. The mode is entered again by the next request, hence once per request."""
    sock = writer.get_extra_info("socket")
    if _QUICKACK is not None and sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        except OSError:
            pass  # not TCP (a Unix socket): no ACKs to hurry


async def _readline(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        raise _Closed from None


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await _readline(reader)
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP response: {line[:60]!r}")
    headers: dict[str, str] = {}
    while True:
        line = await _readline(reader)
        if line in (b"\r\n", b"\n"):
            return int(parts[1]), headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


async def _chunks(reader: asyncio.StreamReader, chunked: bool, length: int | None) -> Any:
    """The body's pieces as they arrive (chunked, Content-Length, or until the server closes)."""
    if chunked:
        while True:
            size = int((await _readline(reader)).split(b";", 1)[0], 16)
            if size == 0:
                while (await _readline(reader)) not in (b"\r\n", b"\n"):
                    pass
                return
            try:
                data = await reader.readexactly(size + 2)
            except asyncio.IncompleteReadError:
                raise _Closed from None
            yield data[:-2]
    elif length is not None:
        left = length
        while left:
            data = await reader.read(min(left, 1 << 16))
            if not data:
                raise _Closed
            left -= len(data)
            yield data
    else:
        while data := await reader.read(1 << 16):
            yield data


async def _read_all(reader: asyncio.StreamReader, chunked: bool, length: int | None) -> bytes:
    out = bytearray()
    async for data in _chunks(reader, chunked, length):
        out += data
        if len(out) > 1 << 20:
            raise ValueError("error body over 1 MiB")
    return bytes(out)


def _error_message(body: bytes) -> str:
    try:
        data = jsonio.loads(body)
        message = data["error"]["message"] if isinstance(data.get("error"), dict) else data.get("error", data)
    except (ValueError, AttributeError, KeyError, TypeError):
        message = body.decode("utf-8", "replace")
    return " ".join(str(message).split())[:160]


async def _read_events(reader: asyncio.StreamReader, chunked: bool, length: int | None, outcome: Outcome) -> bool:
    """Read SSE events into `outcome`, then the rest of the body (so that the kept-alive connection
    is at the next response); True when `data: [DONE]` came."""
    buffer = b""
    done = False
    async for data in _chunks(reader, chunked, length):
        if done:
            continue
        now = time.monotonic()
        buffer += data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        while (cut := buffer.find(b"\n\n")) >= 0:
            event, buffer = buffer[:cut], buffer[cut + 2:]
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments (": keep-alive"), event:, id:, retry:
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                _take(payload, now, outcome)
            if done:
                break
        if done and not chunked and length is None:
            return True  # the body ends when the server closes: do not wait for that
    return done


def _take(payload: bytes, now: float, outcome: Outcome) -> None:
    try:
        chunk = jsonio.loads(payload)  # counting brackets first: a few characters in a token event
        choices = chunk.get("choices") or ()
        usage = chunk.get("usage")
    except (ValueError, AttributeError):
        if outcome.error is None:
            outcome.error = f"bad SSE event: {payload[:60].decode('utf-8', 'replace')!r}"
        return
    for choice in choices:
        delta = choice.get("delta") or {}
        content = delta.get("content") or delta.get("reasoning_content")
        if content:
            if outcome.first_token is None:
                outcome.first_token = now
            else:  # the gap since the previous token event (speculative decoding sends several a step)
                bucket = gap_bucket(now - (outcome.last_token or now))
                outcome.gaps[bucket] = outcome.gaps.get(bucket, 0) + 1
            outcome.last_token = now
            outcome.events += 1
            outcome.text.append(content)
    if usage:
        outcome.usage = True
        outcome.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        outcome.output_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        outcome.cached_tokens = int(details.get("cached_tokens") or 0)
