"""A small OpenAI-style streaming server on loopback for the replay client's tests and bench, which
misbehaves on demand.

HTTP/1.1 with keep-alive, chunked `text/event-stream`: one `data:` event per token (the word `t `),
then the usage chunk and `data: [DONE]`. Prompt tokens are the words of the messages; cached tokens
are the leading 512-word blocks it has seen before (a prefix cache keyed on the chain of blocks).
`faults` maps a request's arrival number (0, 1, ...) to what goes wrong with it: `error` (HTTP 500),
`stall` (one token, then silence), `drop` (one token, then the connection closes), `malformed` (one
event that is not JSON, then the rest normally).

Run standalone for the bench: `python -m tests.sse_server --port P [--itl-ms X]`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

BLOCK = 512


@dataclass
class Server:
    itl_s: float = 0.0  # pause between token events
    ttft_s: float = 0.0
    faults: dict[int, str] = field(default_factory=dict)
    ttft_per_connection_s: float = 0.0  # TTFT grows with the open connections: a server that saturates
    sim_info: dict[str, object] | None = None  # answer GET /stackpin/sim with this (else 404)
    sim_stats: list[object] = field(default_factory=list)  # GET /stackpin/sim/stats answers, in turn (last repeats)
    model: str = "deepseek-ai/DeepSeek-V4.1-Flash"  # what GET /v1/models lists (the shipped locks' model)
    tokens_per_word: int = 1  # prompt tokens the usage counts a word as (a tokenizer the prompt was not built for)
    connections: int = 0
    port: int = 0
    requests_seen: int = 0
    bodies: list[dict[str, object]] = field(default_factory=list)
    keep_bodies: bool = True
    _cache: set[bytes] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _cached(self, words: list[str]) -> int:
        chain = hashlib.sha256()
        hit = True
        cached = 0
        for start in range(0, len(words) - len(words) % BLOCK, BLOCK):
            chain.update(" ".join(words[start:start + BLOCK]).encode())
            key = chain.digest()
            if hit and key in self._cache:
                cached += BLOCK
            else:
                hit = False
                self._cache.add(key)
        return cached

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split()[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method != "POST" or not path.endswith("/chat/completions"):
                    await self._get(path, writer)
                    continue
                try:
                    request = json.loads(body)
                except ValueError:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 8\r\n\r\nbad json")
                    continue
                if not await self._chat(request, writer):
                    return
        except (asyncio.CancelledError, ConnectionError):
            return  # shut down, or the client went away
        finally:
            self.connections -= 1
            writer.close()

    async def _get(self, path: str, writer: asyncio.StreamWriter) -> None:
        if path == "/stackpin/sim/stats" and self.sim_stats:
            answer = self.sim_stats.pop(0) if len(self.sim_stats) > 1 else self.sim_stats[0]
            data = json.dumps(answer).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(data), data))
        elif path.endswith("/v1/models") or (path == "/stackpin/sim" and self.sim_info is not None):
            answer = self.sim_info if path == "/stackpin/sim" else {
                "object": "list", "data": [{"id": self.model, "object": "model"}]}
            data = json.dumps(answer).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(data), data))
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
        await writer.drain()

    async def _chat(self, request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        number = self.requests_seen
        self.requests_seen += 1
        if self.keep_bodies:
            self.bodies.append(request)
        fault = self.faults.get(number)
        if fault == "error":
            data = b'{"error": {"message": "injected fault", "type": "server_error"}}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
            await writer.drain()
            return True
        messages = request["messages"]
        assert isinstance(messages, list)
        words = " ".join(str(m["content"]) for m in messages).split()
        cached = self._cached(words)
        tokens = int(str(request.get("max_tokens", 16)))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        if self.ttft_s or self.ttft_per_connection_s:
            await asyncio.sleep(self.ttft_s + self.ttft_per_connection_s * self.connections)
        token = (b'data: {"id":"cmpl-%d","object":"chat.completion.chunk","created":0,"model":"test-model",'
                 b'"choices":[{"index":0,"delta":{"content":"t "},"finish_reason":null}]}\n\n' % number)
        frame = b"%x\r\n%s\r\n" % (len(token), token)
        for i in range(tokens):
            if i == 1 and fault == "stall":
                await writer.drain()
                await asyncio.sleep(3600)
            if i == 1 and fault == "drop":
                await writer.drain()
                return False
            if i == 1 and fault == "malformed":
                bad = b"data: {not json\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(bad), bad))
            writer.write(frame)
            if self.itl_s:
                await writer.drain()
                await asyncio.sleep(self.itl_s)
            elif i % 64 == 63:
                await writer.drain()
        usage = {"id": f"cmpl-{number}", "object": "chat.completion.chunk", "created": 0, "model": "test-model",
                 "choices": [], "usage": {"prompt_tokens": len(words) * self.tokens_per_word,
                                          "completion_tokens": tokens,
                                          "total_tokens": len(words) * self.tokens_per_word + tokens,
                                          "prompt_tokens_details": {"cached_tokens": cached}}}
        tail = b"data: %s\n\ndata: [DONE]\n\n" % json.dumps(usage).encode()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
        await writer.drain()
        return True


@contextmanager
def serve_in_thread(server: Server) -> Iterator[Server]:
    """Run `server` on a free loopback port in a daemon thread for the block."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: list[asyncio.base_events.Server] = []

    async def start() -> None:
        srv = await asyncio.start_server(server.handle, "127.0.0.1", server.port)
        server.port = srv.sockets[0].getsockname()[1]
        holder.append(srv)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield server
    finally:
        async def stop() -> None:
            holder[0].close()
            tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), loop)
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    args = parser.parse_args()
    server = Server(itl_s=args.itl_ms / 1000, port=args.port, keep_bodies=False)

    async def run() -> None:
        srv = await asyncio.start_server(server.handle, "127.0.0.1", server.port, backlog=1024)
        print(f"listening {server.url}", flush=True)
        await srv.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
