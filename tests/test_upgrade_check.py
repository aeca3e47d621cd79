"""`stackpin upgrade check` against real package indexes on loopback: pypiserver (PEP 503 HTML) serving
package files built in the real shapes (devkit/enginepkgs.py), a directory of them (--find-links), and a
small PEP 691 JSON index that asks for Basic credentials and offers PEP 658 metadata. No test reaches
the internet."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit import enginepkgs as pkgs
from devkit.pypiserver import serve_packages
from stackpin.cli.main import main
from tests.helpers import serve_http

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"
SECRET = "s3cret-pw"


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ai-dynamo 9.0.0 (vllm 9.0.0), 9.1.0 (vllm 9.1.0, nixl 1.5.0), 9.2.0rc1 (vllm 9.2.0rc1); vllm
    9.0.0, 9.1.0 (flashinfer 0.7.3), 9.2.0rc1 and 9.3.0, which no Dynamo release pins."""
    root = tmp_path_factory.mktemp("packages")
    pkgs.dynamo_wheel(root, "9.0.0", vllm="9.0.0")
    pkgs.dynamo_wheel(root, "9.1.0", vllm="9.1.0", nixl="1.5.0")
    pkgs.dynamo_wheel(root, "9.2.0rc1", vllm="9.2.0rc1", nixl="1.5.0")
    pkgs.vllm_sdist(root, "9.0.0")
    pkgs.vllm_sdist(root, "9.1.0", requires=pkgs.vllm_requires(flashinfer="0.7.3"))
    pkgs.vllm_sdist(root, "9.2.0rc1", requires=pkgs.vllm_requires(flashinfer="0.7.4rc1"))
    pkgs.vllm_sdist(root, "9.3.0", requires=pkgs.vllm_requires(flashinfer="0.7.5"))
    pkgs.flashinfer_wheel(root, "0.7.3")
    return root


@pytest.fixture(scope="module")
def index(packages: Path) -> Iterator[str]:
    with serve_packages(packages) as url:
        yield url


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str | None]:
    """No pip configuration, netrc or cache of the machine running the tests."""
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "PIP_INDEX_URL": None, "PIP_CONFIG_FILE": None, "XDG_CONFIG_HOME": None,
            "XDG_CONFIG_DIRS": str(tmp_path / "no-xdg"), "NETRC": None, "STACKPIN_CATALOG_PATH": "",
            "STACKPIN_CACHE_DIR": str(tmp_path / "cache")}


def invoke(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(main, ["upgrade", "check", *args], env=env)


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory, packages: Path) -> Path:
    """gb300-tuned pinned to Dynamo 9.0.0 / vLLM 9.0.0, with a catalog of those releases."""
    root = tmp_path_factory.mktemp("stack")
    catalog = root / "catalog"
    for name in ("ai_dynamo-9.0.0-py3-none-any.whl", "vllm-9.0.0.tar.gz"):
        added = CliRunner().invoke(main, ["engines", "add", "--from", str(packages / name), "--catalog", str(catalog)])
        assert added.exit_code == 0, added.output
    return _profile(root, catalog, dynamo="9.0.0", vllm="9.0.0")


def _profile(root: Path, catalog: Path, dynamo: str, vllm: str, name: str = "gb300-tuned") -> Path:
    doc: dict[str, Any] = yaml.safe_load(PROFILE.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["catalogPath"] = [str(catalog)]
    doc["spec"]["versions"].update(dynamo=dynamo, vllm=vllm, flashinfer="0.7.2.post1", nixl="1.4.1")
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_finds_the_newest_dynamo_and_the_engines_it_pins(env: dict[str, str | None], index: str,
                                                         profile: Path) -> None:
    result = invoke(env, str(profile), "--index-url", index)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        f"index: {index}",
        "stack        current       available  pins",
        "gb300-tuned  dynamo 9.0.0  -> 9.1.0   vllm 9.0.0 -> 9.1.0, flashinfer 0.7.2.post1 -> 0.7.3, "
        "nixl 1.4.1 -> 1.5.0",
        "not shipped by any newer Dynamo release; stackpin follows Dynamo's pins:",
        "  vllm 9.3.0",
    ]
    assert result.stderr == ""


