"""A TCP proxy on loopback that delays every chunk the client sends by a fixed time, so that a local
registry answers like a remote one (one delay per request, as a WAN round trip would add).

Run: python bench/latency_proxy.py LISTEN_PORT UPSTREAM_HOST:PORT DELAY_MS
"""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while data := await reader.read(65536):
            if delay:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(port: int, upstream: str, delay_ms: float) -> None:
    host, _, up_port = upstream.rpartition(":")

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(host, int(up_port))
        await asyncio.gather(_pipe(client_r, up_w, delay_ms / 1000), _pipe(up_r, client_w, 0))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
