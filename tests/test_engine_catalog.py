"""The shipped engine catalogs (stackpin/catalog/engines/*.json) hold the facts stackpin relies on.

They are extracted from the published packages by `stackpin engines add` (scripts/extract_engine_flags.py
regenerates them all); these tests pin, per version, the facts docs/facts.md states from them, and the
golden list of option strings vLLM 0.33.0's parser accepts beyond the registered ones.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest

from stackpin.catalog.engine_data import DynamoRelease, FlashinferRelease, SglangRelease, VllmRelease
from stackpin.catalog.flags import dynamo_catalog, vllm_catalog
from stackpin.engines.store import catalog_json

ENGINES = Path(__file__).resolve().parent.parent / "stackpin" / "catalog" / "engines"
VLLM_VERSIONS = ["0.28.0", "0.31.0", "0.33.0"]
DYNAMO_VERSIONS = ["1.3.1", "1.4.0", "1.5.0", "1.5.1", "1.6.0", "1.6.1"]
FLASHINFER_VERSIONS = ["0.6.16.post3", "0.7.0.post1", "0.7.2.post1"]
DSV41_BACKENDS = {
    "FLASHMLA_MEGA_ATTN_DSV41",
    "FLASHINFER_MLA_SPARSE_DSV41",
    "FLASHMLA_SPARSE_DSV41",
}
# Real options of vLLM 0.33.0 a new user tries that are no registered string: the inverse spellings its
# parser's boolean action (EnableDisableAction, vllm/utils/argparse_utils.py) adds to every
# --enable-x / --disable-x boolean option. 35 in all.
VLLM_033_INVERSES = [
    "--disable-batch-sharded-sampling", "--disable-chunked-prefill", "--disable-cumem-allocator", "--disable-dbo",
    "--disable-elastic-ep", "--disable-ep-weight-filter", "--disable-eplb", "--disable-expert-parallel",
    "--disable-fault-tolerance", "--disable-flashinfer-autotune", "--disable-hc-sp", "--disable-layerwise-nvtx-tracing",
    "--disable-log-requests", "--disable-logging-iteration-details", "--disable-lora",
    "--disable-mamba-cache-stochastic-rounding", "--disable-mamba-shared-prefix-checkpoint", "--disable-mfu-metrics",
    "--disable-mixed-moe-lora-format", "--disable-mm-embeds", "--disable-moe-shared-loras",
    "--disable-nccl-comm-suspend", "--disable-prefix-caching", "--disable-prompt-embeds",
    "--disable-return-routed-experts", "--disable-shm-tensor-arena", "--disable-sleep-mode",
    "--disable-tower-connector-lora", "--disable-trace-replay", "--enable-cascade-attn", "--enable-chunked-mm-input",
    "--enable-custom-all-reduce", "--enable-hybrid-kv-cache-manager", "--enable-nccl-for-dp-synchronization",
    "--enable-sliding-window",
]


@cache
def load(name: str) -> dict[str, Any]:
    return json.loads((ENGINES / name).read_text(encoding="utf-8"))


def vllm(version: str) -> dict[str, Any]:
    return load(f"vllm-{version}.json")


def dynamo(version: str) -> dict[str, Any]:
    return load(f"dynamo-{version}.json")


MODELS = {"vllm": VllmRelease, "dynamo": DynamoRelease, "flashinfer": FlashinferRelease, "sglang": SglangRelease}
SHIPPED = ([f"vllm-{v}.json" for v in VLLM_VERSIONS] + [f"dynamo-{v}.json" for v in DYNAMO_VERSIONS]
           + [f"flashinfer-{v}.json" for v in FLASHINFER_VERSIONS] + ["sglang-0.5.21.json"])


def test_the_shipped_catalogs_are_these() -> None:
    assert sorted(p.name for p in ENGINES.glob("*.json")) == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_catalog_is_canonical_and_sourced(name: str) -> None:
    text = (ENGINES / name).read_text(encoding="utf-8")
    data = json.loads(text)
    release = msgspec.convert(data, MODELS[data["engine"]])
    # Written as `engines add` writes it: re-adding the same package gives the same bytes.
    assert text == catalog_json(release)
    src = release.source
    assert len(src.sha256) == 64 and int(src.sha256, 16) >= 0
    assert src.package.endswith((".tar.gz", ".whl"))
    assert list(src.files_parsed) == sorted(src.files_parsed)
    assert all(not f.startswith("/") for f in src.files_parsed)
    assert release.version in src.package
    assert release.requires, "the package's Requires-Dist is recorded"


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_lists_sorted_and_consistent(version: str) -> None:
    d = vllm(version)
    assert d["option_strings"] == sorted(set(d["option_strings"]))
    for values in d["choices"].values():
        assert values == sorted(values)
    # The flat list is exactly every string of every option, negatives included.
    every = {s for rec in d["options"].values() for s in rec["strings"] + rec.get("negatives", [])}
    assert set(d["option_strings"]) == every
    for flag, rec in d["options"].items():
        assert flag in rec["strings"]
        assert bool(rec.get("negatives")) == bool(rec.get("boolean_optional")), flag
        assert set(rec.get("hidden", [])) <= set(rec.get("negatives", []))
        assert set(rec.get("deprecated", {})) <= set(rec["strings"] + rec.get("negatives", []))
        # argparse's BooleanOptionalAction: --no-x beside each long string of a boolean option.
        nos = {"--no-" + s[2:] for s in rec["strings"] if s.startswith("--")} if rec.get("boolean_optional") else set()
        assert nos <= set(rec.get("negatives", [])), flag
    assert set(d["boolean_optional_options"]) <= set(d["options"])
    assert "unresolved" not in d, d.get("unresolved")  # every option read statically


def test_vllm_033_counts_match_facts() -> None:
    # docs/facts.md#engine-flag-catalogs: all 259 EngineArgs fields, 277 registered option strings of 0.33.0,
    # and 378 the parser accepts (66 argparse --no-x, 35 inverse spellings).
    d = vllm("0.33.0")
    assert len(d["engine_args_fields"]) == 259
    assert sum(len(rec["strings"]) for rec in d["options"].values()) == 277
    assert len(d["option_strings"]) == 378
    nos = [s for rec in d["options"].values() for s in rec.get("negatives", []) if s.startswith("--no-")]
    assert len(nos) == 66


def test_vllm_033_golden_negative_forms() -> None:
    d = vllm("0.33.0")
    inverses = sorted(s for rec in d["options"].values() for s in rec.get("negatives", []) if not s.startswith("--no-"))
    assert inverses == VLLM_033_INVERSES
    catalog = vllm_catalog("0.33.0")
    assert catalog is not None
    for string in ("--disable-prefix-caching", "--disable-chunked-prefill", "--enable-cascade-attn",
                   "--disable-log-requests"):
        use = catalog.resolve(string)
        assert use is not None and use.negative and catalog.accepts(string), string
    assert catalog.canonical("--disable-chunked-prefill") == "--enable-chunked-prefill"
    assert catalog.canonical("--enable-cascade-attn") == "--disable-cascade-attn"
    # Not a single one is an option of 0.31.0, whose parser has no such action.
    older = vllm_catalog("0.31.0")
    assert older is not None and not [s for s in VLLM_033_INVERSES if older.accepts(s)]


def test_vllm_033_deprecated_aliases_name_their_replacement() -> None:
    catalog = vllm_catalog("0.33.0")
    assert catalog is not None
    hidden = catalog.deprecation("--no-enable-prefix-caching")
    assert hidden is not None and hidden.replacement == "--disable-prefix-caching"
    assert "backwards compatibility" in (hidden.message or "")
    assert "--no-enable-prefix-caching" in catalog.flags["--enable-prefix-caching"].hidden
    no_disable = catalog.deprecation("--no-disable-custom-all-reduce")
    assert no_disable is not None and no_disable.replacement == "--enable-custom-all-reduce"
    log = catalog.deprecation("--log-config-file")
    assert log is not None and log.replacement == "--logging-config.pylogging_config_file"
    # Deprecated with no replacement: the option does nothing any more (every spelling of it).
    for string in ("--disable-cascade-attn", "--enable-cascade-attn", "--no-disable-cascade-attn"):
        gone = catalog.deprecation(string)
        assert gone is not None and gone.replacement is None and "no effect" in (gone.message or ""), string
    assert catalog.deprecation("--ir-op-priority") is not None
    assert catalog.deprecation("--mamba-cache-mode") is not None
    assert catalog.deprecation("--disable-prefix-caching") is None
    assert catalog.deprecation("--enable-prefix-caching") is None
    # Before 0.33.0, --no-enable-x is the one way to say no, and nothing hides it.
    older = vllm_catalog("0.31.0")
    assert older is not None and older.deprecation("--no-enable-prefix-caching") is None
    assert older.negative("--enable-prefix-caching") == "--no-enable-prefix-caching"
    assert catalog.negative("--enable-prefix-caching") == "--disable-prefix-caching"


def test_vllm_033_types_defaults_and_config_classes() -> None:
    catalog = vllm_catalog("0.33.0")
    assert catalog is not None
    flags = catalog.flags
    assert flags["--max-num-seqs"].type == "int" and flags["--max-num-seqs"].default is None
    assert flags["--gpu-memory-utilization"].type == "float"
    assert flags["--enable-prefix-caching"].type == "bool"
    assert flags["--kv-cache-dtype"].type == "str" and flags["--kv-cache-dtype"].default == "auto"
    assert flags["--compilation-config"].type == "json"
    assert flags["--compilation-config"].config_class == "CompilationConfig"
    compilation = catalog.config_class("-cc")
    assert compilation is not None
    assert {"cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size"} <= set(compilation.fields)
    speculative = catalog.config_class("--speculative-config")
    assert speculative is not None and "dspark" in (speculative.fields["method"].choices or ())
    assert catalog.env["VLLM_ENGINE_READY_TIMEOUT_S"].type == "int"
    use = catalog.resolve("--compilation-config.cudagraph_mode")
    assert use is not None and use.flag == "--compilation-config" and use.json_key == ("cudagraph_mode",)
    assert catalog.canonical("--max_num_seqs") == "--max-num-seqs"
    assert catalog.resolve("--max-num-seqs.x") is None


@pytest.mark.parametrize("version", VLLM_VERSIONS)
@pytest.mark.parametrize(
    "flag",
    [
        "--cudagraph-capture-sizes",
        "--max-cudagraph-capture-size",
        "-cc",
        "--compilation-config",
        "--speculative-config",
        "-sc",
        "--kernel-config",
        "--attention-backend",
        "--moe-backend",
        "--linear-backend",
        "--all2all-backend",
        "--kv-transfer-config",
        "--kv-events-config",
        "--kv-cache-dtype",
        "--performance-mode",
        "--optimization-level",
        "--enable-flashinfer-autotune",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "-tp",
        "-dp",
        "-pp",
        "-ep",
        "-q",
        "--enable-eplb",
        "--enable-dbo",
        "--async-scheduling",
        "--enable-prefix-caching",
    ],
)
def test_vllm_flags_present(version: str, flag: str) -> None:
    assert flag in vllm(version)["option_strings"]


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_boolean_inverses(version: str) -> None:
    # --no-enable-flashinfer-autotune (docs/facts.md#autotune-cache) comes from BooleanOptionalAction.
    d = vllm(version)
    bools = set(d["boolean_optional_options"])
    assert {"--enable-flashinfer-autotune", "--enable-prefix-caching", "--async-scheduling",
            "--enable-eplb", "--enable-dbo"} <= bools
    assert "--max-num-seqs" not in bools
    assert "--no-enable-flashinfer-autotune" in d["option_strings"]
    assert "--no-max-num-seqs" not in d["option_strings"]


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_common_choices(version: str) -> None:
    c = vllm(version)["choices"]
    assert c["cudagraph_modes"] == sorted(
        ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
    )
    assert c["performance_modes"] == ["balanced", "interactivity", "throughput"]
    assert c["optimization_levels"] == ["0", "1", "2", "3"]
    assert {"auto", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
            "flashinfer_cutlass", "flashinfer_cutedsl", "marlin"} <= set(c["moe_backends"])
    assert {"auto", "marlin"} <= set(c["linear_backends"])
    a2a = set(c["all2all_backends"])
    assert {"allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency",
            "nixl_ep", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided",
            "pplx"} <= a2a
    assert {"fp8", "fp8_ds_mla"} <= set(c["kv_cache_dtypes"])
    # dspark (the V4.1 draft method) exists in every pinned version, including 0.28.0.
    assert {"ngram", "ngram_gpu", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
            "extract_hidden_states", "dflash", "dspark", "mtp"} <= set(c["speculative_methods"])
    assert "deepseek_mtp" in c["speculative_mtp_aliases"]
    assert "mtp" not in c["speculative_mtp_aliases"]
    assert "FLASHINFER_MLA_SPARSE" in c["attention_backends"]


def test_vllm_033_facts() -> None:
    d = vllm("0.33.0")
    c = d["choices"]
    assert DSV41_BACKENDS <= set(c["attention_backends"])
    assert set(c["speculative_methods"]) - set(c["speculative_mtp_aliases"]) == {
        "ngram", "ngram_gpu", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
        "extract_hidden_states", "dflash", "dspark", "mtp",
    }
    assert "nvfp4_ds_mla" in c["kv_cache_dtypes"]
    # The default all2all value is kept; "passthrough" is config-only (bound from --moe-backend).
    assert "passthrough" in c["all2all_backends_config"]
    assert "passthrough" not in c["all2all_backends"]
    assert d["options"]["--performance-mode"]["choices_enforced_by_argparse"] is True
    # 0.33.0 types cache_dtype as `CacheDType | str`: argparse shows choices but accepts
    # any string, the config validator rejects unknown ones later.
    assert d["options"]["--kv-cache-dtype"]["choices_enforced_by_argparse"] is False
    assert d["parser"] == {"dotted_json_keys": True, "inverse_prefixes": {"--disable-": "--enable-",
                           "--enable-": "--disable-"}, "no_forms_hidden_with_inverse": True,
                           "optimization_level_shorthand": True, "underscores_as_dashes": True}


@pytest.mark.parametrize("version", ["0.28.0", "0.31.0"])
def test_vllm_before_033_has_no_inverse_action(version: str) -> None:
    d = vllm(version)
    assert d["parser"].get("inverse_prefixes") is None
    assert all(s.startswith("--no-") for rec in d["options"].values() for s in rec.get("negatives", []))


@pytest.mark.parametrize("version", ["0.31.0", "0.33.0"])
def test_vllm_dsv41_support(version: str) -> None:
    d = vllm(version)
    assert DSV41_BACKENDS <= set(d["choices"]["attention_backends"])
    assert "DeepseekV41ForCausalLM" in d["model_architectures"]["supported"]
    assert "DSparkV41DraftModel" in d["model_architectures"]["supported"]


def test_vllm_028_has_no_dsv41() -> None:
    d = vllm("0.28.0")
    assert not {b for b in d["choices"]["attention_backends"] if "DSV41" in b}
    assert "DeepseekV41ForCausalLM" not in d["model_architectures"]["supported"]
    assert "DeepseekV4ForCausalLM" in d["model_architectures"]["supported"]
    assert "nvfp4_ds_mla" not in d["choices"]["kv_cache_dtypes"]


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_env_vars(version: str) -> None:
    envs = set(vllm(version)["env_vars"])
    for gone in ("VLLM_ATTENTION_BACKEND", "VLLM_ALL2ALL_BACKEND", "VLLM_USE_FLASHINFER_MOE_FP4",
                 "VLLM_USE_FLASHINFER_MOE_FP8", "VLLM_FLASHINFER_MOE_BACKEND"):
        assert gone not in envs
    assert {"VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
            "VLLM_DEEP_GEMM_WARMUP", "VLLM_USE_BREAKABLE_CUDAGRAPH", "VLLM_CACHE_ROOT"} <= envs


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_pins_come_from_the_recorded_metadata(version: str) -> None:
    from stackpin.catalog import load_catalog
    from stackpin.engines.pins import exact

    requires = tuple(vllm(version)["requires"])
    pin = load_catalog().versions.vllm[version]
    assert exact(requires, "flashinfer-python") == pin.flashinfer
    assert exact(requires, "torch") == pin.torch


@pytest.mark.parametrize("version", DYNAMO_VERSIONS)
def test_dynamo_worker(version: str) -> None:
    w = dynamo(version)["worker_vllm"]
    mode = w["options"]["--disaggregation-mode"]
    assert {"agg", "prefill", "decode"} <= set(mode["choices"])
    assert mode["env_var"] == "DYN_VLLM_DISAGGREGATION_MODE"
    # Deprecated in 1.3.1's help text only, still registered (with its env var); from 1.4.0 dynamo.vllm no
    # longer registers it at all, so the parser rejects it as unknown (docs/facts.md#dynamo-command-lines).
    if version == "1.3.1":
        assert w["options"]["--is-prefill-worker"]["env_var"] == "DYN_VLLM_IS_PREFILL_WORKER"
    else:
        assert "--is-prefill-worker" not in w["option_strings"]
    assert "--enable-multimodal" in w["boolean_optional_options"]
    assert "--no-enable-multimodal" in w["option_strings"]


@pytest.mark.parametrize("version", DYNAMO_VERSIONS)
def test_dynamo_frontend(version: str) -> None:
    f = dynamo(version)["frontend"]
    assert {"kv", "round-robin", "random"} <= set(f["options"]["--router-mode"]["choices"])
    strings = set(f["option_strings"])
    assert {"--http-port", "--kv-cache-block-size", "--router-mode", "--no-router-kv-events"} <= strings
    assert f["options"]["--http-port"]["type"] == "int"


@pytest.mark.parametrize("version", DYNAMO_VERSIONS)
def test_dynamo_obsolete_flags_are_deprecated_aliases(version: str) -> None:
    frontend = dynamo_catalog(version, "frontend")
    assert frontend is not None
    old = frontend.deprecation("--kv-events")
    assert old is not None and old.replacement == "--router-kv-events"
    no_old = frontend.deprecation("--no-kv-events")
    assert no_old is not None and no_old.replacement == "--no-router-kv-events"
    assert frontend.canonical("--no-kv-events") == "--router-kv-events"


def test_dynamo_16_deprecations_name_their_replacement() -> None:
    frontend = dynamo_catalog("1.6.1", "frontend")
    assert frontend is not None
    credit = frontend.deprecation("--router-kv-overlap-score-credit")
    assert credit is not None and credit.removed_in == "v1.7"
    assert credit.replacement == "overlap_score_credit in the default policy parameters in --router-policy-config"


@pytest.mark.parametrize("version", DYNAMO_VERSIONS)
def test_dynamo_crd_and_pins(version: str) -> None:
    from stackpin.catalog import load_catalog
    from stackpin.engines.pins import exact

    d = dynamo(version)
    versions = load_catalog().versions
    pin = versions.dynamo[version]
    # Every one of these releases' planners reads and patches DGDs as v1beta1 (DYNAMO_API_VERSION), which
    # their operators serve; the pin is the version the operator stores: v1alpha1 until 1.5.0 promoted
    # v1beta1 (Dynamo 1.5.0 release notes, ai-dynamo/dynamo#11904; versions.yaml `dgd_storage`).
    assert d["crd"] == "v1beta1"
    assert pin.crd == versions.dgd_storage.of(version) == ("v1alpha1" if version in {"1.3.1", "1.4.0"} else "v1beta1")
    assert exact(tuple(d["requires"]), "vllm", "vllm") == pin.vllm
    assert exact(tuple(d["requires"]), "nixl", "vllm") == pin.nixl


def test_dgd_storage_is_a_sourced_fact_and_the_pins_follow_it() -> None:
    from stackpin.catalog import load_catalog

    versions = load_catalog().versions
    storage = versions.dgd_storage
    assert str(storage.v1beta1_from) == "1.5.0"
    assert "11904" in storage.source and "deprecations" in storage.source
    assert (storage.of("1.4.2"), storage.of("1.5.0"), storage.of("1.7.0.dev20261026")) == ("v1alpha1", "v1beta1",
                                                                                          "v1beta1")
    assert {v: p.crd for v, p in versions.dynamo.items()} == {v: storage.of(v) for v in versions.dynamo}


def test_dynamo_131_frontend_has_the_flags_its_recipe_passes() -> None:
    # The DeepSeek V4 Flash B200 agentic recipe runs vllm-runtime:1.3.1's frontend with these
    # (tests/data/upstream/recipes_deepseek-v4_deepseek-v4-flash_vllm_disagg-b200-agentic_deploy.yaml);
    # 1.3.1's kv_router_args.py registers --router-reset-states, which 1.4.0 dropped.
    frontend = dynamo_catalog("1.3.1", "frontend")
    assert frontend is not None
    for flag in ("--kv-cache-block-size", "--http-host", "--router-reset-states", "--router-kv-events"):
        assert frontend.accepts(flag), flag
    assert not frontend.accepts("--no-such-frontend-flag")
    later = dynamo_catalog("1.4.0", "frontend")
    assert later is not None and not later.accepts("--router-reset-states")
    assert dynamo("1.3.1")["source"]["sha256"] == "49ba9eba3d08eb22c2ebf8a5fd21b6a1f516775b839058d0120cc0cf66968d1d"


@pytest.mark.parametrize("version", FLASHINFER_VERSIONS)
def test_flashinfer_env_vars(version: str) -> None:
    d = load(f"flashinfer-{version}.json")
    assert d["env_vars"] and all(name.startswith("FLASHINFER_") for name in d["env_vars"])
    assert any(r.startswith("torch") for r in d["requires"])


@pytest.mark.parametrize(("written", "value", "problem"), [
    ("--max-num-seqs", 256, None),
    ("--max-model-len", "32k", None),  # human_readable_int_or_auto parses text; stackpin does not
    ("--max-num-batched-tokens", "16k", None),
    ("--max_num_seqs", 256, None),  # the parser folds underscores
    ("--max-num-seqs", "256", "--max-num-seqs takes int, not '256'"),
    ("--max-num-seqs", True, "--max-num-seqs takes int, not True"),
    ("--gpu-memory-utilization", 1, None),
    ("--enable-prefix-caching", False, None),
    ("--enable-prefix-caching", "no", "--enable-prefix-caching takes true or false, not 'no'"),
    ("--disable-prefix-caching", True, None),
    ("--disable-prefix-caching", False, "--disable-prefix-caching takes true, not False"),
    ("--disable-log-stats", False, "--disable-log-stats takes true, not False"),  # store_true
    ("--performance-mode", "throughput", None),
    ("--performance-mode", "fast", "--performance-mode fast is not one of vLLM 0.33.0's choices: balanced, "
                                   "interactivity, throughput"),
    ("--kv-cache-dtype", "fp9", "--kv-cache-dtype fp9 is not one of vLLM 0.33.0's choices (argparse passes it, "
                                "the engine checks later): "),
    ("--compilation-config", {"cudagraph_mode": "FULL"}, None),
    ("--compilation-config", {"cuda_graph_mode": "FULL"}, "--compilation-config: CompilationConfig has no field "
                                                          "'cuda_graph_mode'"),
    ("--compilation-config.mode", 3, None),
    ("--compilation-config.nope", 3, "--compilation-config.nope: CompilationConfig has no field 'nope'"),
    ("--speculative-config", "{}", "--speculative-config takes json, not '{}'"),
    ("--no-such-option", 1, "--no-such-option is not an option of vLLM 0.33.0"),
])
def test_check_value_says_why_the_engine_would_refuse_a_value(written: str, value: object, problem: str | None) -> None:
    catalog = vllm_catalog("0.33.0")
    assert catalog is not None
    problems = catalog.check_value(written, value)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems
