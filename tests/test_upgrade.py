"""`stackpin validate --upgrade-to vllm==X`: what a profile loses or changes under another vLLM release,
as findings located in the profile (rule rows for SP241-SP243 are in tests/test_rules.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stackpin.cli.main import main as cli_main
from stackpin.validate.upgrade import parse_target
from stackpin.validate.upgradecheck import upgrade_findings
from tests.helpers import PROFILES_DIR, ROOT, apply, base_doc, dump, line_of, load_doc, write_profile

W = "spec.placement.pools.worker"
PINS_1_5 = {"spec.versions.dynamo": "1.5.1", "spec.versions.vllm": "0.28.0", "spec.versions.flashinfer": "0.6.16.post3",
            "spec.versions.nixl": "1.3.2", "spec.versions.runtimeImage": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1"}


def _codes(tmp_path: Path, changes: dict[str, Any], target: str) -> dict[str, list[str]]:
    doc = apply(base_doc(), changes)
    out: dict[str, list[str]] = {}
    for f in upgrade_findings(load_doc(tmp_path, doc), target):
        out.setdefault(f.code, []).append(f.path)
    return out


@pytest.mark.parametrize(("changes", "target", "code", "path"), [
    # vLLM 0.31.0 dropped --enable-bf16x3-router-gemm.
    ({**PINS_1_5, f"{W}.engineArgs": {"--enable-bf16x3-router-gemm": True}}, "0.31.0", "SP221",
     f"{W}.engineArgs.--enable-bf16x3-router-gemm"),
    # vLLM 0.33.0 no longer reads VLLM_ENGINE_ITERATION_TIMEOUT_S ...
    ({"spec.kernels.env.VLLM_ENGINE_ITERATION_TIMEOUT_S": "600"}, "0.33.0", "SP171",
     "spec.kernels.env.VLLM_ENGINE_ITERATION_TIMEOUT_S"),
    # ... has no flashinfer_moe_ep_mega_cutedsl MoE backend ...
    ({"spec.kernels.moe": "flashinfer_moe_ep_mega_cutedsl"}, "0.33.0", "SP213", "spec.kernels.moe"),
    # ... and no medusa speculative method.
    ({"spec.speculative.method": "medusa", "spec.speculative.draftModel": "acme/medusa-heads"}, "0.33.0", "SP111",
     "spec.speculative.method"),
], ids=["removed-flag", "removed-env", "removed-backend", "removed-method"])
def test_what_the_target_removed_is_a_finding_at_the_field(tmp_path: Path, changes: dict[str, Any], target: str,
                                                           code: str, path: str) -> None:
    assert path in _codes(tmp_path, changes, target).get(code, [])
    # The profile as pinned does not have it: the finding is the upgrade's.
    assert path not in _codes(tmp_path, changes, str(apply(base_doc(), changes)["spec"]["versions"]["vllm"])).get(
        code, [])


def test_the_upgrade_from_the_cli_with_its_header_and_exit_code() -> None:
    profile = PROFILES_DIR / "gb300-tuned.yaml"
    result = CliRunner().invoke(cli_main, ["validate", "--upgrade-to", "vllm==0.33.0", str(profile)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{profile} (gb300-tuned): upgrade vllm 0.31.0 -> 0.33.0"
    text = profile.read_text()
    row, col = line_of(text, "spec.autotune.cache")
    assert any(line.strip().startswith(f"{profile}:{row}:{col}: error SP243 spec.autotune.cache: the cache was "
                                       "captured with FlashInfer 0.7.0.post1") for line in lines)
    as_json = CliRunner().invoke(cli_main, ["validate", "-o", "json", "--upgrade-to", "vllm==0.33.0", str(profile)])
    [report] = json.loads(as_json.stdout)["reports"]
    assert report["upgrade"] == "vllm 0.31.0 -> 0.33.0"
    assert {f["code"] for f in report["findings"]} == {"SP241", "SP243"}


def test_an_upgrade_to_the_pinned_release_changes_nothing(tmp_path: Path) -> None:
    path = write_profile(tmp_path, dump(base_doc()))
    result = CliRunner().invoke(cli_main, ["validate", "--upgrade-to", "vllm==0.31.0", str(path)])
    assert result.exit_code == 0, result.output
    assert "nothing in this profile breaks or changes meaning" in result.output


@pytest.mark.parametrize("target", ["0.33.0", "vllm>=0.33.0", "dynamo==1.6.1", "vllm==latest", "trtllm==1.0.0"])
def test_a_target_that_is_not_engine_eq_version_is_exit_2(target: str) -> None:
    with pytest.raises(ValueError):
        parse_target(target)
    result = CliRunner().invoke(cli_main, ["validate", "--upgrade-to", target, str(PROFILES_DIR / "gb300-tuned.yaml")])
    assert result.exit_code == 2 and "ENGINE==X.Y.Z" in result.output


def test_an_upgrade_names_the_stacks_own_engine() -> None:
    """An SGLang stack moves along SGLang's releases: a vLLM target is refused for it in one line (it used to be
    moved to 'SGLang 0.33.0'), and the SGLang target reports against SGLang's own pins."""
    sglang = str(ROOT / "docs" / "examples" / "gb300-sglang.yaml")
    refused = CliRunner().invoke(cli_main, ["validate", "--upgrade-to", "vllm==0.33.0", sglang])
    assert refused.exit_code == 2, refused.output
    assert "gb300-sglang.yaml" in refused.output and "the stack runs SGLang" in refused.output
    assert "Traceback" not in refused.output
    moved = CliRunner().invoke(cli_main, ["validate", "-o", "json", "--upgrade-to", "sglang==0.5.21", sglang])
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.stdout)["reports"][0]["upgrade"] == "sglang 0.5.21 -> 0.5.21"
