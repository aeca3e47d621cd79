"""`spec.catalogPath`: a profile names its own site catalog directories, searched before
STACKPIN_CATALOG_PATH's and the bundled one while that stack is validated, locked and rendered."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.catalog.flags import vllm_catalog
from stackpin.cli.main import main as cli_main
from stackpin.engines.store import set_pin
from stackpin.errors import StackpinError
from stackpin.render.build import build_objects
from stackpin.validate import run_rules
from tests.helpers import ROOT, apply, base_doc, dump, line_of, load_doc, write_profile
from tests.lockkit import lock_files

W = "spec.placement.pools.worker"
# Pins of a Dynamo release that ships vLLM 0.33.0, which only the site's versions.yaml knows.
PINS = {"dynamo": "1.7.0", "vllm": "0.33.0", "flashinfer": "0.7.2.post1", "nixl": "1.4.1",
        "runtimeImage": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.0"}


def _site(directory: Path) -> Path:
    directory.mkdir(parents=True)
    text = (ROOT / "stackpin" / "catalog" / "versions.yaml").read_text(encoding="utf-8")
    (directory / "versions.yaml").write_text(
        set_pin(text, "dynamo", "1.7.0", {"vllm": "0.33.0", "nixl": "1.4.1", "crd": "v1beta1"}), encoding="utf-8")
    return directory


def _doc(catalog_path: list[str] | None) -> dict:
    changes = {"metadata.name": "site-pinned", "spec.versions": PINS, "spec.autotune": {"mode": "tune"},
               "spec.kvCache.prefixCaching": False, f"{W}.engineArgs": {"--disable-log-requests": True}}
    if catalog_path is not None:
        changes["spec.catalogPath"] = catalog_path
    return apply(base_doc(), changes)


def test_the_profile_s_site_pins_are_read_for_that_stack_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STACKPIN_CATALOG_PATH", raising=False)
    monkeypatch.chdir(tmp_path)  # relative entries are taken from the working directory
    _site(tmp_path / "site")
    with_site = load_doc(tmp_path, _doc(["site"]), "with.yaml")
    findings = run_rules(with_site)
    assert [str(f) for f in findings if f.severity == "error"] == []
    assert "SP161" not in {f.code for f in findings}  # the site's pins know Dynamo 1.7.0
    # The same profile without the setting: the bundled pins know no Dynamo 1.7.0.
    without = load_doc(tmp_path, _doc(None), "without.yaml")
    assert "SP161" in {f.code for f in run_rules(without)}


def test_a_stack_with_a_catalog_path_locks_and_renders_from_it(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STACKPIN_CATALOG_PATH", raising=False)
    site = _site(tmp_path / "site")
    loaded = load_doc(tmp_path, _doc([str(site)]))
    [lock] = lock_files([loaded.path], tmp_path / "lockfiles")
    assert lock.stack_profile.spec.catalog_path == [str(site)]
    [dgd] = [o for o in build_objects(lock) if o["kind"] == "DynamoGraphDeployment"]
    [worker] = [c for c in dgd["spec"]["components"] if c["name"] == "worker"]
    args = worker["podTemplate"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--disable-log-requests" and "--disable-prefix-caching" in args
    # Outside that stack's work the setting leaves nothing behind: the search path is the usual one.
    assert vllm_catalog("0.33.0") is not None
    from stackpin.catalog import load_catalog

    assert "1.7.0" not in load_catalog().versions.dynamo


def test_a_catalog_path_that_is_not_a_directory_is_one_line_exit_2(tmp_path: Path) -> None:
    doc = _doc([str(tmp_path / "no-such-dir")])
    path = write_profile(tmp_path, doc)
    result = CliRunner().invoke(cli_main, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    [line] = [x for x in result.output.splitlines() if x.strip()]
    row, col = line_of(dump(doc), "spec.catalogPath")
    assert line.startswith(f"error: {path}:{row}:{col}: spec.catalogPath: {tmp_path / 'no-such-dir'}: not a "
                           "directory"), line


def test_render_refuses_a_lock_whose_catalog_directory_is_gone(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STACKPIN_CATALOG_PATH", raising=False)
    site = _site(tmp_path / "site")
    [lock] = lock_files([load_doc(tmp_path, _doc([str(site)])).path], tmp_path / "lockfiles")
    (site / "versions.yaml").unlink()
    site.rmdir()
    with pytest.raises(StackpinError, match=r"site-pinned \(lock\): spec.catalogPath: .*: not a directory"):
        build_objects(lock)


@pytest.mark.parametrize(("value", "says"), [
    ([""], "is empty"), (["a", "a"], "names a directory twice"), (["a\0b"], "holds a NUL byte")])
def test_a_malformed_catalog_path_fails_loading(tmp_path: Path, value: list[str], says: str) -> None:
    path = write_profile(tmp_path, _doc(value))
    result = CliRunner().invoke(cli_main, ["validate", str(path)])
    assert result.exit_code == 2 and says in result.output, result.output


def test_a_site_catalog_file_that_is_not_utf8_is_one_line_exit_2(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path / "site")
    (site / "versions.yaml").write_bytes(b"vllm:\n  '0.1': \xff\xfe\n")
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))
    result = CliRunner().invoke(cli_main, ["validate", str(ROOT / "profiles/deepseek-v4.1-flash/gb300-tuned.yaml")])
    assert result.exit_code == 2, result.output
    assert [x for x in result.output.splitlines() if x.strip()] == [
        f"error: {site / 'versions.yaml'}: not UTF-8 text (byte 15)"]


def test_a_site_engine_catalog_beyond_the_size_limit_is_refused_unread(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A site directory is another team's: its files are read up to a bound (16 MiB; 1 KB here), never whole.
    import stackpin.catalog.search as search

    site = tmp_path / "site"
    (site / "engines").mkdir(parents=True)
    bundled = ROOT / "stackpin" / "catalog" / "engines" / "vllm-0.31.0.json"
    (site / "engines" / bundled.name).write_bytes(bundled.read_bytes())
    monkeypatch.setattr(search, "MAX_CATALOG_FILE_BYTES", 1024)
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))
    result = CliRunner().invoke(cli_main, ["validate", str(ROOT / "profiles/deepseek-v4.1-flash/gb300-tuned.yaml")])
    assert result.exit_code == 2, result.output
    assert (f"error: {site / 'engines' / bundled.name}: cannot read the catalog file: larger than 1024 bytes"
            in result.output.splitlines()), result.output