def test_pre_releases_only_with_pre(env: dict[str, str | None], index: str, profile: Path) -> None:
    result = invoke(env, str(profile), "--index-url", index, "--pre", "-o", "json")
    assert result.exit_code == 1, result.output
    (check,) = json.loads(result.stdout)["profiles"]
    assert check["newerDynamo"] == ["9.1.0", "9.2.0rc1"]
    # 9.2.0rc1's vLLM pins a FlashInfer the index does not have: listed with that pin, 9.1.0 offered.
    rc = check["releases"][1]
    assert (rc["dynamo"], rc["prerelease"], rc["installable"]) == ("9.2.0rc1", True, False)
    assert rc["pins"] == {"dynamo": "9.2.0rc1", "vllm": "9.2.0rc1", "flashinfer": "0.7.4rc1", "nixl": "1.5.0"}
    assert rc["missing"] == [{"requirement": "flashinfer-python==0.7.4rc1", "pinnedBy": "vllm 9.2.0rc1"}]
    assert check["available"]["dynamo"] == "9.1.0"
    text = invoke(env, str(profile), "--index-url", index, "--pre")
    assert text.exit_code == 1, text.output
    assert text.stdout.splitlines()[3:6] == [
        "newer Dynamo releases:",
        "  9.1.0     index",
        "  9.2.0rc1  index (pre-release); cannot be installed from the index: vllm 9.2.0rc1 pins "
        f"flashinfer-python==0.7.4rc1, which {index} does not have"]


def test_json_shape(env: dict[str, str | None], index: str, profile: Path) -> None:
    result = invoke(env, str(profile), "--index-url", index, "-o", "json")
    assert result.exit_code == 1, result.output
    available = {"dynamo": "9.1.0", "vllm": "9.1.0", "flashinfer": "0.7.3", "nixl": "1.5.0"}
    assert json.loads(result.stdout) == {"index": index, "pre": False, "feeds": [], "profiles": [{
        "profile": str(profile), "stack": "gb300-tuned",
        "current": {"dynamo": "9.0.0", "vllm": "9.0.0", "flashinfer": "0.7.2.post1", "nixl": "1.4.1"},
        "available": available, "newerDynamo": ["9.1.0"],
        "releases": [{"dynamo": "9.1.0", "prerelease": False, "found": [{"feed": "index", "url": index}],
                      "pins": available, "missing": [], "onIndex": True, "installable": True}],
        "unshipped": {"vllm": ["9.3.0"]}, "upgradeAvailable": True}]}


def test_up_to_date_is_exit_0(env: dict[str, str | None], index: str, profile: Path, tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    current = _profile(stacks, profile.parent / "catalog", dynamo="9.1.0", vllm="9.1.0", name="current")
    result = invoke(env, str(current), "--index-url", index)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:3] == ["stack    current       available   pins",
                                               "current  dynamo 9.1.0  up to date"]
    # A directory of profiles is read as validate reads it: both are checked, one has an upgrade.
    both = invoke(env, str(stacks), str(profile), "--index-url", index, "-o", "json")
    assert both.exit_code == 1
    assert [p["upgradeAvailable"] for p in json.loads(both.stdout)["profiles"]] == [False, True]


