"""Every outside read has a deadline and a size bound (issue 37, "Package index"): a package index or
registry that answers slowly is cut at a deadline on the whole request, an archive that unpacks to more than
stackpin reads is refused before it is unpacked, PKG-INFO is read alone where only it is needed, and JSON
nested without end is refused before it is decoded. Each against a hostile loopback server or a generated
file; nothing reaches the internet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin import jsonio
from stackpin.cli.main import main
from tests.helpers import ROOT

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


def test_a_deeply_nested_index_page_is_one_line(tmp_path: Path) -> None:
    from stackpin.engines.simple import PageError, parse_json

    with pytest.raises(PageError, match="JSON nested 200001 levels deep"):
        parse_json(json.dumps({"files": []}).encode()[:-1] + DEEP.encode() + b"}")
