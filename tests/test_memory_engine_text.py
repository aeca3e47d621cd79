"""validate's memory findings (SP132, SP133) and the summary's caption name the stack's engine: an SGLang stack's
text says SGLang, a vLLM stack's still says vLLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.validate import run_rules
from tests.helpers import ROOT, apply, base_doc, load_doc

SGLANG = ROOT / "docs" / "examples" / "gb300-sglang.yaml"
W = "spec.placement.pools.worker"
# SP132: one 1M-token sequence no longer fits beside the weights at TP2 (tests/test_rules.py's case for the vLLM
# stack; the SGLang stack's weights and reserve leave that window at 0.882); SP133: 3% headroom.
TIGHT = {f"{W}.tensorParallel": 2, f"{W}.replicas": 36, f"{W}.gpuMemoryUtilization": 0.875,
         "spec.model.maxModelLen": 1048576}
TIGHT_SGLANG = {**TIGHT, f"{W}.gpuMemoryUtilization": 0.882}
FULL = {f"{W}.gpuMemoryUtilization": 0.97}


def _messages(tmp_path: Path, doc: dict[str, Any], code: str) -> list[str]:
    return [f.message for f in run_rules(load_doc(tmp_path, doc)) if f.code == code]


def _sglang() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SGLANG.read_text())
    return doc


def test_sglang_memory_findings_name_sglang(tmp_path: Path) -> None:
    [sp133] = _messages(tmp_path, apply(_sglang(), FULL), "SP133")
    assert "outside SGLang's pool" in sp133 and "vLLM" not in sp133
    [sp132] = _messages(tmp_path, apply(_sglang(), TIGHT_SGLANG), "SP132")
    assert sp132.endswith("SGLang refuses to start") and "vLLM" not in sp132


def test_vllm_memory_findings_still_name_vllm(tmp_path: Path) -> None:
    [sp133] = _messages(tmp_path, apply(base_doc(), FULL), "SP133")
    assert "outside vLLM's pool" in sp133
    [sp132] = _messages(tmp_path, apply(base_doc(), TIGHT), "SP132")
    assert sp132.endswith("vLLM refuses to start")


def test_the_summary_caption_names_the_stacks_engine() -> None:
    vllm = str(ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml")
    runner = CliRunner()
    text = {name: " ".join(runner.invoke(main, ["validate", *paths]).output.split()) for name, paths in
            (("sglang", [str(SGLANG)]), ("vllm", [vllm]), ("both", [str(SGLANG), vllm]))}
    assert "headroom = HBM outside SGLang's pool" in text["sglang"]
    assert "headroom = HBM outside vLLM's pool" in text["vllm"]
    assert "headroom = HBM outside each stack's engine's pool" in text["both"]
    as_json = runner.invoke(main, ["validate", str(SGLANG), "-o", "json"]).output
    assert "engineLabel" not in as_json and "engine_label" not in as_json  # -o json keeps its shape
