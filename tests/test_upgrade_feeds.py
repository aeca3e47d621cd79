"""`stackpin upgrade check --feed`: Dynamo releases from feeds besides the package index, against real local
services: GitHub's releases API as JSON pages with Link headers (http.server on loopback), a real CNCF
distribution registry with tags pushed (tests/registry.py), and a package index (pypiserver, or a directory)
serving stand-in packages (devkit/enginepkgs.py). No test reaches the internet."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit import enginepkgs as pkgs
from devkit.pypiserver import serve_packages
from stackpin.cli.main import main
from stackpin.lock.oci.client import RegistryClient
from tests.helpers import serve_http
from tests.registry import AuthRegistry, RunningRegistry

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"
REPO = "ai-dynamo/dynamo"
TOKEN = "ghp-test-token-123"


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ai-dynamo 9.0.0, 9.1.0 and 9.2.0 with the vLLM of the same number; vLLM 9.1.0 pins FlashInfer 0.7.3
    (on the index), vLLM 9.2.0 pins FlashInfer 0.7.5 (not on it)."""
    return make_packages(tmp_path_factory.mktemp("packages"))


def make_packages(root: Path) -> Path:
    """The stand-in releases of `packages` in `root` (tests/docservices.py serves the same for the docs)."""
    pkgs.dynamo_wheel(root, "9.0.0", vllm="9.0.0")
    pkgs.dynamo_wheel(root, "9.1.0", vllm="9.1.0", nixl="1.5.0")
    pkgs.dynamo_wheel(root, "9.2.0", vllm="9.2.0", nixl="1.5.0")
    pkgs.vllm_sdist(root, "9.0.0")
    pkgs.vllm_sdist(root, "9.1.0", requires=pkgs.vllm_requires(flashinfer="0.7.3"))
    pkgs.vllm_sdist(root, "9.2.0", requires=pkgs.vllm_requires(flashinfer="0.7.5"))
    pkgs.flashinfer_wheel(root, "0.7.3")
    return root


@pytest.fixture(scope="module")
def index(packages: Path) -> Iterator[str]:
    with serve_packages(packages) as url:
        yield url


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory, packages: Path) -> Path:
    """gb300-tuned on Dynamo 9.0.0 / vLLM 9.0.0, with a catalog of those releases."""
    root = tmp_path_factory.mktemp("stack")
    catalog = root / "catalog"
    for name in ("ai_dynamo-9.0.0-py3-none-any.whl", "vllm-9.0.0.tar.gz"):
        added = CliRunner().invoke(main, ["engines", "add", "--from", str(packages / name), "--catalog", str(catalog)])
        assert added.exit_code == 0, added.output
    doc: dict[str, Any] = yaml.safe_load(PROFILE.read_text())
    doc["spec"]["catalogPath"] = [str(catalog)]
    doc["spec"]["versions"].update(dynamo="9.0.0", vllm="9.0.0", flashinfer="0.7.2.post1", nixl="1.4.1")
    path = root / "gb300-tuned.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str | None]:
    """No pip configuration, docker config, GitHub settings or cache of the machine running the tests."""
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "PIP_INDEX_URL": None, "PIP_CONFIG_FILE": None, "XDG_CONFIG_HOME": None,
            "XDG_CONFIG_DIRS": str(tmp_path / "no-xdg"), "NETRC": None, "STACKPIN_CATALOG_PATH": "",
            "STACKPIN_CACHE_DIR": str(tmp_path / "cache"), "DOCKER_CONFIG": str(tmp_path / "docker"),
            "GITHUB_TOKEN": None, "GITHUB_API_URL": None, "STACKPIN_UPGRADE_FEEDS": None}


