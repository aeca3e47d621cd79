"""`stackpin engines diff` takes every serving engine through stackpin.backends (its release catalog), and a
Dynamo diff covers every engine's worker section, not vLLM's only."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from stackpin.backends import engine, names, serving_releases
from stackpin.cli.main import main
from stackpin.engines.diff import diff_engine

BUNDLED = Path(__file__).resolve().parent.parent / "stackpin" / "catalog" / "engines"


def invoke(*args: str, site: Path | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"STACKPIN_CATALOG_PATH": str(site) if site else ""})


def _next_sglang(site: Path) -> None:
    """SGLang 0.5.22 as a copy of the shipped 0.5.21 catalog with one option added, one removed, one default
    changed, one attention backend and one speculative algorithm added."""
    data = json.loads((BUNDLED / "sglang-0.5.21.json").read_text())
    data["version"] = "0.5.22"
    options = data["options"]
    removed = "--admin-api-key"
    del options[removed]
    data["option_strings"] = [s for s in data["option_strings"] if s != removed]
    options["--new-knob"] = {"config_field": "ServerArgs.new_knob", "default": 4, "strings": ["--new-knob"],
                             "type": "int"}
    data["option_strings"] = sorted([*data["option_strings"], "--new-knob"])
    options["--page-size"]["default"] = 64
    data["choices"]["attention_backends"] = [*data["choices"]["attention_backends"], "new_attn"]
    data["choices"]["speculative_algorithms"] = [*data["choices"]["speculative_algorithms"], "NEWSPEC"]
    (site / "engines").mkdir()
    (site / "engines" / "sglang-0.5.22.json").write_text(json.dumps(data))


def test_an_sglang_upgrade_diffs_through_its_backend(tmp_path: Path) -> None:
    _next_sglang(tmp_path)
    result = invoke("engines", "diff", "sglang", "0.5.21", "0.5.22", site=tmp_path)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "SGLang 0.5.21 -> 0.5.22"
    assert "flags: 1 added, 1 removed, 1 changed" in lines
    assert "  + --new-knob (int; default 4)" in lines and "  - --admin-api-key" in lines
    assert any(line.startswith("  ~ --page-size: default") and line.endswith("-> 64") for line in lines)
    assert "  attention_backends: +new_attn" in lines
    assert "speculative methods: +NEWSPEC" in lines
    data = json.loads(invoke("engines", "diff", "sglang", "0.5.21", "0.5.22", "-o", "json", site=tmp_path).output)
    assert data["engine"] == "sglang" and list(data["entryPoints"]) == ["sglang"]
    assert data["speculativeMethods"] == {"added": ["NEWSPEC"], "removed": []}


def test_a_missing_sglang_release_names_its_package() -> None:
    result = invoke("engines", "diff", "sglang", "0.5.21", "9.9.9")
    assert result.exit_code == 2
    assert "no catalog of SGLang 9.9.9" in result.output and "stackpin engines add sglang==9.9.9" in result.output


def test_a_dynamo_diff_covers_every_engines_worker() -> None:
    diff = diff_engine("dynamo", "1.5.1", "1.6.1", serving_releases())
    assert list(diff.entries) == [*(engine(n).dynamo_worker for n in names()), "frontend"]
    sglang_worker = diff.entries[engine("sglang").dynamo_worker]
    assert sglang_worker.added or sglang_worker.removed or sglang_worker.changed  # 1.6.1's worker_sglang moved
    result = invoke("engines", "diff", "dynamo", "1.5.1", "1.6.1")
    assert result.exit_code == 0 and "worker_sglang:" in result.output.splitlines()


def test_an_unknown_package_names_every_engine() -> None:
    result = invoke("engines", "diff", "trtllm", "1.0.0", "1.1.0")
    assert result.exit_code == 2
    assert f"expected {', '.join(names())}, dynamo or flashinfer" in result.output
