"""The simulator's HTTP server: OpenAI chat completions with SSE streaming on stdlib asyncio streams.

The protocol is in README.md. One connection serves requests one after another (keep-alive); a
streamed answer is HTTP/1.1 chunked, one `data:` event per engine step that gave the request tokens.
The engine calls back into the connection (`emit`) to write, so no queue sits between a step and
its bytes on the socket.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stackpin.jsonio as jsonio
from stackpin.errors import StackpinError
from stackpin.sim.engine import Simulator
from stackpin.sim.faults import FaultSpec
from stackpin.sim.models import MODELS, check_model, substitutions
from stackpin.sim.stack import SimStack, load_stack, share_of

__all__ = ["MODELS", "check_model", "serve", "serve_in_thread"]


@dataclass
class SimServer:
    stack: SimStack
    speed: float = 1.0
    faults: FaultSpec = field(default_factory=FaultSpec)
    model: str = "roofline"
    requests_seen: int = 0
    sim: Simulator | None = None
    stack_gpus: int = 0  # the whole stack's GPUs when only a share of it is served
    substitutions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.substitutions = substitutions(self.model, self.stack)
        if self.stack_gpus and self.stack_gpus != self.stack.gpus:
            self.substitutions.append(f"serves {self.stack.gpus} of the stack's {self.stack_gpus} GPUs (every "
                                      f"pool's replicas in proportion); per-GPU figures are per served GPU")
        if self.faults.slow != 1:  # a bench result records it: a slowed stack never passes for the stack
            self.substitutions.append(f"every engine step takes {self.faults.slow:g}x as long (--fault "
                                      f"slow={self.faults.slow:g}): an injected slowdown, not the stack's timing")

    def info(self) -> dict[str, Any]:
        return {"simulated": True, "model": self.model, "substitutions": self.substitutions,
                "stack_digest": self.stack.digest, "stack": self.stack.name, "platform": self.stack.platform,
                "gpus": self.stack.gpus, "stack_gpus": self.stack_gpus or self.stack.gpus, "speed": self.speed}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carry = bytearray()  # bytes of the next request read while watching for a disconnect
        try:
            while await self._one(reader, writer, carry):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, carry: bytearray) -> bool:
        """Serve one request; False when the connection is done. A malformed request gets a 4xx and the
        connection is closed; one that stops arriving is closed after READ_TIMEOUT_S (issue 18)."""
        if not carry:  # an idle keep-alive connection may wait for its next request as long as it likes
            first = await reader.read(1)
            if not first:
                return False
            carry += first
        try:  # ... but a request that has begun must arrive whole in time
            head = bytes(carry) + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
        except TimeoutError:
            return False
        carry.clear()
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            _respond(writer, 400, {"error": {"message": "bad request line", "type": "invalid_request_error"}}, False)
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        lengths = 0
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
                lengths += name.strip().lower() == "content-length"
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        length_text = headers.get("content-length", "0") or "0"
        # ASCII digits only (str.isdigit takes superscripts), one header (RFC 9112 6.3), a bounded body.
        if lengths > 1 or not re.fullmatch(r"[0-9]{1,12}", length_text) or int(length_text) > MAX_BODY_BYTES:
            error = {"message": "Content-Length: not one length of at most "
                                f"{MAX_BODY_BYTES} bytes", "type": "invalid_request_error"}
            _respond(writer, 400, {"error": error}, False)
            return False
        length = int(length_text)
        try:
            body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S) if length else b""
        except TimeoutError:  # a Content-Length larger than what is sent
            error = {"message": "the body did not arrive in time", "type": "invalid_request_error"}
            _respond(writer, 408, {"error": error}, False)
            return False
        path = target.split("?", 1)[0]
        if method == "GET" and path == "/stackpin/sim":
            _respond(writer, 200, self.info(), keep)
        elif method == "GET" and path == "/stackpin/sim/stats" and self.sim is not None:
            _respond(writer, 200, self.sim.stats(), keep)
        elif method == "GET" and path == "/metrics" and self.sim is not None:
            _respond_text(writer, exposition(self.sim, self.stack.model_id), keep)
        elif method == "GET" and path == "/v1/models":
            _respond(writer, 200, {"object": "list", "data": [
                {"id": self.stack.model_id, "object": "model", "owned_by": "stackpin-sim"}]}, keep)
        elif method == "POST" and path == "/v1/chat/completions":
            return await self._chat(body, reader, writer, keep, carry)
        else:
            _respond(writer, 404, {"error": {"message": f"{method} {path}: not found", "type": "not_found"}}, keep)
        await writer.drain()
        return keep

    async def _chat(self, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    keep: bool, carry: bytearray) -> bool:
        try:
            request = _parse_chat(body)
        except ValueError as exc:  # a malformed request: answered, then the connection is closed
            _respond(writer, 400, {"error": {"message": str(exc), "type": "invalid_request_error"}}, False)
            await writer.drain()
            return False
        number = self.requests_seen
        self.requests_seen += 1
        fault = self.faults.draw(number)
        if fault == "error":
            _respond(writer, 500, {"error": {"message": "injected fault", "type": "server_error"}}, keep)
            await writer.drain()
            return keep
        assert self.sim is not None
        stream = Stream(writer, request, self.stack.model_id, fault, self.faults.after, number)
        seq = self.sim.submit(request["words"], request["max_tokens"], stream.emit)
        stream.seq_cached = seq.cached
        if request["stream"]:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                         b"Transfer-Encoding: chunked\r\n" + (b"" if keep else b"Connection: close\r\n") + b"\r\n")
        # Watch for the client going away while the engine generates. The read may instead return the
        # first byte of the client's next request (sent the moment this answer ends): keep it.
        closed = asyncio.ensure_future(reader.read(1))
        done = asyncio.ensure_future(stream.done.wait())
        try:
            await asyncio.wait([closed, done], return_when=asyncio.FIRST_COMPLETED)
            if closed.done() and closed.result():  # a reset raises here: handled as EOF, below
                carry += closed.result()
                await done
            elif not done.done():  # EOF: the client went away (or a stall fault waits for it to)
                return False
            else:
                closed.cancel()
                (got,) = await asyncio.gather(closed, return_exceptions=True)  # frees the reader
                if isinstance(got, bytes):
                    if not got:
                        return False
                    carry += got
        finally:
            # However the handler leaves before the answer ends (EOF, or a client that closed with our
            # tokens unread, which resets the connection and makes the read raise), the sequence is
            # dropped: otherwise it keeps its batch slot and KV until max_tokens.
            if not stream.done.is_set():
                seq.cancelled = True
            done.cancel()
        if stream.dropped:
            return False
        if not request["stream"]:
            _respond(writer, 200, stream.completion(), keep)
        await writer.drain()
        return keep


READ_TIMEOUT_S = 30.0  # a request's head, or its body, that stops arriving is closed after this
MAX_BODY_BYTES = 64 * 1024 * 1024  # a replayed prompt is words, not gigabytes


def _parse_chat(body: bytes) -> dict[str, Any]:
    try:
        data = jsonio.loads(body)
    except jsonio.NestingError as exc:
        raise ValueError(f"body is {exc}") from None
    except ValueError as exc:  # json's own, UnicodeDecodeError
        raise ValueError(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("body is not a JSON object")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: a non-empty list is required")
    words: list[str] = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts: the text ones count
            texts = [p.get("text", "") for p in content if isinstance(p, dict)]
            if not all(isinstance(t, str) for t in texts):
                raise ValueError(f"messages[{i}].content: a part's text must be a string")
            content = " ".join(texts)
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}].content: a string is required")
        words += content.split()
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens", 16))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError("max_tokens: a positive integer is required")
    options = data.get("stream_options") or {}
    return {"words": words, "max_tokens": max_tokens, "stream": bool(data.get("stream", False)),
            "usage": bool(options.get("include_usage", False)) if isinstance(options, dict) else False}


def _respond(writer: asyncio.StreamWriter, status: int, payload: dict[str, Any], keep: bool) -> None:
    body = json.dumps(payload).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 408: "Request Timeout",
              500: "Internal Server Error"}[status]
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                 f"{'' if keep else 'Connection: close' + chr(13) + chr(10)}\r\n".encode() + body)


def _respond_text(writer: asyncio.StreamWriter, text: str, keep: bool) -> None:
    body = text.encode()
    writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\n{'' if keep else 'Connection: close' + chr(13) + chr(10)}\r\n"
                 .encode() + body)


def exposition(sim: Simulator, model_name: str) -> str:
    """GET /metrics: vLLM 0.31.0's speculative-decoding counters in Prometheus' text format, as vLLM's
    prometheus_client writes them (one series per engine, labels model_name and engine; per position a
    `position` label), counted from what the engines drew (engine.SpecCounts), plus stackpin's count of
    the drafts that reached each position (stackpin/bench/acceptance.yaml). A stack without drafts has
    none of them, as vLLM has none then."""
    from stackpin.bench.acceptance import facts

    engines = [e for e in sim.decoders if e.spec.positions]
    if not engines:
        return "# stackpin simulator: this stack drafts no speculative tokens\n"
    own = facts()["stackpin_sim"]
    served = facts()["engines"][own["serves"]]  # a `counting: drafts` engine's counters
    names, reached, label = served["counters"], own["reached_per_position"], served["position_label"]
    model = json.dumps(model_name)  # a label value: quoted, backslashes and quotes escaped
    lines: list[str] = []

    def family(name: str, help_text: str, rows: list[tuple[str, int]]) -> None:
        lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} counter"])
        lines.extend(f"{name}{{{labels}}} {float(value)!r}" for labels, value in rows)

    def engine_labels(i: int) -> str:
        return f'engine="{i}",model_name={model}'

    family(names["drafts"], "Number of spec decoding drafts.",
           [(engine_labels(i), e.spec.drafts) for i, e in enumerate(engines)])
    family(names["draft_tokens"], "Number of draft tokens.",
           [(engine_labels(i), e.spec.draft_tokens) for i, e in enumerate(engines)])
    family(names["accepted_tokens"], "Number of accepted tokens.",
           [(engine_labels(i), e.spec.accepted_tokens) for i, e in enumerate(engines)])
    family(names["accepted_per_position"], "Accepted tokens per draft position.",
           [(f'{engine_labels(i)},{label}="{p}"', n) for i, e in enumerate(engines)
            for p, n in enumerate(e.spec.accepted_per_position)])
    family(reached, "Drafts that drafted this position with every earlier one accepted (stackpin's simulator).",
           [(f'{engine_labels(i)},{label}="{p}"', n) for i, e in enumerate(engines)
            for p, n in enumerate(e.spec.reached_per_position)])
    return "\n".join(lines) + "\n"


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Stream:
    """Writes one request's answer as the engine hands it tokens."""

    def __init__(self, writer: asyncio.StreamWriter, request: dict[str, Any], model: str, fault: str | None,
                 after: int, number: int) -> None:
        self.writer = writer
        self.request = request
        self.fault = fault
        self.after = after
        self.events = 0
        self.tokens = 0
        self.seq_cached = 0
        self.dropped = False
        self.stalled = False
        self.done = asyncio.Event()
        self.id = f"chatcmpl-sim{number}"
        self.created = int(time.time())
        self.model = model
        head = json.dumps({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": model})
        self.head = b"data: " + head[:-1].encode() + b',"choices":[{"index":0,"delta":{'

    def emit(self, n: int, finished: bool) -> None:
        self.tokens += n
        if not self.request["stream"]:
            if finished:
                self.done.set()
            return
        if self.stalled or self.dropped or self.writer.transport.is_closing():
            return  # the client left: the handler sees EOF and cancels the sequence
        if self.events == self.after and self.fault in ("stall", "drop", "malformed"):
            if self.fault == "stall":
                self.stalled = True  # nothing more is written; the client gives up and closes
                return
            if self.fault == "drop":
                self.dropped = True
                self.writer.transport.abort()
                self.done.set()
                return
            self.writer.write(_chunk(b"data: {not json\n\n"))
            self.fault = None
        role = b'"role":"assistant",' if self.events == 0 else b""
        reason = b'"length"' if finished else b"null"
        out = _chunk(self.head + role + b'"content":"' + b"t " * n + b'"},"finish_reason":' + reason + b"}]}\n\n")
        self.events += 1
        if finished:
            if self.request["usage"]:
                usage = json.dumps({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                    "model": self.model, "choices": [], "usage": self.usage()})
                out += _chunk(b"data: " + usage.encode() + b"\n\n")
            out += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
            self.done.set()
        self.writer.write(out)

    def usage(self) -> dict[str, Any]:
        prompt = len(self.request["words"])
        return {"prompt_tokens": prompt, "completion_tokens": self.tokens, "total_tokens": prompt + self.tokens,
                "prompt_tokens_details": {"cached_tokens": self.seq_cached}}

    def completion(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "t " * self.tokens},
                             "finish_reason": "length"}], "usage": self.usage()}


