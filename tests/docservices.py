"""Loopback services a doc's runnable block starts, as the tests start them, for as long as its shell runs.

    $ eval "$(python -m tests.docservices registry site/registry)"      # REGISTRY=127.0.0.1:PORT
    $ eval "$(python -m tests.docservices upgrade-feeds upgrade)"      # INDEX, GITHUB_API_URL, REGISTRY

Each prints shell assignments on stdout (and what it started, on stderr) once the services answer, and leaves
them running in a child process that stops them when the shell that ran it exits or on SIGTERM (docrun
ends a block's process group). Its log is DIR/services.log.

- `registry DIR`: a real CNCF distribution registry (devkit/registry.py), its storage under DIR.
- `upgrade-feeds DIR`: what tests/test_upgrade_feeds.py sets up for `stackpin upgrade check --feed`: its
  stand-in packages (Dynamo 9.0.0 to 9.2.0, devkit/enginepkgs.py) on pypiserver, its GitHub-shaped releases
  server, and a registry with the tags 9.1.0, 9.3.0, 9.3.0-cuda13 and latest pushed to
  nvidia/ai-dynamo/vllm-runtime; DIR/gb300-tuned.yaml is gb300-tuned on Dynamo 9.0.0 with DIR/catalog.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

READY_TIMEOUT_S = 60.0


def _registry(directory: Path, stack: contextlib.ExitStack) -> dict[str, str]:
    from devkit.registry import start_registry

    host, _ = stack.enter_context(start_registry(directory))
    return {"REGISTRY": host, "#": f"a CNCF distribution registry on {host}"}


def _upgrade_site(directory: Path) -> None:
    """The packages, catalog and profile test_upgrade_feeds.py's fixtures make, under `directory`."""
    import yaml
    from click.testing import CliRunner

    from stackpin.cli.main import main
    from tests.test_upgrade_feeds import PROFILE, make_packages

    packages = directory / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    make_packages(packages)
    catalog = directory / "catalog"
    for name in ("ai_dynamo-9.0.0-py3-none-any.whl", "vllm-9.0.0.tar.gz"):
        added = CliRunner().invoke(main, ["engines", "add", "--from", str(packages / name), "--catalog", str(catalog)])
        if added.exit_code != 0:
            raise RuntimeError(f"engines add {name}: {added.output}")
    doc = yaml.safe_load(PROFILE.read_text())
    doc["spec"]["catalogPath"] = [str(catalog.resolve())]
    doc["spec"]["versions"].update(dynamo="9.0.0", vllm="9.0.0", flashinfer="0.7.2.post1", nixl="1.4.1")
    (directory / "gb300-tuned.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _upgrade_feeds(directory: Path, stack: contextlib.ExitStack) -> dict[str, str]:
    from devkit.pypiserver import serve_packages
    from stackpin.lock.oci.client import RegistryClient
    from tests.helpers import serve_http
    from tests.test_upgrade_feeds import GitHub

    _upgrade_site(directory)
    index = stack.enter_context(serve_packages(directory / "packages"))
    (directory / "registry").mkdir(exist_ok=True)
    registry = _registry(directory / "registry", stack)["REGISTRY"]
    with RegistryClient() as client:
        for tag in ("9.1.0", "9.3.0", "9.3.0-cuda13", "latest"):
            client.push_artifact(f"{registry}/nvidia/ai-dynamo/vllm-runtime:{tag}",
                                 [(tag.encode(), "text/plain", None)],
                                 "application/vnd.example.runtime")
    api = stack.enter_context(serve_http(GitHub))
    return {"INDEX": index, "GITHUB_API_URL": api, "REGISTRY": registry,
            "#": f"pypiserver at {index}, GitHub's releases API at {api}, a registry on {registry}"}


SERVICES: dict[str, Callable[[Path, contextlib.ExitStack], dict[str, str]]] = {
    "registry": _registry, "upgrade-feeds": _upgrade_feeds}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serve(start: Callable[[Path, contextlib.ExitStack], dict[str, str]], directory: Path, shell: int,
           ready: int) -> None:
    """The child: start the services, say so through `ready`, keep them until the shell is gone or SIGTERM."""
    log = os.open(directory / "services.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.ExitStack() as stack:
        try:
            values = start(directory, stack)
        except Exception as exc:  # noqa: BLE001 - said to the parent, which prints one line
            os.write(ready, ("!" + f"{type(exc).__name__}: {exc}").encode())
            os.close(ready)
            return
        os.write(ready, json.dumps(values).encode())
        os.close(ready)
        while _alive(shell):
            time.sleep(0.5)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in SERVICES:
        print(f"usage: python -m tests.docservices {{{','.join(SERVICES)}}} DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1])
    directory.mkdir(parents=True, exist_ok=True)
    shell = os.getppid()
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        os.close(read)
        try:
            _serve(SERVICES[argv[0]], directory, shell, write)
        finally:
            os._exit(0)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + READY_TIMEOUT_S
    import select

    while time.monotonic() < deadline:
        if select.select([read], [], [], 0.5)[0]:
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    said = b"".join(chunks).decode()
    if not said or said.startswith("!"):
        print(f"error: {argv[0]} did not start: {said[1:] or 'no answer'} (see {directory / 'services.log'})",
              file=sys.stderr)
        return 2
    values = json.loads(said)
    print(f"# {values.pop('#')}", file=sys.stderr)
    for name, value in values.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
