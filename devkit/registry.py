"""A real CNCF distribution registry (Debian `docker-registry`) on a free loopback port.

Shared by the test suite (tests/registry.py wraps it in fixtures) and the benchmarks, which must not
import test helpers. Needs the binary: scripts/install-test-services.sh installs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devkit.process import free_port, start, stop


class RegistryUnavailable(RuntimeError):
    """The registry binary is missing, exited, or did not answer in time."""


def registry_binary() -> str:
    name = os.environ.get("STACKPIN_DOCKER_REGISTRY", "docker-registry")
    found = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/sbin")
    if not found:
        raise RegistryUnavailable(f"{name} binary not found: install it with scripts/install-test-services.sh "
                                  "(apt-get install docker-registry)")
    return found


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RegistryUnavailable(f"docker-registry exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:  # 401 from an auth registry: it is up
            return
        except OSError:
            time.sleep(0.05)
    raise RegistryUnavailable(f"docker-registry did not answer {url} within 15s: {log.read_text()[-2000:]}")


@contextmanager
def start_registry(tmp: Path, auth: dict[str, object] | None = None) -> Iterator[tuple[str, Path]]:
    """Run a registry with its storage under `tmp`; yields (host:port, storage directory)."""
    port = free_port()
    storage = tmp / "storage"
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "error", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": "stackpin-test"},
    }
    if auth:
        config["auth"] = auth
    # JSON is YAML, and needs no YAML writer.
    (tmp / "config.yml").write_text(json.dumps(config))
    log = (tmp / "registry.log").open("wb")
    proc = start([registry_binary(), "serve", str(tmp / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/v2/", proc, tmp / "registry.log")
        yield f"127.0.0.1:{port}", storage
    finally:
        stop(proc, timeout=5)
        log.close()
