"""`stackpin import` of Dynamo's own SGLang DGDs (ai-dynamo 1.6.1 wheel, tests/data/upstream): the engine is read
from the worker, flags map back through SGLang's modelled table, and the report says what did not carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from stackpin.cli.main import main as cli_main

UPSTREAM = Path(__file__).parent / "data" / "upstream"
AGG = UPSTREAM / "ai-dynamo-1.6.1_dynamo_profiler_templates_dgd_sglang_agg.yaml"
DISAGG = UPSTREAM / "ai-dynamo-1.6.1_dynamo_profiler_templates_dgd_sglang_disagg.yaml"


@pytest.mark.parametrize("path", [AGG, DISAGG], ids=["agg", "disagg"])
def test_an_upstream_sglang_dgd_imports_and_validates(path: Path, tmp_path: Path) -> None:
    out, report = tmp_path / "p.yaml", tmp_path / "report.json"
    runner = CliRunner()
    result = runner.invoke(cli_main, ["import", str(path), "--platform", "h200", "--out", str(out),
                                      "--report", str(report)])
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(out.read_text())["spec"]
    assert spec["engine"] == "sglang"
    assert spec["versions"]["sglang"] == "0.5.21" and "vllm" not in spec["versions"]
    assert spec["model"]["id"] == "Qwen/Qwen3-0.6B"
    assert spec["kvCache"]["blockSize"] == 16  # --page-size, SGLang's modelled option for it
    pools = spec["placement"]["pools"]
    for pool in pools.values():
        assert pool["tensorParallel"] == 1  # --tp: argparse's abbreviation of --tp-size
        args = pool["engineArgs"]
        assert args["--served-model-name"] == "Qwen/Qwen3-0.6B" and args["--trust-remote-code"] is True
        assert not {"--tp", "--tp-size", "--page-size", "--model-path", "--disaggregation-mode"} & set(args)
    validated = runner.invoke(cli_main, ["validate", str(out)])
    assert validated.exit_code == 0, validated.output
    items = {(i["component"], i["item"]): i for i in json.loads(report.read_text())["items"]}
    worker = "decode" if path == DISAGG else "worker"
    tp = items[(worker, "flag --tp")]  # upstream's spelling is dropped; the render states --tp-size
    assert tp["status"] == "dropped" and "--tp-size" in tp["reason"]
    assert items[(worker, "flag --tp-size")]["reason"]


def test_disaggregated_sglang_keeps_its_transfer_backend_and_roles(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    result = CliRunner().invoke(cli_main, ["import", str(DISAGG), "--platform", "h200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    placement = yaml.safe_load(out.read_text())["spec"]["placement"]
    assert placement["mode"] == "disaggregated" and set(placement["pools"]) == {"prefill", "decode"}
    assert placement["kvConnector"] == "NixlConnector"  # --disaggregation-transfer-backend nixl
    assert placement["pools"]["prefill"]["engineArgs"]["--disaggregation-bootstrap-port"] == 12345
