"""Local services the tests and benchmarks start: a free loopback port, starting a service so that it does not
outlive the test (its own process group, dying with the thread that started it: stackpin.children), and
stopping it with its whole group."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from typing import Any

from stackpin.children import end_groups, spawn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start(argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """A service in a process group of its own that gets SIGKILL when the thread that started it ends
    (a killed test run included); stop() ends its group."""
    return spawn(argv, **popen)


def stop(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM the process's group; SIGKILL it if it has not ended within `timeout` seconds; reap it."""
    end_groups([proc], timeout)
