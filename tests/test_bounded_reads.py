"""Every outside read has a deadline and a size bound (issue 37, "Package index"): a package index or
registry that answers slowly is cut at a deadline on the whole request, an archive that unpacks to more than
stackpin reads is refused before it is unpacked, PKG-INFO is read alone where only it is needed, and JSON
nested without end is refused before it is decoded. Each against a hostile loopback server or a generated
file; nothing reaches the internet."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin import jsonio
from stackpin.cli.main import main
from tests.helpers import ROOT, serve_http

PROFILE = ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"
DEEP = "[" * 200_000 + "]" * 200_000  # a RecursionError in json and msgspec alike


# -- JSON nesting --


def test_depth_counts_brackets_outside_strings_only() -> None:
    assert jsonio.depth('{"a": [1, {"b": "[[[[\\"[["}], "c": []}') == 3
    assert jsonio.depth(b'[[["]]]]]]"]]]') == 3
    assert jsonio.depth("3") == 0
    assert jsonio.loads('{"a": [[1]]}', limit=3) == {"a": [[1]]}
    with pytest.raises(jsonio.NestingError, match="JSON nested 4 levels deep, more than the 3 read"):
        jsonio.loads('{"a": [[[1]]]}', limit=3)
    with pytest.raises(jsonio.NestingError, match="nested 200000 levels deep"):
        jsonio.loads(DEEP)


def test_a_deeply_nested_engine_file_in_a_site_catalog_is_one_line(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "engines").mkdir(parents=True)
    engine_file = site / "engines" / "vllm-0.31.0.json"  # the release the profile pins
    engine_file.write_text('{"format": ' + DEEP + "}")
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))
    result = CliRunner().invoke(main, ["validate", str(PROFILE)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert [line for line in result.output.splitlines() if line.strip()] == [
        f"error: {engine_file}: JSON nested 200001 levels deep, more than the 100 read"], result.output
    listed = CliRunner().invoke(main, ["engines", "list"], env={"STACKPIN_CATALOG_PATH": str(site)})
    assert listed.exit_code == 0 and "vllm" in listed.output, listed.output  # listed, not decoded


def test_a_deeply_nested_index_page_is_one_line() -> None:
    from stackpin.engines.simple import PageError, parse_json

    with pytest.raises(PageError, match="JSON nested 200001 levels deep"):
        parse_json(json.dumps({"files": []}).encode()[:-1] + DEEP.encode() + b"}")


# -- archives --

# What reading a bomb may cost: the interpreter with stackpin's imports (~60-90 MB) and the bounded reads,
# with room for a loaded machine; the old reader held the whole unpacked archive (GBs).
RSS_BOUND_MB = 400
PY_MEMBER = 8 << 20  # zeros, as a .py file of the largest size read (MAX_SOURCE_BYTES)


def _sdist_bomb(path: Path, members: int, *, pkg_info_first: bool = True) -> Path:
    """vllm-9.9.9.tar.gz: PKG-INFO and `members` .py files of 8 MiB of zeros under vllm/ (each one packs to
    ~8 KB: 400 of them are the issue's 3.3 MB file that unpacks to 3.4 GB; tests make fewer, for time)."""
    import io
    import tarfile

    pkg_info = b"Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\nRequires-Dist: torch==2.9.0\n"
    zeros = bytes(PY_MEMBER)
    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"vllm-9.9.9/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        if pkg_info_first:
            add("PKG-INFO", pkg_info)
        for i in range(members):
            add(f"vllm/m{i}.py", zeros)
        if not pkg_info_first:
            add("PKG-INFO", pkg_info)
    return path


def _wheel_bomb(path: Path, members: int) -> Path:
    import zipfile

    zeros = bytes(PY_MEMBER)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as whl:
        whl.writestr("ai_dynamo-9.9.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: ai-dynamo\nVersion: 9.9.9\n")
        for i in range(members):
            whl.writestr(f"dynamo/m{i}.py", zeros)
    return path


def _read_in_child(call: str, path: Path) -> tuple[str, int]:
    """`call(path)` from stackpin.engines.package in a fresh interpreter: its one line (the result or the
    error) and its peak RSS in MB (ru_maxrss)."""
    import subprocess
    import sys

    script = f"""
import resource, sys
from pathlib import Path
from stackpin.engines.package import PackageError, {call}
try:
    out = repr({call}(Path(sys.argv[1])))[:200]
except PackageError as exc:
    out = "error: " + exc.message
print(out)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    line, rss = done.stdout.splitlines()
    return line, int(rss)


@pytest.fixture(scope="module")
def sdist_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = _sdist_bomb(tmp_path_factory.mktemp("bomb") / "vllm-9.9.9.tar.gz", 40)
    assert path.stat().st_size < 1 << 20  # a small file (336 MB unpacked): what it unpacks to is the attack
    return path


def test_a_tar_bomb_sdist_is_refused_in_bounded_memory(sdist_bomb: Path) -> None:
    line, rss = _read_in_child("read_package", sdist_bomb)
    assert line == "error: vllm-9.9.9.tar.gz: more than 134217728 bytes of Python sources: not read"
    assert rss < RSS_BOUND_MB, f"peak RSS {rss} MB"


def test_requires_of_reads_pkg_info_alone(sdist_bomb: Path) -> None:
    # PKG-INFO first, as setuptools writes it: read it and stop, whatever follows
    line, rss = _read_in_child("requires_of", sdist_bomb)
    assert line == "('torch==2.9.0',)"
    assert rss < RSS_BOUND_MB, f"peak RSS {rss} MB"


def test_requires_of_stops_at_the_unpacked_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PKG-INFO after the bomb: what is skipped on the way still counts (it is decompressed)."""
    from stackpin.engines import package
    from stackpin.engines.package import PackageError, requires_of

    bomb = _sdist_bomb(tmp_path / "vllm-9.9.9.tar.gz", 20, pkg_info_first=False)
    assert requires_of(bomb) == ("torch==2.9.0",)
    monkeypatch.setattr(package, "MAX_UNPACKED", 100 << 20)
    with pytest.raises(PackageError, match=r"^vllm-9.9.9.tar.gz: unpacks to more than 104857600 bytes: not read$"):
        requires_of(bomb)
    monkeypatch.setattr(package, "MAX_MEMBERS", 10)
    with pytest.raises(PackageError, match=r"more than 10 members: not read$"):
        requires_of(bomb)


def test_a_zip_bomb_wheel_is_refused_before_it_is_unpacked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The central directory's sizes are summed before any member is read (zipfile never unpacks more than a
    member's declared size); a bound of 100 MB stands for the 1 GiB one, for time."""
    import zipfile

    from stackpin.engines import package
    from stackpin.engines.package import PackageError, read_package, requires_of

    bomb = _wheel_bomb(tmp_path / "ai_dynamo-9.9.9-py3-none-any.whl", 20)  # 168 MB of zeros
    assert requires_of(bomb) == ()
    monkeypatch.setattr(package, "MAX_UNPACKED", 100 << 20)
    opened: list[str] = []
    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, name, *a, **k: opened.append(str(name)) or real_open(
        self, name, *a, **k))
    for read in (read_package, requires_of):
        with pytest.raises(PackageError, match=r"^ai_dynamo-9.9.9-py3-none-any.whl: unpacks to more than 104857600 "
                                               "bytes: not read$"):
            read(bomb)
    assert opened == []


