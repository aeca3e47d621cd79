"""What a new user and a fuzzer hit: identifiers checked where they enter, oversized input refused by
size, error lines of bounded length. Each case failed (a traceback, a read outside the cache, a
27-second parse) before the check it exercises existed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.errors import MAX_LINE, ResolveError
from stackpin.lock.resolvers import HfCacheSource, HubSource, write_hf_cache_ref
from tests.helpers import apply, base_doc, write_profile

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _one_user_error(result: Result, field: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f" {field}: " in lines[0], lines
    return lines[0]


@pytest.mark.parametrize(("field", "value", "why"), [
    ("spec.model.id", "deepseek-ai/DeepSeek\x00", "Hugging Face model id"),
    ("spec.model.id", "deepseek-ai/x\nHost: evil", "Hugging Face model id"),
    ("spec.model.id", "../../etc", "Hugging Face model id"),
    ("spec.model.id", "a/b/c", "Hugging Face model id"),
    ("spec.model.revision", "main\x00", "branch, tag or commit"),
    ("spec.model.revision", "main\nX: y", "branch, tag or commit"),
    ("spec.model.revision", "../../../../../../../../../etc/hostname", "branch, tag or commit"),
    ("spec.model.revision", "/etc/hostname", "branch, tag or commit"),
    ("spec.versions.runtimeImage", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1\nevil", "image reference"),
    ("spec.autotune.cache", "registry.local/cache:v1 x", "image reference"),
    ("spec.versions.vllm", "0.\u0663\u0661.0", "must match the pattern"),  # Arabic-Indic digits
    ("spec.versions.vllm", "0.31.0\n", "must match the pattern"),
    ("spec.kernels.env", {"BAD\x00NAME": "1"}, "environment variable name"),
    ("spec.kernels.env", {"BAD\nNAME": "1"}, "environment variable name"),
    ("spec.kernels.env", {"A=B": "1"}, "environment variable name"),
    ("spec.kernels.env", {"OK_NAME": "nul\x00inside"}, "NUL byte"),
], ids=lambda v: repr(v)[:40])
def test_hostile_identifiers_are_refused_where_they_enter(tmp_path: Path, field: str, value: object,
                                                          why: str) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {field: value}))
    line = _one_user_error(invoke("validate", str(path)), field)
    assert why in line
    assert len(line) < MAX_LINE + 50


def test_lock_with_a_traversing_revision_reads_nothing_outside_the_cache(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef-not-a-commit-but-private")
    cache = tmp_path / "hf"
    write_hf_cache_ref(cache, "deepseek-ai/DeepSeek-V4.1-Flash", "main", COMMIT)
    path = write_profile(tmp_path, apply(base_doc(), {"spec.model.revision": "../../../secret"}))
    result = invoke("lock", "--lockdir", str(tmp_path / "lockfiles"), "--hf-cache", str(cache), str(path))
    line = _one_user_error(result, "spec.model.revision")
    assert "private" not in result.output and not (tmp_path / "lockfiles").exists()
    assert "branch, tag or commit" in line


def test_resolvers_refuse_hostile_references_themselves(tmp_path: Path) -> None:
    """The resolvers build a path and a URL: they check again, whoever calls them (a library user)."""
    cache = tmp_path / "hf"
    (cache / "models--org--m" / "refs").mkdir(parents=True)
    (tmp_path / "secret").write_text("private")
    with pytest.raises(ResolveError, match="branch, tag or commit") as exc:
        HfCacheSource(cache).resolve("org/m", "../../../secret")
    assert "private" not in str(exc.value)
    with pytest.raises(ResolveError, match="model id"):
        HfCacheSource(cache).resolve("org/m\x00", "main")
    # A newline never reaches httpx (it raised httpx.InvalidURL, a traceback): refused before any connection.
    with pytest.raises(ResolveError, match="branch, tag or commit"):
        HubSource(endpoint="http://127.0.0.1:9").resolve("org/m", "main\nHost: x")


def test_a_link_in_the_cache_may_not_lead_outside_it(tmp_path: Path) -> None:
    cache = tmp_path / "hf"
    refs = cache / "models--org--m" / "refs"
    refs.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.write_text(COMMIT)
    (refs / "main").symlink_to(outside)
    with pytest.raises(ResolveError, match="leads outside"):
        HfCacheSource(cache).resolve("org/m", "main")


def test_oversized_profile_is_refused_by_size_up_front(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("a: " + "x" * (5 * 1024 * 1024) + "\n")
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {path}: is 5,242,") and "bytes" in line and "at most" in line


def test_a_huge_value_gives_a_bounded_error_line(tmp_path: Path) -> None:
    doc = base_doc()
    doc["kind"] = "K" * 1_000_000
    path = write_profile(tmp_path, doc)
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert len(line) <= MAX_LINE + len("error: ") + 80
    assert "kind" in line and "more characters" in line


# --- deadlines --------------------------------------------------------------------------------------


@contextmanager
def drip_server(seconds: float = 8.0) -> Iterator[str]:
    """A loopback HTTP server that answers one byte every 0.2 s for `seconds` (then gives up): each
    read sees data well inside any per-read timeout, so only a deadline on the whole call ends it."""

    class Drip(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
            end = time.monotonic() + seconds
            for byte in reply + b" " * 4000:
                if time.monotonic() > end:
                    break
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.2)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_dripping_registry_hits_the_request_deadline_naming_the_reference() -> None:
    from stackpin.lock.deadline import DeadlineExceeded
    from stackpin.lock.oci.client import RegistryClient

    with drip_server() as host, RegistryClient(timeout=1.0, retries=0, request_deadline=1.0) as client:
        with pytest.raises(DeadlineExceeded, match=r"/v2/team/engine/manifests/v1: no complete answer within 1s"):
            client.resolve(f"{host}/team/engine:v1")


def test_lock_has_a_deadline_for_the_whole_run(tmp_path: Path) -> None:
    from stackpin.profile.loader import load_profile
    from tests.lockkit import fill_mirror

    path = write_profile(tmp_path, apply(base_doc(), {"spec.model.revision": "main"}))
    layout, _ = fill_mirror(tmp_path / "mirror", [load_profile(path)])
    with drip_server() as host:
        result = invoke("lock", "--lockdir", str(tmp_path / "lockfiles"), "--oci-layout", str(layout.path),
                        "--hf-endpoint", f"http://{host}", "--timeout", "1", str(path))
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert f"http://{host}: deepseek-ai/" in line and "@main: no complete answer within" in line
    assert not (tmp_path / "lockfiles").exists()