def test_find_links_directory_needs_no_server(env: dict[str, str | None], packages: Path, profile: Path) -> None:
    result = invoke(env, str(profile), "--find-links", str(packages), "-o", "json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["index"] == str(packages)
    assert data["profiles"][0]["available"]["dynamo"] == "9.1.0"
    empty = invoke(env, str(profile), "--find-links", str(profile.parent))
    assert (empty.exit_code, empty.stderr.splitlines()[-1].split(" (hint")[0]) == (
        2, f"error: {profile.parent}: has no ai-dynamo releases")
    both = invoke(env, str(profile), "--find-links", str(packages), "--index-url", "http://127.0.0.1:9/simple")
    assert both.exit_code == 2 and "not both" in both.stderr


def test_pip_index_url_and_pip_conf_are_honoured(env: dict[str, str | None], index: str, profile: Path,
                                                  tmp_path: Path) -> None:
    result = invoke({**env, "PIP_INDEX_URL": index}, str(profile), "-o", "json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["index"] == index
    home = Path(str(env["HOME"]))
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(f"[global]\nindex-url = {index}\n")
    user_conf = invoke(env, str(profile), "-o", "json")
    assert user_conf.exit_code == 1, user_conf.output
    assert json.loads(user_conf.stdout)["index"] == index
    # $PIP_CONFIG_FILE is read after the user's file (pip's order), so it wins.
    named = tmp_path / "named.conf"
    named.write_text("[global]\nindex-url = http://127.0.0.1:9/named\n")
    overridden = invoke({**env, "PIP_CONFIG_FILE": str(named)}, str(profile))
    assert overridden.exit_code == 2
    assert overridden.stderr.startswith("error: http://127.0.0.1:9/named/ai-dynamo/: ")
    broken = tmp_path / "broken.conf"
    broken.write_text("index-url = no section\n")
    bad = invoke({**env, "PIP_CONFIG_FILE": str(broken)}, str(profile))
    assert bad.exit_code == 2 and bad.stderr.startswith(f"error: {broken}: not a pip configuration file")


class _Index(BaseHTTPRequestHandler):
    """A PEP 691 JSON index that asks for Basic credentials and offers PEP 658 metadata files."""

    files: dict[str, bytes] = {}
    pages: dict[str, bytes] = {}
    credentials = "pypi-user:" + SECRET
    seen: list[str | None] = []
    mode = "ok"  # or "huge", "malformed", "html-junk"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(self.headers.get("Authorization"))
        expected = "Basic " + base64.b64encode(self.credentials.encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="index"')
            self.end_headers()
            return
        if self.mode == "huge":
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.end_headers()
            chunk = b" " * (1 << 20)
            try:
                for _ in range(64):
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        body = {"malformed": b'{"files": [{"filename": 3}', "html-junk": b"<html><p>nothing <a>here"}.get(self.mode)
        name = self.path.strip("/").rpartition("/")[2]
        if body is None:
            body = self.pages.get(name) or self.files.get(name)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        kind = "text/html" if self.mode == "html-junk" else (
            "application/vnd.pypi.simple.v1+json" if name in self.pages or self.mode == "malformed"
            else "application/octet-stream")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # noqa: ARG002 (quiet)
        return


@pytest.fixture()
def private(packages: Path) -> Iterator[tuple[str, type[_Index]]]:
    """The Dynamo and FlashInfer wheels with PEP 658 metadata (so no wheel is downloaded) and the vLLM
    sdists."""
    files: dict[str, bytes] = {}
    entries: dict[str, list[dict[str, Any]]] = {"ai-dynamo": [], "vllm": [], "flashinfer-python": []}
    for path in sorted(packages.iterdir()):
        data = path.read_bytes()
        project = next(p for p in entries if path.name.startswith(p.replace("-", "_")))
        files[path.name] = data
        entry: dict[str, Any] = {"filename": path.name, "url": f"../../files/{path.name}",
                                 "hashes": {"sha256": hashlib.sha256(data).hexdigest()}}
        if path.name.endswith(".whl"):
            with zipfile.ZipFile(path) as wheel:
                metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")))
            files[path.name + ".metadata"] = metadata
            entry["core-metadata"] = {"sha256": hashlib.sha256(metadata).hexdigest()}
            del files[path.name]  # only the metadata can be read: a download would fail the test
        entries[project].append(entry)

    class Handler(_Index):
        pass

    Handler.files = files
    Handler.pages = {name: json.dumps({"meta": {"api-version": "1.1"}, "files": found}).encode()
                     for name, found in entries.items()}
    Handler.seen = []
    with serve_http(Handler) as url:
        yield f"{url}/simple", Handler


def test_credentials_in_the_url_are_sent_and_never_printed(env: dict[str, str | None], profile: Path,
                                                           private: tuple[str, type[_Index]]) -> None:
    url, handler = private
    with_user = url.replace("http://", f"http://pypi-user:{SECRET}@")
    result = invoke(env, str(profile), "--index-url", with_user, "-o", "json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["profiles"][0]["available"]["dynamo"] == "9.1.0"
    assert data["index"] == url.replace("http://", "http://***@")
    assert SECRET not in result.output and "pypi-user" not in result.output
    assert handler.seen and all(h is not None for h in handler.seen)
    wrong = invoke(env, str(profile), "--index-url", url.replace("http://", "http://pypi-user:wrong@"))
    assert wrong.exit_code == 2
    assert wrong.stderr.splitlines() == [
        f"error: {url}/ai-dynamo/: HTTP 401 (hint: it refused the credentials given)"]
    assert "wrong" not in wrong.output


def test_netrc_credentials(env: dict[str, str | None], profile: Path, private: tuple[str, type[_Index]],
                           tmp_path: Path) -> None:
    url, _ = private
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login pypi-user password {SECRET}\n")
    netrc.chmod(0o600)
    result = invoke({**env, "NETRC": str(netrc)}, str(profile), "--index-url", url)
    assert result.exit_code == 1, result.output
    assert "-> 9.1.0" in result.stdout and SECRET not in result.output
    home_netrc = Path(str(env["HOME"])) / ".netrc"
    home_netrc.write_text(netrc.read_text())
    home_netrc.chmod(0o600)
    assert invoke(env, str(profile), "--index-url", url).exit_code == 1
    missing = invoke({**env, "NETRC": str(tmp_path / "none")}, str(profile), "--index-url", url)
    assert missing.exit_code == 2 and "HTTP 401" in missing.stderr


@pytest.mark.parametrize(("mode", "words"), [
    ("huge", "more than the 16777216 bytes read"),
    ("malformed", "is not a simple repository page (not JSON)"),
    ("html-junk", "has no ai-dynamo releases"),
])
def test_a_hostile_index_page_is_one_line(env: dict[str, str | None], profile: Path,
                                          private: tuple[str, type[_Index]], mode: str, words: str) -> None:
    url, handler = private
    handler.mode = mode
    with_user = url.replace("http://", f"http://pypi-user:{SECRET}@")
    result = invoke(env, str(profile), "--index-url", with_user)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and words in result.stderr, result.stderr
    assert result.stderr.startswith("error: ") and SECRET not in result.output


@pytest.mark.parametrize(("url", "words"), [
    ("http://127.0.0.1:9/simple", "error: http://127.0.0.1:9/simple/ai-dynamo/: "),
    ("ftp://example.invalid/simple", "error: ftp://example.invalid/simple: not an http(s) index URL"),
    ("http://user:pw@127.0.0.1:notaport/simple", "error: http://***@127.0.0.1:notaport/simple: not a valid index URL"),
    ("https:///simple", "error: https:///simple: not an http(s) index URL"),
])
def test_an_unreachable_or_bad_index_is_one_line(env: dict[str, str | None], profile: Path, url: str,
                                                 words: str) -> None:
    result = invoke(env, str(profile), "--index-url", url)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(words), result.stderr
    assert "pw" not in result.stderr
    assert "Traceback" not in result.output


def test_cache_dir_keeps_the_downloaded_wheel(env: dict[str, str | None], index: str, profile: Path,
                                              tmp_path: Path) -> None:
    cache = tmp_path / "wheels"
    result = invoke(env, str(profile), "--index-url", index, "--cache-dir", str(cache))
    assert result.exit_code == 1, result.output
    assert sorted(p.name for p in cache.iterdir()) == ["ai_dynamo-9.1.0-py3-none-any.whl", "vllm-9.1.0.tar.gz"]


def test_credentials_stay_with_the_index_host(env: dict[str, str | None], profile: Path,
                                              private: tuple[str, type[_Index]]) -> None:
    """A file the index links on another origin (a CDN) is fetched without the index's credentials."""
    url, handler = private

    class Cdn(_Index):
        credentials = ""  # anything goes; only what it was sent is looked at

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.seen.append(self.headers.get("Authorization"))
            body = handler.files.get(self.path.rpartition("/")[2], b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    Cdn.seen = []
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), Cdn)
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    try:
        page = json.loads(handler.pages["vllm"])
        for entry in page["files"]:
            entry["url"] = f"http://127.0.0.1:{cdn.server_address[1]}/files/{entry['filename']}"
        handler.pages = {**handler.pages, "vllm": json.dumps(page).encode()}
        with_user = url.replace("http://", f"http://pypi-user:{SECRET}@")
        result = invoke(env, str(profile), "--index-url", with_user)
        assert result.exit_code == 1, result.output
        assert Cdn.seen == [None]  # vllm 9.1.0's sdist, for the FlashInfer it pins
    finally:
        cdn.shutdown()
        cdn.server_close()


def test_html_pages_as_pep_503_and_658_write_them() -> None:
    from stackpin.engines.simple import parse_html

    page = """<html><body>
      <a href="../../files/ai_dynamo-9.1.0-py3-none-any.whl#sha256=ABC" data-dist-info-metadata="sha256=def"
         data-requires-python="&gt;=3.10">ai_dynamo-9.1.0-py3-none-any.whl</a><br>
      <a href="/files/ai_dynamo-9.0.0.tar.gz" data-yanked="">ai_dynamo-9.0.0.tar.gz</a>
      <a href="/x/y/ai_dynamo-9.0.1-py3-none-any.whl" data-core-metadata="true"></a>
      <a>no link</a></body></html>"""
    assert parse_html(page) == [
        {"filename": "ai_dynamo-9.1.0-py3-none-any.whl", "url": "../../files/ai_dynamo-9.1.0-py3-none-any.whl",
         "hashes": {"sha256": "abc"}, "yanked": False, "core-metadata": {"sha256": "def"}},
        {"filename": "ai_dynamo-9.0.0.tar.gz", "url": "/files/ai_dynamo-9.0.0.tar.gz", "hashes": {},
         "yanked": True, "core-metadata": False},
        {"filename": "ai_dynamo-9.0.1-py3-none-any.whl", "url": "/x/y/ai_dynamo-9.0.1-py3-none-any.whl",
         "hashes": {}, "yanked": False, "core-metadata": True},
    ]