async def _serve(server: SimServer, host: str, port: int, started: threading.Event | None = None,
                 bound: list[int] | None = None, stop: asyncio.Event | None = None) -> None:
    server.sim = Simulator(server.stack, server.speed, server.model, server.faults.slow)
    server.sim.start()
    # A bench opens hundreds of agents' connections at once: a deep accept queue, and prompts of
    # 131K words in one read buffer.
    tcp = await asyncio.start_server(server.handle, host, port, limit=2**24, backlog=4096)
    if bound is not None:
        bound.append(tcp.sockets[0].getsockname()[1])
    if started is not None:
        started.set()
    try:
        async with tcp:
            if stop is None:
                await tcp.serve_forever()
            else:
                await stop.wait()
                tcp.close()
                if hasattr(tcp, "close_clients"):  # 3.13+: wait_closed would wait for kept-alive clients
                    tcp.close_clients()
    finally:
        await server.sim.stop()


def serve(lock: Path, host: str = "127.0.0.1", port: int = 8000, speed: float = 1.0,
          faults: FaultSpec | None = None, model: str = "roofline",
          announce: Callable[[int], None] | None = None, share: int = 1) -> int:
    """Serve until Ctrl-C or SIGTERM (the CLI); `announce` is told the port once it listens (--port 0).
    Returns the exit code the signal calls for (130, 143): the signals only set a flag that stops the
    server (stackpin.children.stop_on_signals), also where SIGINT was ignored when the process started."""
    from stackpin.children import stop_on_signals

    check_model(model)
    if speed <= 0:
        raise StackpinError(f"--speed {speed}: must be above 0")
    whole = load_stack(lock)
    check_model(model, whole)
    server = SimServer(share_of(whole, share), speed, faults or FaultSpec(), model, stack_gpus=whole.gpus)
    started = threading.Event()
    bound: list[int] = []

    with stop_on_signals() as stopped:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            stopped.on_stop(lambda: loop.call_soon_threadsafe(stop.set))
            task = asyncio.ensure_future(_serve(server, host, port, started, bound, stop))
            while not started.is_set() and not task.done():
                await asyncio.sleep(0.01)
            if bound and announce is not None and not stop.is_set():
                announce(bound[0])
            await task

        try:
            asyncio.run(main())
        except OSError as exc:  # the port is taken, or the host is not this machine's
            raise StackpinError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        return stopped.exit_code


