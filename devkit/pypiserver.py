"""A real package index on loopback for tests and the upgrade demo: pypiserver (PEP 503 HTML simple pages,
sha256 fragments) serving a directory of package files, never falling back to PyPI.

    with serve_packages(tmp_path / "packages") as index_url:   # http://127.0.0.1:PORT/simple/
        ...

Files added to the directory later are served too (pypiserver lists it on each request).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from devkit.process import start, stop

START_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serve_packages(directory: Path) -> Iterator[str]:
    """Serve `directory` with pypiserver on a free loopback port; yield its simple index URL; stop it after."""
    port = _free_port()
    command = [sys.executable, "-m", "pypiserver", "run", "--host", "127.0.0.1", "--port", str(port),
               "--disable-fallback", "--authenticate", ".", "--passwords", ".", "--hash-algo", "sha256",
               "--backend", "simple-dir", "--log-stream", "none", str(directory)]
    process = start(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/simple/"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                error = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise RuntimeError(f"pypiserver exited {process.returncode}: {error[-2000:]}")
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"pypiserver did not answer on {url} within {START_TIMEOUT:.0f} s")
            time.sleep(0.1)
        yield url
    finally:
        stop(process)
        if process.stderr:
            process.stderr.close()
