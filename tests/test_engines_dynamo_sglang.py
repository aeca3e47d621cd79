"""Dynamo's SGLang worker (`python -m dynamo.sglang`) and Dynamo's SGLang pins: read from a small package in
the real shape (devkit/enginepkgs.py) and held in the shipped catalogs, which `stackpin engines add`
extracted from the published ai-dynamo 1.3.1-1.6.1 wheels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from devkit import enginepkgs as pkgs
from stackpin.catalog.engine_data import DynamoRelease
from stackpin.cli.main import main
from stackpin.engines.add import extract
from stackpin.engines.package import read_package, requires_of
from stackpin.engines.pins import engine_pin, pin_of
from stackpin.errors import StackpinError

ENGINES = Path(__file__).resolve().parent.parent / "stackpin" / "catalog" / "engines"
DYNAMO_VERSIONS = ["1.3.1", "1.4.0", "1.5.0", "1.5.1", "1.6.0", "1.6.1"]


def _dynamo(path: Path) -> DynamoRelease:
    release = extract(read_package(path))
    assert isinstance(release, DynamoRelease)
    return release


def test_the_sglang_worker_is_read_from_its_argument_parsing(tmp_path: Path) -> None:
    release = _dynamo(pkgs.dynamo_wheel(tmp_path, sglang_worker=True, sglang_nixl="1.5.0"))
    worker = release.worker_sglang
    assert worker is not None
    # Its own options: backend_args.py's, and the shared router group args.py imports.
    assert {"--enable-multimodal", "--no-enable-multimodal", "--sglang-trace-level", "--router-mode"} <= set(
        worker.option_strings)
    assert "--disaggregation-mode" not in worker.options  # SGLang's own option, not the worker's
    trace = worker.options["--sglang-trace-level"]
    assert (trace.type, trace.default, trace.choices, trace.env_var) == ("int", 2, ("1", "2", "3", "4"),
                                                                         "SGLANG_TRACE_LEVEL")
    assert worker.options["--enable-multimodal"].defined_in == "dynamo/sglang/backend_args.py"
    # The rest of the command line goes to the parser SGLang's ServerArgs.add_cli_args fills.
    assert worker.engine_parser == "sglang.srt.server_args.ServerArgs.add_cli_args"
    assert worker.at["engine_parser"] == "dynamo/sglang/args.py:31"
    assert any("ServerArgs.add_cli_args, dynamo/sglang/args.py:31" in rule for rule in release.rules)
    # What the worker changes in SGLang's parser, each with where.
    legacy = worker.engine_parser_options["--disable-piecewise-cuda-graph"]
    assert legacy.hidden == ("--disable-piecewise-cuda-graph",) and legacy.defined_in == "dynamo/sglang/_compat.py"
    assert "'--cuda-graph-backend-prefill' not in parser._option_string_actions" in legacy.notes[0]
    assert "dynamo/sglang/_compat.py:9" in legacy.notes[0]
    assert legacy.notes[1] == "sets cuda_graph_backend_prefill to 'disabled'"
    assert worker.engine_choices_added == {"load_format": ("gms",)}
    assert worker.disaggregation_modes == {"agg": "null", "encode": None, "pd": "null"}
    assert worker.at["disaggregation_modes"] == "dynamo/sglang/args.py:15"
    # Its env vars beside the vLLM worker's and the frontend's.
    assert release.env_vars["DYN_SGL_ENABLE_MULTIMODAL"].option == "--enable-multimodal"
    assert release.env_vars["DYN_VLLM_ENABLE_MULTIMODAL"].option == "--enable-multimodal"


def test_a_release_without_the_sglang_worker_has_none_and_the_vllm_parts_are_unchanged(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    bare = _dynamo(pkgs.dynamo_wheel(tmp_path / "a", sglang_worker=False))
    full = _dynamo(pkgs.dynamo_wheel(tmp_path / "b", sglang_worker=True))
    assert bare.worker_sglang is None and full.worker_sglang is not None
    assert bare.worker_vllm == full.worker_vllm and bare.frontend == full.frontend
    assert full.rules[:2] == bare.rules and len(full.rules) == 3
    assert {k: v for k, v in full.env_vars.items() if k in bare.env_vars} == bare.env_vars


def test_dynamo_pins_both_extras(tmp_path: Path) -> None:
    release = _dynamo(pkgs.dynamo_wheel(tmp_path, "9.1.0", vllm="9.1.0", nixl="1.4.1", sglang="9.5.0",
                                        sglang_nixl="1.5.0"))
    assert pin_of(release) == ("dynamo", {"vllm": "9.1.0", "nixl": "1.4.1", "crd": "v1beta1", "sglang": "9.5.0",
                                          "sglang_nixl": "1.5.0"})


def test_sglang_pins_from_its_metadata(tmp_path: Path) -> None:
    wheel = pkgs.sglang_pins_wheel(tmp_path, "9.5.0", flashinfer="0.7.3", torch="2.14.0", kernel="0.5.0")
    # flashinfer_python[cu13]==X as SGLang writes it: the name normalized, the extra ignored.
    assert engine_pin("sglang", "9.5.0", requires_of(wheel)) == (
        "sglang", {"flashinfer": "0.7.3", "torch": "2.14.0", "sglang_kernel": "0.5.0"})
    with pytest.raises(StackpinError, match=r"^sglang 9.5.0: no flashinfer pin in its metadata"):
        engine_pin("sglang", "9.5.0", ("torch==2.14.0", "flashinfer-python>=0.7"))


def test_engines_add_writes_the_worker_and_the_pins(tmp_path: Path) -> None:
    wheel = pkgs.dynamo_wheel(tmp_path, "9.1.0", vllm="9.1.0", sglang="9.5.0", sglang_nixl="1.5.0",
                              sglang_worker=True)
    catalog = tmp_path / "catalog"
    for _ in range(2):  # the same package again: the same bytes
        result = CliRunner().invoke(main, ["engines", "add", "--from", str(wheel), "--catalog", str(catalog)])
        assert result.exit_code == 0, result.output
    written = json.loads((catalog / "engines" / "dynamo-9.1.0.json").read_text())
    assert written["worker_sglang"]["disaggregation_modes"] == {"agg": "null", "encode": None, "pd": "null"}
    assert '"9.1.0": {vllm: 9.1.0, nixl: 1.4.1, crd: v1beta1, sglang: 9.5.0, sglang_nixl: 1.5.0}' in (
        catalog / "versions.yaml").read_text()


# --- the shipped catalogs, from the published wheels ---------------------------------------------------


@pytest.mark.parametrize("version", DYNAMO_VERSIONS)
def test_every_shipped_dynamo_has_the_sglang_worker(version: str) -> None:
    from stackpin.catalog.flags import dynamo_catalog, dynamo_sglang_worker

    data = json.loads((ENGINES / f"dynamo-{version}.json").read_text())
    worker = dynamo_sglang_worker(version)
    assert worker is not None
    assert worker.engine_parser == "sglang.srt.server_args.ServerArgs.add_cli_args"
    # Every release rewrites agg and pd to SGLang's null and takes encode itself (dynamo/sglang/args.py
    # _normalize_multimodal_disaggregation_args), and adds gms to --load-format's choices.
    assert worker.disaggregation_modes == {"agg": "null", "encode": None, "pd": "null"}
    assert worker.engine_choices_added == {"load_format": ("gms",)}
    # No --disaggregation-transfer-backend of its own: that is SGLang's option, parsed by SGLang.
    assert "--disaggregation-transfer-backend" not in worker.option_strings
    assert "--disaggregation-mode" not in worker.option_strings
    flags = dynamo_catalog(version, "worker_sglang")
    assert flags is not None and "--enable-multimodal" in flags.options
    assert flags.env["DYN_SGL_ENABLE_MULTIMODAL"].option == "--enable-multimodal"
    assert data["rules"][1].startswith("The vLLM worker")  # the vLLM rule stays where it was


def test_the_legacy_cuda_graph_spelling_from_160() -> None:
    from stackpin.catalog.flags import dynamo_sglang_worker

    # dynamo/sglang/_compat.py add_sglang_cli_compat, called from args.py from 1.6.0 (SGLang 0.5.20 dropped it).
    for version, present in (("1.5.1", False), ("1.6.0", True), ("1.6.1", True)):
        worker = dynamo_sglang_worker(version)
        assert worker is not None
        assert ("--disable-piecewise-cuda-graph" in worker.engine_parser_options) is present
    worker = dynamo_sglang_worker("1.6.1")
    assert worker is not None
    assert worker.at == {"disaggregation_modes": "dynamo/sglang/args.py:458",
                         "engine_choices_added": "dynamo/sglang/args.py:586",
                         "engine_parser": "dynamo/sglang/args.py:579",
                         "engine_parser_options": "dynamo/sglang/args.py:580"}


def test_shipped_sglang_pins_match_the_wheels_metadata() -> None:
    from stackpin.catalog import load_catalog
    from stackpin.engines.pins import exact

    versions = load_catalog().versions
    for version in DYNAMO_VERSIONS:
        requires = tuple(json.loads((ENGINES / f"dynamo-{version}.json").read_text())["requires"])
        pin = versions.dynamo[version]
        assert pin.engine("sglang") == (exact(requires, "sglang", "sglang"), exact(requires, "nixl", "sglang"))
        assert pin.engine("vllm") == (pin.vllm, pin.nixl)
    assert versions.dynamo["1.6.1"].engine("sglang") == ("0.5.21", "1.5.0")
    assert versions.dynamo["1.3.1"].engine("sglang") == ("0.5.14", None)  # nixl[cu13]<1.1.0,>=1.0.0: a range
    # Every SGLang a shipped Dynamo pins has its own pins recorded.
    assert {p.sglang for p in versions.dynamo.values()} <= set(versions.sglang)
    assert versions.sglang["0.5.21"].flashinfer == "0.6.18" and versions.sglang["0.5.21"].torch == "2.13.0"
    with pytest.raises(ValueError, match="no engine 'trtllm'"):
        versions.dynamo["1.6.1"].engine("trtllm")


def test_an_sglang_release_writes_its_own_pins() -> None:
    from stackpin.catalog.engine_data import SglangRelease, Source

    release = SglangRelease(version="9.5.0", option_strings=(), options={}, source=Source(
        package="sglang-9.5.0-py3-none-any.whl", sha256="0", files_parsed=()), requires=(
        "flashinfer_python[cu13]==0.7.3", "sglang-kernel==0.5.0", "torch==2.14.0", "torchvision"))
    assert pin_of(release) == ("sglang", {"flashinfer": "0.7.3", "torch": "2.14.0", "sglang_kernel": "0.5.0"})
