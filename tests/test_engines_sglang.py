"""SGLang releases read into the catalog: a small SGLang-shaped wheel (devkit/enginepkgs.py) through the
extractor and `engines add`, and the shipped sglang-0.5.21 catalog and start-up facts through their readers.
One test marked `network` extracts the published 0.5.21 wheel and compares it with the shipped file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from devkit import enginepkgs as pkgs
from stackpin.catalog.engine_data import SglangRelease
from stackpin.catalog.flags import engine_catalog
from stackpin.catalog.startup import sglang_startup_facts
from stackpin.cli.main import main
from stackpin.engines import sglang_release
from stackpin.engines.add import add_release
from stackpin.engines.package import read_package

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "stackpin" / "catalog"
CACHE = ROOT / ".bench" / "engines"


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> SglangRelease:
    return sglang_release.build(read_package(pkgs.sglang_wheel(tmp_path_factory.mktemp("sglang"))))


def test_fields_become_options_as_add_cli_args_from_dataclass_registers_them(release: SglangRelease) -> None:
    options = release.options
    # field name -> --field-name, aliases beside it, cli_name instead of it; no_cli and un-annotated fields skipped
    assert options["--model-path"].strings == ("--model", "--model-path")
    assert options["--model-path"].required is True  # no default: argparse requires it
    assert options["--tp-size"].strings == ("--tensor-parallel-size", "--tp-size")
    assert options["--disaggregation-transfer-backend"].config_field == "ServerArgs.transfer_backend"
    assert "--internal-only" not in release.option_strings and "internal_only" in release.server_args_fields
    assert options["--tp-size"].defined_in == "sglang/srt/arg_groups/fields/model.py:17"
    # plain argparse: no underscore spellings, no --no-x for store_true
    assert "--tp_size" not in release.option_strings and not release.parser.underscores_as_dashes
    assert options["--trust-remote-code"].store_true and options["--trust-remote-code"].default is False
    assert options["--enable-lean"].store_true and options["--enable-lean"].default is None  # Optional[bool]
    assert options["--lora-strict"].boolean_optional and options["--lora-strict"].negatives == ("--no-lora-strict",)
    assert release.boolean_optional_options == ("--lora-strict",)


def test_types_defaults_and_choices(release: SglangRelease) -> None:
    options = release.options
    assert options["--attention-backend"].choices == ("flashinfer", "nsa", "triton", "trtllm_mla")
    assert options["--attention-backend"].choices_enforced_by_argparse is True
    assert options["--cuda-graph-backend-decode"].choices == ("disabled", "full")  # Backend.ALL, a class tuple
    assert options["--disaggregation-mode"].choices == ("decode", "null", "prefill")  # from the Literal
    assert options["--disaggregation-mode"].default == "null"
    assert options["--encoder-transfer"].choices == ("mooncake", "nixl")  # Literal[None, ...]: no text gives None
    assert options["--moe-dense-tp"].type == "int" and options["--moe-dense-tp"].choices == ("1", "2")
    assert (options["--cuda-graph-bs"].type, options["--cuda-graph-bs"].item_type) == ("list", "int")
    assert options["--skip-ops"].default == []
    assert options["--ratio"].default == 512.0
    assert (options["--context-length"].type, options["--context-length"].converter) == ("int", "human_readable_int")
    assert options["--json-model-override-args"].type == "json"
    assert options["--prefill-ports"].type == "json_list"


def test_add_cli_args_own_registrations_and_what_only_running_decides(release: SglangRelease) -> None:
    options = release.options
    assert options["--sampling-backend"].choices == ("flashinfer", "pytorch")
    assert options["--reasoning-parser"].choices == ("auto", "deepseek-r1", "qwen3")  # the helper's last return
    assert options["--disable-cuda-graph"].store_true
    deprecation = options["--disable-cuda-graph"].deprecated["--disable-cuda-graph"]
    assert deprecation.replacement == "--cuda-graph-backend-decode=disabled"
    assert options["--grpc-mode"].deprecated["--grpc-mode"].replacement == "--smg-grpc-mode"
    assert "--config" in release.option_strings
    assert any(u.startswith("--sampling-backend: token_oracle added") and "server_args.py:" in u
               for u in release.unresolved)
    assert any(u.startswith("--reasoning-parser: choices computed") for u in release.unresolved)


def test_env_vars_and_speculative_names(release: SglangRelease) -> None:
    env = release.env_vars
    assert env["SGLANG_FLASHINFER_AUTOTUNE_CACHE"].type == "bool" and env["SGLANG_FLASHINFER_AUTOTUNE_CACHE"].default
    assert env["SGLANG_CACHE_DIR"].default_expr is not None  # a lambda: only running tells
    old = env["SGLANG_OLD_CHUNK"].deprecated
    assert old is not None and old.replacement == "SGLANG_CHUNK"
    retired = env["SGLANG_RETIRED"].deprecated
    assert retired is not None and retired.message == "Please use '--retired-flag' instead."
    assert env["SGLANG_DIRECT_READ"].source == "sglang/srt/layers/direct.py:5"
    assert env["SGLANG_DIRECT_PATH"].type == "str"
    assert release.choices["speculative_algorithms"] == ("EAGLE", "EAGLE3", "NEXTN", "NGRAM")


def test_engines_add_from_file_writes_the_catalog(tmp_path: Path) -> None:
    wheel = pkgs.sglang_wheel(tmp_path)
    site = tmp_path / "site"
    result = CliRunner().invoke(main, ["engines", "add", "sglang==9.0.0", "--from", str(wheel), "--catalog", str(site)],
                                env={"STACKPIN_CATALOG_PATH": str(site)})
    assert result.exit_code == 0, result.output
    assert "sglang-9.0.0.json: 23 options, 26 option strings, 2 deprecated, 8 env vars" in result.output
    written = site / "engines" / "sglang-9.0.0.json"
    first = written.read_bytes()
    assert "9.0.0 -> flashinfer 0.6.18, torch 2.13.0" in result.output  # its pins, from its metadata
    add_release(None, from_file=wheel, catalog_dir=site)
    assert written.read_bytes() == first  # same package, same bytes
    catalog = json.loads(first)
    assert catalog["engine"] == "sglang" and catalog["version"] == "9.0.0"


def test_a_wheel_that_is_not_the_named_release_is_refused(tmp_path: Path) -> None:
    wheel = pkgs.sglang_wheel(tmp_path, version="9.0.0")
    result = CliRunner().invoke(main, ["engines", "add", "sglang==9.0.1", "--from", str(wheel),
                                       "--catalog", str(tmp_path / "site")])
    assert result.exit_code == 2
    assert "is sglang 9.0.0, not sglang 9.0.1" in result.output
    assert not (tmp_path / "site").exists()


def test_the_shipped_catalog_loads_through_engine_catalog() -> None:
    catalog = engine_catalog("sglang", "0.5.21")
    assert catalog is not None and catalog.name == "SGLang 0.5.21"
    assert catalog.enforced["--attention-backend"][:3] == ("aiter", "ascend", "compressed")
    assert catalog.check_value("--attention-backend", "trtllm_mla") == []
    assert catalog.check_value("--disaggregation-transfer-backend", "nixl") == []
    assert catalog.check_value("--kv-cache-dtype", "fp8") != []  # SGLang spells it fp8_e4m3
    assert catalog.check_value("--cuda-graph-bs-decode", [1, 2, 4]) == []
    assert catalog.canonical("--tensor-parallel-size") == "--tp-size"
    assert catalog.accepts("--cuda-graph-max-bs-decode") and not catalog.accepts("--cuda-graph-max-bs")
    deprecation = catalog.deprecation("--disable-cuda-graph")
    assert deprecation is not None and "disabled" in (deprecation.replacement or "")
    assert "SGLANG_FLASHINFER_AUTOTUNE_CACHE" in catalog.env_vars


def test_the_start_up_facts_agree_with_the_shipped_catalog() -> None:
    facts = sglang_startup_facts("0.5.21")
    catalog = engine_catalog("sglang", "0.5.21")
    assert facts is not None and catalog is not None
    assert facts.file == "stackpin/catalog/engines/sglang-0.5.21.startup.yaml"
    by_kind = {"attention.backend_choices": "attention_backends", "moe.runner_backend_choices": "moe_runner_backends",
               "kv_cache.dtype_choices": "kv_cache_dtypes", "speculative.algorithms": "speculative_algorithms",
               "cuda_graph.backend_choices": "cuda_graph_backends",
               "disaggregation.transfer_backend_choices": "disaggregation_transfer_backends"}
    for fact, kind in by_kind.items():
        assert tuple(sorted(facts.facts[fact].value)) == catalog.choices[kind], fact
    defaults = {"attention.backend_default": "--attention-backend",
                "moe.runner_backend_default": "--moe-runner-backend", "kv_cache.dtype_default": "--kv-cache-dtype",
                "memory.mem_fraction_static_default": "--mem-fraction-static",
                "disaggregation.mode_default": "--disaggregation-mode",
                "disaggregation.transfer_backend_default": "--disaggregation-transfer-backend"}
    for fact, flag in defaults.items():
        assert facts.facts[fact].value == catalog.flags[flag].default, fact
    assert all(":" in fact.source for fact in facts.facts.values())


@pytest.mark.network
def test_the_published_wheel_extracts_to_the_shipped_catalog(tmp_path: Path) -> None:
    added = add_release("sglang==0.5.21", catalog_dir=tmp_path, cache_dir=CACHE)
    assert added.package.endswith(".whl")
    shipped = (BUNDLED / "engines" / "sglang-0.5.21.json").read_text(encoding="utf-8")
    assert added.catalog_file.read_text(encoding="utf-8") == shipped
