"""Helpers for profile tests: valid base documents, dotted-path mutation, write-and-load, line lookup; message
templates (`matches`)."""

from __future__ import annotations

import copy
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from stackpin.profile.loader import LoadedProfile, load_profile

ROOT = Path(__file__).resolve().parent.parent
PROFILES_DIR = ROOT / "profiles" / "deepseek-v4.1-flash"
SHIPPED = sorted(PROFILES_DIR.glob("*.yaml"))
# Profiles the tests use that stackpin does not ship (a stack the pinned engines refuse, kept as a base).
TEST_PROFILES_DIR = ROOT / "tests" / "data" / "profiles"
SCHEMA_FILE = ROOT / "schema" / "stackprofile.schema.json"


class _Null:
    """Marker for `mutate`: write an explicit YAML null (plain `None` deletes the key)."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


@cache
def _merged(name: str) -> dict[str, Any]:
    shipped = PROFILES_DIR / f"{name}.yaml"
    return load_profile(shipped if shipped.is_file() else TEST_PROFILES_DIR / f"{name}.yaml").document


def base_doc(name: str = "gb300-tuned") -> dict[str, Any]:
    """A deep copy of a shipped profile's merged document (extends resolved, `extends` removed)."""
    return copy.deepcopy(_merged(name))


def _parts(path: str | tuple[str | int, ...]) -> list[str | int]:
    if isinstance(path, tuple):
        return list(path)
    return [int(p) if p.isdigit() else p for p in path.split(".")]


def mutate(doc: dict[str, Any], path: str | tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """Set `doc[path]` (dotted, digits index lists) in place and return doc.

    `None` deletes the key; `NULL` writes an explicit null. Missing intermediate maps are created.
    """
    parts = _parts(path)
    node: Any = doc
    for part in parts[:-1]:
        if isinstance(node, dict):
            if not isinstance(node.get(part), dict | list):
                node[part] = {}
            node = node[part]
        else:
            node = node[part]
    last = parts[-1]
    if value is None:
        if isinstance(node, dict):
            node.pop(last, None)
        else:
            del node[last]
    else:
        node[last] = None if value is NULL else copy.deepcopy(value)
    return doc


def apply(doc: dict[str, Any], mutations: dict[str, Any]) -> dict[str, Any]:
    for path, value in mutations.items():
        mutate(doc, path, value)
    return doc


def dump(doc: Any) -> str:
    """Block-style YAML, keys in document order (so a key's line can be found by indentation)."""
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)


def write_profile(directory: Path, doc: Any, name: str = "profile.yaml") -> Path:
    path = directory / name
    path.write_text(dump(doc) if not isinstance(doc, str) else doc, encoding="utf-8")
    return path


def load_doc(directory: Path, doc: Any, name: str = "profile.yaml") -> LoadedProfile:
    """Write `doc` as YAML under `directory` and load it with the real loader."""
    return load_profile(write_profile(directory, doc, name))


def line_of(text: str, path: str | tuple[str | int, ...]) -> tuple[int, int]:
    """(line, col), 1-based, of the key at `path` in block-style YAML `text`, found by indentation alone.

    Falls back to the deepest key of `path` that exists (as the loader does for absent fields).
    """
    lines = text.splitlines()
    start, indent, found = 0, -1, (1, 1)
    for part in _parts(path):
        child_indent, hit = None, None
        for i in range(start, len(lines)):
            stripped = lines[i].lstrip(" ")
            if not stripped or stripped.startswith("#"):
                continue
            ind = len(lines[i]) - len(stripped)
            if ind <= indent:
                break
            if child_indent is None:
                child_indent = ind
            if ind == child_indent and stripped.startswith((f"{part}:", f"'{part}':", f'"{part}":')):
                hit = i
                break
        if hit is None:
            return found
        found, start, indent = (hit + 1, indent_of(lines[hit]) + 1), hit + 1, indent_of(lines[hit])
    return found


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def template_regex(template: str, **fill: object) -> str:
    """A regex for an expected message: `{name}` is `fill[name]` literally, `{n}` any number, `...` any text;
    the rest is literal."""
    out = []
    for part in re.split(r"(\.\.\.|\{\w+\})", template):
        name = re.fullmatch(r"\{(\w+)\}", part)
        if part == "...":
            out.append(".*")
        elif part == "{n}":
            out.append(r"\d+")
        elif name and name[1] in fill:
            out.append(re.escape(str(fill[name[1]])))
        else:
            out.append(re.escape(part))
    return "".join(out)


def matches(template: str, text: str, **fill: object) -> bool:
    """Whether all of `text` reads as `template` says (see template_regex)."""
    return re.fullmatch(template_regex(template, **fill), text, re.DOTALL) is not None


@contextmanager
def serve_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served on a free loopback port in a thread; yields http://127.0.0.1:PORT; stopped after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def cpu_burners(count: int | None = None) -> Iterator[None]:
    """`count` processes (default: one a core) spinning beside the block, as `yes > /dev/null &` on each core
    would: the busy host issue 34 found decisions going wrong on. Killed on the way out, whatever happens."""
    import os
    import subprocess
    import sys

    processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                 for _ in range(count or os.cpu_count() or 1)]
    try:
        yield
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


def pipe_sockets(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until src ends (a proxy's one direction), then close dst."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        dst.close()


def accept_forever(listener: socket.socket, serve: Callable[[socket.socket], None]) -> None:
    """Serve each connection `listener` accepts in a thread of its own, until the listener is closed."""
    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