@dataclass
class Handle:
    url: str
    server: SimServer

    @property
    def requests_seen(self) -> int:
        return self.server.requests_seen


@contextmanager
def serve_in_thread(lock: Path | SimStack, port: int = 0, speed: float = 1.0, faults: FaultSpec | None = None,
                    host: str = "127.0.0.1", model: str = "roofline", share: int = 1) -> Iterator[Handle]:
    """Run the server on its own event loop in a thread (tests, the demo); stops it on exit. `lock` is a
    lockfile, or a SimStack (a test's what-if variant of one)."""
    check_model(model)
    whole = lock if isinstance(lock, SimStack) else load_stack(lock)
    check_model(model, whole)
    server = SimServer(share_of(whole, share), speed, faults or FaultSpec(), model, stack_gpus=whole.gpus)
    started = threading.Event()
    bound: list[int] = []
    loop = asyncio.new_event_loop()
    stop_box: list[asyncio.Event] = []
    errors: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            stop_box.append(asyncio.Event())
            await _serve(server, host, port, started, bound, stop_box[0])

        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            errors.append(exc)
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="stackpin-sim", daemon=True)
    thread.start()
    started.wait(30)
    if errors:
        raise errors[0]
    try:
        yield Handle(f"http://{host}:{bound[0]}", server)
    finally:
        loop.call_soon_threadsafe(stop_box[0].set)
        thread.join(30)