def test_an_oversized_pkg_info_is_refused_unread(tmp_path: Path) -> None:
    import io
    import tarfile

    from stackpin.engines.package import PackageError, requires_of

    path = tmp_path / "vllm-9.9.9.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("vllm-9.9.9/PKG-INFO")
        info.size = 5 << 20
        tar.addfile(info, io.BytesIO(b"Name: vllm\n" + bytes(info.size - 11)))
    with pytest.raises(PackageError, match=r"its METADATA / PKG-INFO is 5242880 bytes, more than the 4194304 read"):
        requires_of(path)


# -- index requests: a deadline on the whole request --


class SlowIndex(BaseHTTPRequestHandler):
    """A simple-repository index that answers as slowly as `mode` says: a byte of its headers, or of its
    body (with or without a Content-Length), every 0.25 s for a minute; a package file that drips."""

    mode = "ok"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.endswith(".tar.gz"):
            return self._drip_body(b"\x1f" * 240, length=True)
        page = json.dumps({"meta": {"api-version": "1.0"}, "name": "ai-dynamo", "files": [
            {"filename": "ai_dynamo-9.9.9.tar.gz", "url": "ai_dynamo-9.9.9.tar.gz", "hashes": {"sha256": "0" * 64}},
        ]}).encode()
        if self.mode == "slow-headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            return self._drip(b"X-Slow: " + b"a" * 240)
        if self.mode in ("slow-body", "slow-body-no-length"):
            return self._drip_body(page + b" " * 240, length=self.mode == "slow-body")
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def _drip_body(self, body: bytes, *, length: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        if length:
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Connection", "close")  # the body ends when the connection does
            self.close_connection = True
        self.end_headers()
        self._drip(body)

    def _drip(self, data: bytes) -> None:
        try:
            for i in range(len(data)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(0.25)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: object) -> None:  # noqa: ARG002 (quiet)
        return


@pytest.fixture()
def slow_index() -> Iterator[tuple[str, type[SlowIndex]]]:
    class Handler(SlowIndex):
        pass

    with serve_http(Handler) as url:
        yield f"{url}/simple", Handler


@pytest.mark.parametrize("mode", ["slow-headers", "slow-body", "slow-body-no-length"])
def test_upgrade_check_cuts_a_slow_index_at_its_request_deadline(slow_index: tuple[str, type[SlowIndex]],
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 mode: str) -> None:
    """A byte every 0.25 s never trips a per-read timeout; the old reader was still reading after 150 s."""
    from stackpin.engines import index as reader

    monkeypatch.setattr(reader, "REQUEST_SECONDS", 2.0)  # the default is 30 s
    url, handler = slow_index
    handler.mode = mode
    env = {"HOME": str(tmp_path), "PIP_INDEX_URL": None, "PIP_CONFIG_FILE": "/dev/null", "NETRC": None,
           "STACKPIN_CACHE_DIR": str(tmp_path / "cache"), "STACKPIN_UPGRADE_FEEDS": None, "GITHUB_TOKEN": None}
    started = time.monotonic()
    result = CliRunner().invoke(main, ["upgrade", "check", str(PROFILE), "--index-url", url], env=env)
    took = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: {url}/ai-dynamo/: no complete answer within 2s (the whole request) (hint: is the index "
        "overloaded? a mirror or --find-links DIR may serve)"], result.stderr
    assert took < 20, took  # the deadline, with room for a loaded machine; the server drips for a minute


def test_a_download_earns_time_by_its_bytes_not_by_each_read(slow_index: tuple[str, type[SlowIndex]],
                                                             tmp_path: Path) -> None:
    from stackpin.engines.index import PackageIndex
    from stackpin.errors import ResolveError

    url, _ = slow_index
    started = time.monotonic()
    with PackageIndex(url, timeout=2.0) as index, \
            pytest.raises(ResolveError, match=r"ai_dynamo-9.9.9.tar.gz: no complete answer within 2s \(the whole "):
        index.download("ai-dynamo", "9.9.9", tmp_path)
    assert time.monotonic() - started < 20
    assert list(tmp_path.iterdir()) == []  # nothing half-written


# -- the registry client: request_deadline bounds each request whole (stackpin.lock.deadline) --


class SlowRegistry(SlowIndex):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.mode == "slow-headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            return self._drip(b"X-Slow: " + b"a" * 240)
        return self._drip_body(b'{"tags": []}' + b" " * 240, length=self.mode == "slow-body")


@pytest.mark.parametrize("mode", ["slow-headers", "slow-body", "slow-body-no-length"])
def test_the_registry_client_cuts_a_slow_registry_at_its_request_deadline(mode: str) -> None:
    from stackpin.errors import ResolveError
    from stackpin.lock.oci.client import RegistryClient

    class Handler(SlowRegistry):
        pass

    Handler.mode = mode
    with serve_http(Handler) as url, RegistryClient(retries=0, request_deadline=2.0) as client:
        host = url.removeprefix("http://")
        started = time.monotonic()
        with pytest.raises(ResolveError) as caught:
            client.list_tags(f"{host}/nvidia/ai-dynamo/vllm-runtime")
        assert time.monotonic() - started < 20
    assert caught.value.lines() == [
        f"registry {host}: GET /v2/nvidia/ai-dynamo/vllm-runtime/tags/list: no complete answer within 2s"]
