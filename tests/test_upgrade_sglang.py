"""`stackpin upgrade propose` on an SGLang stack (docs/examples/gb300-sglang.yaml on the fixture releases of
devkit/enginepkgs.py, from a --find-links directory): the candidate follows the pins of Dynamo's `sglang`
extra through the engine's backend (SGLang, its NIXL, the FlashInfer SGLang pins), the same code as a vLLM
stack's; a Dynamo release whose sglang extra pins no exact NIXL is one line, exit 2. No network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit import enginepkgs as pkgs
from stackpin.cli.main import main
from stackpin.upgrade.model import Proposal

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "gb300-sglang.yaml"
PROFILE = "gb300-sglang.yaml"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"STACKPIN_CATALOG_PATH": ""})


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dynamo 9.0.0 (sglang 9.0.0, nixl 1.5.0), 9.1.0 (sglang 9.1.0, nixl 1.5.1) and 9.2.0 (its sglang extra
    pins no exact nixl); each SGLang release pins FlashInfer 0.6.18."""
    root = tmp_path_factory.mktemp("packages")
    pkgs.dynamo_wheel(root, "9.0.0", sglang="9.0.0", sglang_nixl="1.5.0", sglang_worker=True)
    pkgs.dynamo_wheel(root, "9.1.0", sglang="9.1.0", sglang_nixl="1.5.1", sglang_worker=True)
    pkgs.dynamo_wheel(root, "9.2.0", sglang="9.1.0", sglang_worker=True)
    for version in ("9.0.0", "9.1.0"):
        pkgs.sglang_wheel(root, version)
    pkgs.flashinfer_wheel(root, "0.6.18")
    return root


@pytest.fixture(autouse=True)
def site(tmp_path: Path, packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SGLang example at Dynamo 9.0.0, with a catalog (spec.catalogPath) holding its releases."""
    monkeypatch.chdir(tmp_path)
    for name in ("ai_dynamo-9.0.0-py3-none-any.whl", "sglang-9.0.0-cp311-cp311-manylinux_2_34_x86_64.whl"):
        added = invoke("engines", "add", "--from", str(packages / name), "--catalog", "catalog")
        assert added.exit_code == 0, added.output
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["catalogPath"] = ["catalog"]
    doc["spec"]["versions"].update(dynamo="9.0.0", sglang="9.0.0", nixl="1.5.0",
                                   runtimeImage="nvcr.io/nvidia/ai-dynamo/sglang-runtime:9.0.0")
    Path(PROFILE).write_text(yaml.safe_dump(doc, sort_keys=False))


def test_an_sglang_stack_is_proposed_on_the_sglang_extras_pins(packages: Path) -> None:
    result = invoke("upgrade", "propose", PROFILE, "--to", "dynamo==9.1.0", "--find-links", str(packages), "-o", "json")
    assert result.exit_code == 0, result.output
    proposal = Proposal.model_validate_json(result.output)
    assert (proposal.current.engine, proposal.current.release, proposal.current.nixl) == ("sglang", "9.0.0", "1.5.0")
    assert (proposal.candidate.engine, proposal.candidate.release, proposal.candidate.nixl,
            proposal.candidate.flashinfer) == ("sglang", "9.1.0", "1.5.1", "0.6.18")
    assert proposal.candidate.runtime_image == "nvcr.io/nvidia/ai-dynamo/sglang-runtime:9.1.0"
    assert proposal.added == ["ai-dynamo==9.1.0", "sglang==9.1.0", "flashinfer-python==0.6.18"]
    assert "vllm" not in json.loads(result.output)["candidate"]  # the SGLang release under its own name
    candidate = yaml.safe_load(Path(proposal.candidate_profile or "").read_text())
    assert candidate["spec"]["engine"] == "sglang"
    assert {k: candidate["spec"]["versions"][k] for k in ("dynamo", "sglang", "nixl")} == {
        "dynamo": "9.1.0", "sglang": "9.1.0", "nixl": "1.5.1"}
    assert "vllm" not in candidate["spec"]["versions"]
    markdown = Path("proposals/gb300-sglang-dynamo-9-1-0/proposal.md").read_text()
    assert markdown.startswith(f"# Upgrade {PROFILE} to Dynamo 9.1.0 (SGLang 9.0.0 -> 9.1.0, FlashInfer 0.6.18 -> "
                               "0.6.18)\n")
    assert "| SGLang | `9.0.0` | `9.1.0` (changed) |" in markdown


def test_a_dynamo_release_without_exact_sglang_pins_is_one_line(packages: Path) -> None:
    result = invoke("upgrade", "propose", PROFILE, "--to", "dynamo==9.2.0", "--find-links", str(packages))
    assert result.exit_code == 2, result.output
    assert result.output == ("error: Dynamo 9.2.0: no sglang and sglang_nixl pins in the catalogs' versions.yaml "
                             "(hint: add it again: stackpin engines add ai-dynamo==9.2.0 --catalog catalog)\n")
    assert not Path("gb300-sglang.dynamo-9.2.0.yaml").exists() and not Path("proposals").exists()
