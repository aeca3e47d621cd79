"""`stackpin engines add|diff|list` as a site uses them: releases added from files or an index into a
catalog directory on STACKPIN_CATALOG_PATH, found there before the bundled catalog, compared before
an upgrade. No test here reaches the network (the index is a local server)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit import enginepkgs as pkgs
from stackpin.catalog import load_catalog
from stackpin.catalog.flags import vllm_catalog
from stackpin.cli.main import main
from stackpin.engines.index import choose
from stackpin.engines.store import set_pin
from tests.helpers import serve_http

BUNDLED_VERSIONS = Path(__file__).resolve().parent.parent / "stackpin" / "catalog" / "versions.yaml"


def invoke(*args: str, site: Path | None = None) -> Result:
    env = {"STACKPIN_CATALOG_PATH": str(site) if site else ""}
    return CliRunner().invoke(main, list(args), env=env)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("packages")
    return {"vllm": pkgs.vllm_sdist(root), "newer": pkgs.vllm_sdist(root, "9.1.0", newer=True),
            "dynamo": pkgs.dynamo_wheel(root), "flashinfer": pkgs.flashinfer_wheel(root)}


def test_add_from_a_file_writes_the_catalog_and_the_pins(tmp_path: Path, built: dict[str, Path]) -> None:
    site = tmp_path / "site"
    result = invoke("engines", "add", "--from", str(built["vllm"]), "--catalog", str(site))
    assert result.exit_code == 0, result.output
    sha = hashlib.sha256(built["vllm"].read_bytes()).hexdigest()
    assert result.stdout.splitlines() == [
        "added vllm 9.0.0 from vllm-9.0.0.tar.gz (file)",
        f"  sha256   {sha}",
        f"  catalog  {site}/engines/vllm-9.0.0.json: 23 options, 41 option strings (29 registered, 12 generated "
        "negatives), 10 deprecated, 4 env vars, 3 config classes",
        f"  pins     {site}/versions.yaml: 9.0.0 -> flashinfer 0.7.2.post1, torch 2.14.0",
    ]
    catalog = json.loads((site / "engines" / "vllm-9.0.0.json").read_text())
    assert catalog["source"] == {"package": "vllm-9.0.0.tar.gz", "sha256": sha,
                                 "files_parsed": catalog["source"]["files_parsed"]}
    assert "--disable-prefix-caching" in catalog["option_strings"]
    versions = yaml.safe_load((site / "versions.yaml").read_text())
    assert versions["vllm"] == {"9.0.0": {"flashinfer": "0.7.2.post1", "torch": "2.14.0"}}
    assert "source" in versions
    # Adding the same package again changes nothing, byte for byte.
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    again = invoke("engines", "add", "vllm==9.0.0", "--from", str(built["vllm"]), "--catalog", str(site), "-o", "json")
    assert again.exit_code == 0, again.output
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    data = json.loads(again.stdout)
    assert (data["engine"], data["version"], data["sha256"], data["downloaded"]) == ("vllm", "9.0.0", sha, False)
    assert data["counts"]["generated"] == 12 and data["pin"] == {"flashinfer": "0.7.2.post1", "torch": "2.14.0"}


def test_a_site_catalog_is_searched_before_the_bundled_one(tmp_path: Path, built: dict[str, Path],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    for name in ("vllm", "dynamo", "flashinfer"):
        assert invoke("engines", "add", "--from", str(built[name]), site=site).exit_code == 0
    assert vllm_catalog("9.0.0") is None  # not on the search path yet
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))
    catalog = vllm_catalog("9.0.0")
    assert catalog is not None and catalog.accepts("--disable-prefix-caching")
    pins = load_catalog().versions
    assert pins.dynamo["9.0.0"].vllm == "9.0.0" and pins.dynamo["9.0.0"].crd == "v1beta1"
    assert pins.vllm["9.0.0"].flashinfer == "0.7.2.post1"
    assert "1.6.1" in pins.dynamo and pins.vllm["0.33.0"].torch == "2.14.0"  # the bundled pins stay
    listed = json.loads(invoke("engines", "list", "-o", "json", site=site).stdout)
    mine = [(e["engine"], e["version"]) for e in listed if e["where"] == str(site)]
    assert mine == [("dynamo", "9.0.0"), ("flashinfer", "9.0.0"), ("vllm", "9.0.0")]
    assert ("vllm", "0.33.0", "bundled") in [(e["engine"], e["version"], e["where"]) for e in listed]


def test_a_site_release_shadows_the_bundled_one_of_the_same_version(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    shadow = pkgs.vllm_sdist(tmp_path, "0.33.0", inverse_action=False)
    assert invoke("engines", "add", "--from", str(shadow), "--catalog", str(site)).exit_code == 0
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))
    catalog = vllm_catalog("0.33.0")
    assert catalog is not None and not catalog.accepts("--disable-prefix-caching")
    listed = invoke("engines", "list", site=site).stdout
    assert "bundled (shadowed)" in listed and f"vllm        0.33.0        {site}" in listed


def test_add_refuses_what_it_cannot_add_in_one_line(tmp_path: Path, built: dict[str, Path]) -> None:
    cases = [
        (("engines", "add", "vllm==9.9.9", "--from", str(built["vllm"]), "--catalog", str(tmp_path)),
         "error: vllm-9.0.0.tar.gz is vllm 9.0.0, not vllm 9.9.9"),
        (("engines", "add", "torch==2.14.0", "--catalog", str(tmp_path)),
         "error: 'torch==2.14.0': stackpin catalogs vllm==X, ai-dynamo==X, flashinfer-python==X, sglang==X"),
        (("engines", "add", "vllm>=0.33", "--catalog", str(tmp_path)),
         "error: 'vllm>=0.33': expected NAME==VERSION, e.g. vllm==0.33.0"),
        (("engines", "add", "--from", str(built["vllm"])),
         "error: no catalog directory to write to (hint: give --catalog DIR or set STACKPIN_CATALOG_PATH)"),
        (("engines", "add", "--from", str(tmp_path / "missing.whl"), "--catalog", str(tmp_path)),
         f"error: {tmp_path / 'missing.whl'}: no such file"),
        (("engines", "add", "--catalog", str(tmp_path)),
         "error: name a release (vllm==X, ai-dynamo==X, flashinfer-python==X, sglang==X) or give --from FILE"),
    ]
    for args, line in cases:
        result = invoke(*args)
        assert (result.exit_code, result.stderr.splitlines(), result.stdout) == (2, [line], ""), args
    assert not (tmp_path / "engines").exists()


def test_add_edits_a_commented_versions_file_in_place(tmp_path: Path, built: dict[str, Path]) -> None:
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(BUNDLED_VERSIONS, site / "versions.yaml")
    assert invoke("engines", "add", "--from", str(built["dynamo"]), "--catalog", str(site)).exit_code == 0
    text = (site / "versions.yaml").read_text()
    original = BUNDLED_VERSIONS.read_text()
    # One line more, after 1.6.1 as PEP 440 orders it; comments and every other line as they were.
    assert text.splitlines() == [*original.splitlines()[:original.splitlines().index(
                                     '  "1.6.1": {vllm: 0.31.0, nixl: 1.4.1, crd: v1beta1, sglang: 0.5.21, '
                                     'sglang_nixl: 1.5.0}') + 1],
                                 '  "9.0.0": {vllm: 9.0.0, nixl: 1.4.1, crd: v1beta1, sglang: 0.5.21}',
                                 *original.splitlines()[original.splitlines().index("vllm:"):]]


def test_set_pin_replaces_inserts_in_order_and_quotes_what_yaml_would_misread() -> None:
    text = 'vllm:\n  "0.28.0": {flashinfer: 0.6.16.post3, torch: 2.13.0}\n  "0.33.0": {flashinfer: 1, torch: 2}\n'
    out = set_pin(text, "vllm", "0.31.0", {"flashinfer": "0.7.0.post1", "torch": "2.13"})
    assert out.splitlines()[2] == '  "0.31.0": {flashinfer: 0.7.0.post1, torch: "2.13"}'
    assert yaml.safe_load(out)["vllm"]["0.31.0"] == {"flashinfer": "0.7.0.post1", "torch": "2.13"}
    replaced = set_pin(out, "vllm", "0.33.0", {"flashinfer": "0.7.2.post1", "torch": "2.14.0"})
    assert replaced.splitlines()[3] == '  "0.33.0": {flashinfer: 0.7.2.post1, torch: 2.14.0}'
    assert len(replaced.splitlines()) == 4
    added = set_pin("source: x\n", "dynamo", "1.7.0", {"vllm": "0.33.0", "nixl": "1.5.0", "crd": "v1beta1"})
    assert yaml.safe_load(added) == {"dynamo": {"1.7.0": {"vllm": "0.33.0", "nixl": "1.5.0", "crd": "v1beta1"}},
                                     "source": "x"}


class _Index(BaseHTTPRequestHandler):
    """A PEP 691 index with one project: /simple/vllm/ and the file it lists."""

    files: dict[str, bytes] = {}
    page: bytes = b""

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        body = self.page if self.path == "/simple/vllm/" else self.files.get(self.path.rsplit("/", 1)[-1])
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # noqa: ARG002 (quiet)
        return


@pytest.fixture()
def index(built: dict[str, Path]) -> Iterator[tuple[str, type[_Index]]]:
    data = built["vllm"].read_bytes()

    class Handler(_Index):
        files = {built["vllm"].name: data}
        page = json.dumps({"files": [
            {"filename": built["vllm"].name, "url": f"../../files/{built['vllm'].name}",
             "hashes": {"sha256": hashlib.sha256(data).hexdigest()}},
            {"filename": "vllm-9.0.0-cp38-abi3-manylinux_2_28_aarch64.whl", "url": "x", "hashes": {"sha256": "0" * 64}},
        ]}).encode()

    with serve_http(Handler) as url:
        yield f"{url}/simple", Handler


def test_add_downloads_from_an_index_and_checks_the_sha256(tmp_path: Path, index: tuple[str, type[_Index]]) -> None:
    url, handler = index
    cache = tmp_path / "cache"
    result = invoke("engines", "add", "vllm==9.0.0", "--index-url", url, "--catalog", str(tmp_path / "site"),
                    "--cache-dir", str(cache), "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["downloaded"] is True
    assert result.stderr == "downloading vllm==9.0.0 ...\n"
    assert (cache / "vllm-9.0.0.tar.gz").is_file()
    # A file that is not what the index says is refused, and not kept.
    handler.files = {name: data + b"tampered" for name, data in handler.files.items()}
    (cache / "vllm-9.0.0.tar.gz").unlink()
    bad = invoke("engines", "add", "vllm==9.0.0", "--index-url", url, "--catalog", str(tmp_path / "other"),
                 "--cache-dir", str(cache))
    assert bad.exit_code == 2
    assert bad.stderr.splitlines()[-1].startswith("error: vllm-9.0.0.tar.gz: sha256 ")
    assert not list(cache.iterdir()) and not (tmp_path / "other").exists()
    missing = invoke("engines", "add", "vllm==7.0.0", "--index-url", url, "--catalog", str(tmp_path / "other"))
    assert missing.exit_code == 2
    assert missing.stderr.splitlines()[-1] == "error: vllm==7.0.0: no wheel or sdist with a sha256 on the index"


def test_choose_prefers_a_pure_wheel_then_the_sdist() -> None:
    def entry(name: str) -> dict[str, object]:
        return {"filename": name, "url": name, "hashes": {"sha256": "a" * 64}}

    files = [entry("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"), entry("vllm-0.33.0.tar.gz"),
             entry("vllm-0.3.0.tar.gz")]
    assert choose("vllm", "0.33.0", files).filename == "vllm-0.33.0.tar.gz"
    assert choose("vllm", "0.33.0", files[:1]).filename.endswith("x86_64.whl")
    dynamo = [entry("ai_dynamo-1.6.1.tar.gz"), entry("ai_dynamo-1.6.1-py3-none-any.whl")]
    assert choose("ai-dynamo", "1.6.1", dynamo).filename == "ai_dynamo-1.6.1-py3-none-any.whl"


def test_diff_of_two_releases(tmp_path: Path, built: dict[str, Path]) -> None:
    site = tmp_path / "site"
    for name in ("vllm", "newer"):
        assert invoke("engines", "add", "--from", str(built[name]), "--catalog", str(site)).exit_code == 0
    result = invoke("engines", "diff", "vllm", "9.0.0", "9.1.0", site=site)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "vLLM 9.0.0 -> 9.1.0",
        "flags: 1 added, 0 removed, 1 changed",
        "  + --kv-offload-gib (float; default 0.0)",
        "  ~ --block-size: default 16 -> 32",
        "option strings: 1 newly accepted, 0 no longer accepted",
        "speculative methods: +dspark",
        "env vars: 1 added, 0 removed, 0 changed",
        "  +VLLM_NEW_KNOB",
        "config fields (of JSON options):",
        "  ~ SpeculativeConfig.method: choices +dspark",
    ]
    data = json.loads(invoke("engines", "diff", "vllm", "9.0.0", "9.1.0", "-o", "json", site=site).stdout)
    assert data["speculativeMethods"] == {"added": ["dspark"], "removed": []}
    assert data["entryPoints"]["vllm"]["changed"] == {"--block-size": [{"what": "default", "old": 16, "new": 32}]}
    assert data["envVars"]["added"] == ["VLLM_NEW_KNOB"]


def test_diff_of_the_shipped_vllm_releases() -> None:
    result = invoke("engines", "diff", "vllm", "0.31.0", "0.33.0", "-o", "json")
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)["entryPoints"]["vllm"]
    added = set(entry["optionStrings"]["added"])
    assert {"--disable-prefix-caching", "--disable-chunked-prefill", "--enable-cascade-attn",
            "--disable-log-requests"} <= added
    assert entry["deprecated"]["--no-enable-prefix-caching"] == "--disable-prefix-caching"
    assert entry["deprecated"]["--disable-cascade-attn"] is None
    text = invoke("engines", "diff", "vllm", "0.31.0", "0.33.0").stdout
    assert "negative forms: 32 boolean options also answer to" in text
    assert "  ~ flashinfer-python: ==0.7.0.post1 -> ==0.7.2.post1" in text


def test_diff_names_what_it_cannot_compare() -> None:
    missing = invoke("engines", "diff", "vllm", "0.31.0", "0.34.0")
    assert (missing.exit_code, missing.stderr) == (
        2, "error: no catalog of vLLM 0.34.0 in bundled (hint: stackpin engines add vllm==0.34.0)\n")
    other = invoke("engines", "diff", "trtllm", "0.5.0", "0.5.1")
    assert (other.exit_code, other.stderr) == (2, "error: 'trtllm': expected vllm, sglang, dynamo or flashinfer\n")
    bad = invoke("engines", "diff", "dynamo", "1.6", "one")
    assert (bad.exit_code, bad.stderr) == (2, "error: 'one' is not a PEP 440 version\n")


def test_a_broken_site_catalog_is_one_line_naming_the_file(tmp_path: Path) -> None:
    profile = str(Path(__file__).resolve().parent.parent / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml")
    site = tmp_path / "site"
    (site / "engines").mkdir(parents=True)
    (site / "versions.yaml").write_text('vllm:\n  "0.31.0": {flashinfer: 0.7.0.post1}\n')
    result = invoke("validate", profile, site=site)
    assert (result.exit_code, result.stderr) == (
        2, f"error: {site / 'versions.yaml'}:2:3: vllm.0.31.0.torch: required field is missing\n")
    (site / "versions.yaml").write_text('removed_env:\n  VLLM_X: {removed_in: "0.x", use: y}\n')
    result = invoke("validate", profile, site=site)
    assert (result.exit_code, result.stderr) == (
        2, f"error: {site / 'versions.yaml'}:2:12: removed_env.VLLM_X.removed_in: '0.x' is not a PEP 440 version\n")
    (site / "versions.yaml").write_text("vllm: [\n")
    result = invoke("validate", profile, site=site)
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {site / 'versions.yaml'}: not YAML")
    # A directory of its own: the process read the bundled vLLM catalog above, cached by search path.
    site = tmp_path / "site-engines"
    (site / "engines").mkdir(parents=True)
    (site / "engines" / "vllm-0.31.0.json").write_text('{"engine": "vllm", "version": "0.31.0"}')
    result = invoke("validate", profile, site=site)
    assert (result.exit_code, result.stderr) == (
        2, f"error: {site / 'engines' / 'vllm-0.31.0.json'}: catalog format 1, this stackpin reads 2 "
           "(hint: add it again: stackpin engines add vllm==0.31.0)\n")
    # A field of the current format that is wrong: its file, line and column (JSON read as YAML for them).
    release = json.dumps({"format": 2, "engine": "vllm", "version": "0.31.0", "option_strings": ["--x"],
                          "options": {"--x": {"strings": ["--x"], "type": "integer"}},
                          "source": {"package": "p", "sha256": "0", "files_parsed": []}}, indent=2)
    (site / "engines" / "vllm-0.31.0.json").write_text(release)
    row = next(n for n, line in enumerate(release.splitlines(), 1) if '"type"' in line)
    col = release.splitlines()[row - 1].index('"type"') + 1
    result = invoke("validate", profile, site=site)
    assert (result.exit_code, result.stderr) == (
        2, f"error: {site / 'engines' / 'vllm-0.31.0.json'}:{row}:{col}: options.--x.type: must be one of 'bool', "
           "'int', 'float', 'str', 'json', 'list', 'bool_or_str', 'json_or_str', 'json_list', got 'integer'\n")