def invoke(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(main, ["upgrade", "check", *args], env=env)


def _release(tag: str, *, draft: bool = False, prerelease: bool = False) -> dict[str, Any]:
    """One release as GitHub's REST API lists it (the fields stackpin reads, and some it does not)."""
    return {"url": f"https://api.github.com/repos/{REPO}/releases/1", "id": 1, "node_id": "RE_x", "name": tag,
            "tag_name": tag, "target_commitish": "main", "draft": draft, "prerelease": prerelease,
            "created_at": "2026-01-02T03:04:05Z", "published_at": None if draft else "2026-01-02T03:04:05Z",
            "html_url": f"https://github.com/{REPO}/releases/tag/{tag}", "body": "notes " * 50, "assets": []}


RELEASES = [  # newest first, as the API lists them
    _release("v9.5.0", draft=True), _release("v9.4.0rc1", prerelease=True), _release("nightly", prerelease=True),
    _release("v9.3.1", prerelease=True), _release("v9.3.0"), _release("v9.2.0"), _release("v9.1.0"),
    _release("v9.0.0"),
]


class GitHub(BaseHTTPRequestHandler):
    """`GET /repos/OWNER/REPO/releases?per_page=&page=`: the releases in pages of 3 with GitHub's Link
    header, or a hostile answer (`mode`)."""

    releases: list[dict[str, Any]] = RELEASES
    mode = "ok"
    seen: list[tuple[str, str | None]] = []
    next_origin: str | None = None  # the last page's Link points here (another origin), when set

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.path, self.headers.get("Authorization")))
        parts = urlsplit(self.path)
        if parts.path != f"/repos/{REPO}/releases":
            return self._send(404, b'{"message": "Not Found"}')
        if self.mode == "rate-limited":
            return self._send(403, b'{"message": "API rate limit exceeded"}', {"X-RateLimit-Remaining": "0"})
        if self.mode == "bad-json":
            return self._send(200, b'[{"tag_name": "v9.3.0", ')
        if self.mode == "not-a-list":
            return self._send(200, b'{"message": "Moved"}')
        if self.mode == "loop":
            return self._send(200, b"[]", {"Link": f'<{self.path}>; rel="next"'})
        if self.mode == "huge":
            return self._stream(b"[" + b" " * (1 << 20), 17, 0.0)
        if self.mode == "slow":
            return self._stream(b" ", 100, 0.3)
        query = parse_qs(parts.query)
        page, size = int(query.get("page", ["1"])[0]), 3
        chunk = self.releases[(page - 1) * size:page * size]
        headers = {}
        base = f"http://{self.headers['Host']}"
        if page * size < len(self.releases):
            headers["Link"] = (f'<{base}/repos/{REPO}/releases?per_page=100&page={page + 1}>; rel="next", '
                               f'<{base}/repos/{REPO}/releases?per_page=100&page=1>; rel="first"')
        elif self.next_origin and page == (len(self.releases) + size - 1) // size:
            headers["Link"] = f'<{self.next_origin}/repos/{REPO}/releases?page=99>; rel="next"'
        self._send(200, json.dumps(chunk).encode(), headers)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, chunk: bytes, times: int, pause: float) -> None:
        """No Content-Length: only reading the body can find how long it is, or how slow."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            for _ in range(times):
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: object) -> None:  # noqa: ARG002 (quiet)
        return


@pytest.fixture()
def github() -> Iterator[tuple[str, type[GitHub]]]:
    class Handler(GitHub):
        pass

    Handler.seen = []
    with serve_http(Handler) as url:
        yield url, Handler


@pytest.fixture()
def runtime(registry: RunningRegistry, request: pytest.FixtureRequest) -> str:
    """A container repository on the real registry with release tags, a tag with a suffix, and `latest`."""
    repository = f"{registry.host}/nvidia/ai-dynamo/{request.node.name.replace('_', '-')[:40].strip('-')}"
    with RegistryClient() as client:
        for tag in ("9.1.0", "9.3.0", "9.3.0-cuda13", "latest"):
            client.push_artifact(f"{repository}:{tag}", [(tag.encode(), "text/plain", None)],
                                 "application/vnd.example.runtime")
    return repository


def test_feeds_find_releases_the_index_does_not_have(env: dict[str, str | None], index: str, profile: Path,
                                                    github: tuple[str, type[GitHub]], runtime: str) -> None:
    api, handler = github
    result = invoke(env, str(profile), "--index-url", index, "--feed", f"github:{REPO}", "--feed",
                    f"registry:{runtime}", "--github-api", api)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        f"index: {index}",
        f"feed github:{REPO} ({api}/repos/{REPO}/releases): 6 releases (2 pre-releases); skipped: 1 draft, "
        "1 tag that is not a version (nightly)",
        f"feed registry:{runtime}: 2 releases; skipped: 2 tags that are not versions (9.3.0-cuda13, latest)",
        "stack        current       available  pins",
        "gb300-tuned  dynamo 9.0.0  -> 9.1.0   vllm 9.0.0 -> 9.1.0, flashinfer 0.7.2.post1 -> 0.7.3, "
        "nixl 1.4.1 -> 1.5.0",
        "newer Dynamo releases:",
        f"  9.1.0  index, github:{REPO}, registry:{runtime}",
        f"  9.2.0  index, github:{REPO}; cannot be installed from the index: vllm 9.2.0 pins "
        f"flashinfer-python==0.7.5, which {index} does not have",
        f"  9.3.0  github:{REPO}, registry:{runtime}; not on the index: cannot be proposed until {index} has "
        f"ai-dynamo 9.3.0 (see https://github.com/{REPO}/releases/tag/v9.3.0)",
    ]
    assert result.stderr == ""
    # Pages of 3 read by the Link header, nothing sent without a token.
    assert [p for p, _ in handler.seen] == [f"/repos/{REPO}/releases?per_page=100",
                                            f"/repos/{REPO}/releases?per_page=100&page=2",
                                            f"/repos/{REPO}/releases?per_page=100&page=3"]
    assert {auth for _, auth in handler.seen} == {None}


def test_feed_json_says_where_each_release_is(env: dict[str, str | None], index: str, profile: Path,
                                             github: tuple[str, type[GitHub]], runtime: str) -> None:
    api, _ = github
    result = invoke({**env, "GITHUB_API_URL": api, "STACKPIN_UPGRADE_FEEDS": f"github:{REPO} registry:{runtime}"},
                    str(profile), "--index-url", index, "--pre", "-o", "json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert [f["feed"] for f in data["feeds"]] == [f"github:{REPO}", f"registry:{runtime}"]
    assert data["feeds"][1]["releases"] == [
        {"version": "9.1.0", "tag": "9.1.0", "prerelease": False, "url": f"{runtime}:9.1.0"},
        {"version": "9.3.0", "tag": "9.3.0", "prerelease": False, "url": f"{runtime}:9.3.0"}]
    (check,) = data["profiles"]
    by_version = {c["dynamo"]: c for c in check["releases"]}
    assert list(by_version) == ["9.1.0", "9.2.0", "9.3.0", "9.3.1", "9.4.0rc1"]
    assert by_version["9.3.0"]["found"] == [
        {"feed": f"github:{REPO}", "url": f"https://github.com/{REPO}/releases/tag/v9.3.0"},
        {"feed": f"registry:{runtime}", "url": f"{runtime}:9.3.0"}]
    assert (by_version["9.3.0"]["onIndex"], by_version["9.3.0"]["installable"], by_version["9.3.0"]["pins"]) == (
        False, False, None)
    # GitHub flags 9.3.1 a pre-release although its tag is a final version: shown only with --pre, as one.
    assert by_version["9.3.1"]["prerelease"] is True and by_version["9.4.0rc1"]["prerelease"] is True
    assert by_version["9.2.0"]["missing"] == [{"requirement": "flashinfer-python==0.7.5", "pinnedBy": "vllm 9.2.0"}]
    assert check["available"]["dynamo"] == "9.1.0" and check["newerDynamo"] == ["9.1.0", "9.2.0"]


def test_only_uninstallable_or_feed_releases_is_exit_0(env: dict[str, str | None], packages: Path, profile: Path,
                                                       github: tuple[str, type[GitHub]], tmp_path: Path) -> None:
    """Nothing the index can install: nothing to propose (exit 0), and the table does not say up to date."""
    api, _ = github
    partial = tmp_path / "partial"
    partial.mkdir()
    for path in packages.iterdir():
        if path.name.startswith(("ai_dynamo-9.0.0", "ai_dynamo-9.2.0", "vllm-9.2.0")):
            (partial / path.name).write_bytes(path.read_bytes())
    result = invoke(env, str(profile), "--find-links", str(partial), "--feed", f"github:{REPO}", "--github-api", api)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[2:4] == ["stack        current       available         pins",
                          "gb300-tuned  dynamo 9.0.0  none installable"]
    assert f"  9.1.0  github:{REPO}; not on the index: cannot be proposed until {partial} has ai-dynamo 9.1.0" \
           f" (see https://github.com/{REPO}/releases/tag/v9.1.0)" in lines
    assert (f"  9.2.0  index, github:{REPO}; cannot be installed from the index: vllm 9.2.0 pins "
            f"flashinfer-python==0.7.5, which {partial} does not have") in lines


def test_github_token_goes_to_the_api_origin_only(env: dict[str, str | None], packages: Path, profile: Path,
                                                  github: tuple[str, type[GitHub]]) -> None:
    api, handler = github

    class Elsewhere(GitHub):
        releases: list[dict[str, Any]] = []

    Elsewhere.seen = []
    with serve_http(Elsewhere) as other:
        handler.next_origin = other
        result = invoke({**env, "GITHUB_TOKEN": TOKEN}, str(profile), "--find-links", str(packages),
                        "--feed", f"github:{REPO}", "--github-api", api)
    assert result.exit_code == 1, result.output
    assert {auth for _, auth in handler.seen} == {f"Bearer {TOKEN}"}
    assert Elsewhere.seen == [(f"/repos/{REPO}/releases?page=99", None)]
    assert TOKEN not in result.output


@pytest.mark.parametrize(("mode", "words"), [
    ("huge", "a page: more than the 16777216 bytes read"),
    ("slow", "no complete answer within 2s"),
    ("bad-json", "the answer is not JSON"),
    ("not-a-list", "the answer is not a JSON list of releases"),
    ("loop", "the next page links one already read"),
    ("rate-limited", "HTTP 403, GitHub's API rate limit is spent (hint: set $GITHUB_TOKEN"),
])
def test_a_hostile_github_answer_is_one_line(env: dict[str, str | None], packages: Path, profile: Path,
                                             github: tuple[str, type[GitHub]], monkeypatch: pytest.MonkeyPatch,
                                             mode: str, words: str) -> None:
    from stackpin.upgrade import github as reader

    monkeypatch.setattr(reader, "REQUEST_SECONDS", 2.0)  # the slow answer sends a byte every 0.3 s, for 30 s
    api, handler = github
    handler.mode = mode
    started = time.monotonic()
    result = invoke(env, str(profile), "--find-links", str(packages), "--feed", f"github:{REPO}", "--github-api", api)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: feed github:{REPO}: github {REPO} ({api}): "), result.stderr
    assert len(result.stderr.splitlines()) == 1 and words in result.stderr, result.stderr
    assert "Traceback" not in result.output and time.monotonic() - started < 20


def test_an_unknown_repository_or_bad_feed_is_one_line(env: dict[str, str | None], packages: Path, profile: Path,
                                                        github: tuple[str, type[GitHub]]) -> None:
    api, _ = github
    missing = invoke(env, str(profile), "--find-links", str(packages), "--feed", "github:ai-dynamo/nope",
                     "--github-api", api)
    assert missing.exit_code == 2
    assert missing.stderr.splitlines() == [
        f"error: feed github:ai-dynamo/nope: github ai-dynamo/nope ({api}): HTTP 404, no such repository "
        "(hint: is the repository private? set $GITHUB_TOKEN)"]
    for feed, words in (("gitlab:a/b", "--feed gitlab:a/b: not a feed (hint: give github:OWNER/REPO"),
                        ("github:ai-dynamo", "--feed github:ai-dynamo: not a feed"),
                        ("registry:nvcr.io/nvidia/x:1.0",
                         "--feed registry:nvcr.io/nvidia/x:1.0: give the repository as HOST/REPOSITORY, without a tag"),
                        ("registry:NVCR/Bad Name", "--feed registry:NVCR/Bad Name: invalid image reference")):
        bad = invoke(env, str(profile), "--find-links", str(packages), "--feed", feed)
        assert bad.exit_code == 2 and len(bad.stderr.splitlines()) == 1, bad.output
        assert bad.stderr.startswith(f"error: {words}"), bad.stderr
    api_bad = invoke(env, str(profile), "--find-links", str(packages), "--feed", f"github:{REPO}",
                     "--github-api", "ftp://example.invalid")
    assert api_bad.exit_code == 2 and "not an http(s) API URL" in api_bad.stderr


def test_a_registry_feed_that_is_missing_is_one_line(env: dict[str, str | None], packages: Path, profile: Path,
                                                     registry: RunningRegistry) -> None:
    result = invoke(env, str(profile), "--find-links", str(packages), "--feed",
                    f"registry:{registry.host}/nvidia/no-such-runtime")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: feed registry:{registry.host}/nvidia/no-such-runtime: repository nvidia/no-such-runtime not "
        f"found in registry {registry.host}"]


class PagedRegistry(BaseHTTPRequestHandler):
    """`GET /v2/<name>/tags/list?n=&last=`: the distribution spec's pagination (which the registry binary in
    tests/registry.py does not do: it answers in one page), with a Link header; or a hostile answer."""

    tags = sorted(["9.0.0", "9.1.0", "9.2.0", "9.3.0", "latest", "nightly-2026-01-02"])
    mode = "ok"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        if parts.path == "/v2/":
            return self._send(200, b"{}")
        if self.mode == "not-json":
            return self._send(200, b"<html>maintenance</html>")
        if self.mode == "huge":
            return self._send(200, json.dumps({"name": "x", "tags": ["9.0.0" * 10] * 200_000}).encode())
        query = parse_qs(parts.query)
        n, last = int(query.get("n", ["100"])[0]), query.get("last", [""])[0]
        after = [t for t in self.tags if t > last][:min(n, 2)]  # a registry may return fewer than n
        headers = {}
        if after and after[-1] != self.tags[-1]:
            headers["Link"] = f'<{parts.path}?n={n}&last={after[-1]}>; rel="next"'
        self._send(200, json.dumps({"name": parts.path[4:-10], "tags": after}).encode(), headers)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # noqa: ARG002 (quiet)
        return


def test_list_tags_follows_link_pages_and_bounds_a_hostile_registry() -> None:
    from stackpin.errors import ResolveError

    class Handler(PagedRegistry):
        pass

    with serve_http(Handler) as url, RegistryClient(retries=0) as client:
        host = url.removeprefix("http://")
        assert client.list_tags(f"{host}/nvidia/ai-dynamo/vllm-runtime") == PagedRegistry.tags
        for mode, words in (("not-json", 'are not a JSON {"tags": [...]} list'),
                            ("huge", "more than the 4194304 read")):
            Handler.mode = mode
            with pytest.raises(ResolveError, match=words.replace("[", r"\[").replace("]", r"\]")):
                client.list_tags(f"{host}/nvidia/ai-dynamo/vllm-runtime")
        Handler.mode = "ok"
        with pytest.raises(ResolveError, match="more than 2 pages of tags"):
            client.list_tags(f"{host}/nvidia/ai-dynamo/vllm-runtime", max_pages=2)


def test_list_tags_through_token_auth(auth_registry: AuthRegistry, tmp_path: Path) -> None:
    """A registry that asks for a Bearer token: the client's token flow, with the docker config's credentials."""
    from stackpin.errors import ResolveError

    config = auth_registry.docker_config(tmp_path)
    repository = f"{auth_registry.host}/nvidia/ai-dynamo/vllm-runtime-auth"
    with RegistryClient(docker_config=config) as client:
        for tag in ("9.1.0", "9.2.0"):
            client.push_artifact(f"{repository}:{tag}", [(tag.encode(), "text/plain", None)], "application/vnd.example")
        assert sorted(client.list_tags(repository)) == ["9.1.0", "9.2.0"]
    with RegistryClient(docker_config=tmp_path / "none.json") as anonymous, \
            pytest.raises(ResolveError, match="not authorized"):
        anonymous.list_tags(repository)


def test_propose_without_to_skips_what_the_index_cannot_install(packages: Path, profile: Path, tmp_path: Path,
                                                                env: dict[str, str | None]) -> None:
    """propose offers what check offers: a newest release whose FlashInfer pin the index lacks is not it."""
    partial = tmp_path / "partial"
    partial.mkdir()
    for path in packages.iterdir():
        if path.name.startswith(("ai_dynamo-9.0.0", "ai_dynamo-9.2.0", "vllm-9.2.0")):
            (partial / path.name).write_bytes(path.read_bytes())
    result = CliRunner().invoke(main, ["upgrade", "propose", str(profile), "--find-links", str(partial),
                                       "--out", str(tmp_path / "proposal")], env=env)
    assert (result.exit_code, result.stderr.splitlines()) == (2, [
        f"error: {partial}: no Dynamo release newer than 9.0.0 whose pins it has: Dynamo 9.2.0: vllm 9.2.0 pins "
        "flashinfer-python==0.7.5, which it does not have (hint: mirror the pinned packages to the index, then "
        "propose again)"]), result.output
    assert not (tmp_path / "proposal").exists() and sorted(p.name for p in profile.parent.glob("*.yaml")) == [
        "gb300-tuned.yaml"]
