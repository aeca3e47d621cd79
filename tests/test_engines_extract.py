"""The extractor on small packages in the real shapes (devkit/enginepkgs.py): a vLLM sdist and wheel,
an ai-dynamo wheel, a flashinfer-python wheel. What a user of the catalog sees: every option string the
parser accepts, which are negative, hidden or deprecated (and for what), types, defaults, choices,
config classes, env vars, pins and the package's sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from devkit import enginepkgs as pkgs
from stackpin.catalog.engine_data import DynamoRelease, FlashinferRelease, VllmRelease
from stackpin.engines.add import extract
from stackpin.engines.package import PackageError, read_package
from stackpin.engines.pins import pin_of


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("packages")
    return {"sdist": pkgs.vllm_sdist(root), "wheel": pkgs.vllm_wheel(root),
            "old": pkgs.vllm_sdist(root, "8.0.0", inverse_action=False),
            "dynamo": pkgs.dynamo_wheel(root), "flashinfer": pkgs.flashinfer_wheel(root)}


def vllm_of(path: Path) -> VllmRelease:
    release = extract(read_package(path))
    assert isinstance(release, VllmRelease)
    return release


@pytest.fixture(scope="module")
def vllm(built: dict[str, Path]) -> VllmRelease:
    return vllm_of(built["sdist"])


def test_boolean_options_answer_to_no_x_and_the_inverse_prefix(vllm: VllmRelease) -> None:
    prefix = vllm.options["--enable-prefix-caching"]
    assert prefix.negatives == ("--disable-prefix-caching", "--no-enable-prefix-caching")
    assert prefix.hidden == ("--no-enable-prefix-caching",)
    deprecation = prefix.deprecated["--no-enable-prefix-caching"]
    assert deprecation.replacement == "--disable-prefix-caching"
    assert "hidden from help" in (deprecation.message or "")  # the action's own docstring
    assert "--disable-prefix-caching" not in prefix.deprecated
    # The reverse direction: --disable-x also answers to --enable-x.
    reduce = vllm.options["--disable-custom-all-reduce"]
    assert reduce.negatives == ("--enable-custom-all-reduce", "--no-disable-custom-all-reduce")
    assert reduce.deprecated["--no-disable-custom-all-reduce"].replacement == "--enable-custom-all-reduce"
    # A short string gets no negative; store_true options none at all.
    assert vllm.options["--enable-expert-parallel"].negatives == ("--disable-expert-parallel",
                                                                  "--no-enable-expert-parallel")
    assert vllm.options["--disable-log-stats"].negatives == ()
    assert vllm.options["--disable-log-stats"].store_true and vllm.options["--disable-log-stats"].default is False
    # AsyncEngineArgs.add_cli_args' option, default read from the class attribute.
    assert vllm.options["--enable-log-requests"].negatives == ("--disable-log-requests", "--no-enable-log-requests")
    assert vllm.options["--enable-log-requests"].default is False
    registered = {s for option in vllm.options.values() for s in option.strings}
    assert set(vllm.option_strings) - registered == {s for o in vllm.options.values() for s in o.negatives}
    assert vllm.boolean_optional_options == ("--disable-cascade-attn", "--disable-custom-all-reduce",
                                             "--enable-expert-parallel", "--enable-flashinfer-autotune",
                                             "--enable-log-requests", "--enable-prefix-caching")


def test_without_the_inverse_action_only_argparse_no_forms_exist(built: dict[str, Path]) -> None:
    old = vllm_of(built["old"])
    prefix = old.options["--enable-prefix-caching"]
    assert prefix.negatives == ("--no-enable-prefix-caching",)
    assert prefix.hidden == () and prefix.deprecated == {}
    assert old.parser.inverse_prefixes == {} and not old.parser.no_forms_hidden_with_inverse
    assert not [s for s in old.option_strings if s.startswith("--disable-prefix")]


def test_deprecated_options_name_their_replacement(vllm: VllmRelease) -> None:
    # A custom action that warns with a module message, and the same message as help.
    log = vllm.options["--log-file"].deprecated["--log-file"]
    assert log.replacement == "--logging-config.file" and log.removed_in == "v9.9.0"
    # Deprecated in its help text, with no replacement: every spelling of it is deprecated.
    cascade = vllm.options["--disable-cascade-attn"]
    assert set(cascade.deprecated) == {"--disable-cascade-attn", "--enable-cascade-attn", "--no-disable-cascade-attn"}
    assert all(d.replacement is None and "no effect" in (d.message or "") for d in cascade.deprecated.values())
    # Only a module-level message says so (the engine warns when it is built, not when parsing).
    assert vllm.options["--op-priority"].deprecated["--op-priority"].replacement is None
    assert not vllm.options["--block-size"].deprecated


def test_types_defaults_and_choices_follow_the_config_fields(vllm: VllmRelease) -> None:
    options = vllm.options
    assert (options["--block-size"].type, options["--block-size"].default) == ("int", 16)  # a module constant
    # get_kwargs gives this field its converter by name (`if name == "block_size": ...["type"] = parse_int`).
    assert options["--block-size"].converter == "parse_int"
    assert options["--gpu-memory-utilization"].converter is None  # a builtin, no package function
    assert options["--block-size"].config_field == "CacheConfig.block_size"
    assert (options["--tensor-parallel-size"].strings, options["--tensor-parallel-size"].default) == (
        ("--tensor-parallel-size", "-tp"), 1)
    assert options["--gpu-memory-utilization"].strings == ("--device-memory-utilization", "--gpu-memory-utilization")
    assert options["--gpu-memory-utilization"].type == "float"
    # {**kwargs["enable_prefix_caching"], "default": None}
    assert options["--enable-prefix-caching"].type == "bool" and options["--enable-prefix-caching"].default is None
    # Literal[...] | str: listed as a metavar, any string passes argparse.
    assert options["--kv-cache-dtype"].choices == ("auto", "fp8", "fp8_ds_mla")
    assert options["--kv-cache-dtype"].choices_enforced_by_argparse is False
    assert options["--prefix-caching-hash-algo"].choices_enforced_by_argparse is True
    # choices.remove(PASSTHROUGH_ALL2ALL_BACKEND) before the option is added.
    assert options["--all2all-backend"].choices == ("allgather_reducescatter", "naive")
    assert vllm.choices["all2all_backends_config"] == ("allgather_reducescatter", "naive", "passthrough")
    # An in-place type override keeps the field's choices; json.loads makes a JSON option.
    assert options["--moe-backend"].choices == ("auto", "cutlass", "flashinfer_trtllm")
    assert options["--speculative-config"].type == "json"
    assert options["--speculative-config"].config_class == "SpeculativeConfig"
    # type=parse_int: the converter's return annotation.
    assert options["--data-parallel-rank"].type == "int"
    assert options["--gdn-backend"].choices == ("flashinfer", "triton")
    assert options["--gdn-backend"].choices_enforced_by_argparse is True
    assert options["--log-file"].default_expr == "argparse.SUPPRESS"
    assert options["--compilation-config"].default_expr == "Field(default_factory=CompilationConfig)"


def test_config_classes_of_json_options(vllm: VllmRelease) -> None:
    compilation = vllm.config_classes["CompilationConfig"]
    assert compilation.module == "vllm/config/compilation.py"
    assert set(compilation.fields) == {"mode", "cudagraph_mode", "cudagraph_capture_sizes", "pass_config",
                                       "compilation_time"}
    # field(init=False): recorded, but not a key a JSON value may hold
    assert compilation.keys == ("mode", "cudagraph_mode", "cudagraph_capture_sizes", "pass_config")
    assert not compilation.fields["compilation_time"].init and compilation.fields["mode"].init
    assert compilation.fields["cudagraph_capture_sizes"].type == "list"
    assert compilation.fields["pass_config"].config_class == "PassConfig"
    assert vllm.config_classes["PassConfig"].fields["fuse_norm_quant"].default is False
    method = vllm.config_classes["SpeculativeConfig"].fields["method"]
    assert method.choices == ("deepseek_mtp", "eagle", "mtp", "ngram")


def test_parser_rules_and_value_lists(vllm: VllmRelease) -> None:
    assert vllm.parser.underscores_as_dashes and vllm.parser.dotted_json_keys
    assert vllm.parser.optimization_level_shorthand and vllm.parser.no_forms_hidden_with_inverse
    assert vllm.parser.inverse_prefixes == {"--enable-": "--disable-", "--disable-": "--enable-"}
    assert any("-O<n>" in rule for rule in vllm.rules)
    choices = vllm.choices
    assert choices["speculative_methods"] == ("deepseek_mtp", "eagle", "mtp", "ngram")
    assert choices["speculative_mtp_aliases"] == ("deepseek_mtp",)
    assert choices["cudagraph_modes"] == ("FULL", "NONE", "PIECEWISE")
    assert choices["optimization_levels"] == ("0", "1", "2", "3")
    assert choices["attention_backends"] == ("FLASHINFER_MLA_SPARSE", "FLASH_ATTN")
    assert vllm.model_architectures == {"supported": ("DeepseekV41ForCausalLM", "LlamaForCausalLM"),
                                        "previously_supported": ("OldForCausalLM",)}
    assert vllm.engine_args_fields == ("disable_cascade_attn", "enable_prefix_caching", "model",
                                       "tensor_parallel_size")
    assert vllm.unresolved == ()


def test_env_vars_with_types_defaults_and_choices(vllm: VllmRelease) -> None:
    env = vllm.env_vars
    assert set(env) == {"VLLM_CACHE_ROOT", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
                        "VLLM_KV_CACHE_LAYOUT"}
    assert (env["VLLM_ENGINE_READY_TIMEOUT_S"].type, env["VLLM_ENGINE_READY_TIMEOUT_S"].default) == ("int", 600)
    assert env["VLLM_CACHE_ROOT"].default_expr == "os.path.expanduser('~/.cache/vllm')"
    assert env["VLLM_KV_CACHE_LAYOUT"].choices == ("HND", "NHD")


def test_source_sha256_requires_and_pins(built: dict[str, Path], vllm: VllmRelease) -> None:
    assert vllm.source.package == "vllm-9.0.0.tar.gz"
    assert vllm.source.sha256 == hashlib.sha256(built["sdist"].read_bytes()).hexdigest()
    assert "vllm/engine/arg_utils.py" in vllm.source.files_parsed
    assert not [f for f in vllm.source.files_parsed if f.startswith("tests/")]
    assert pin_of(vllm) == ("vllm", {"flashinfer": "0.7.2.post1", "torch": "2.14.0"})


def test_a_wheel_gives_the_catalog_its_sdist_gives(built: dict[str, Path], vllm: VllmRelease) -> None:
    wheel = vllm_of(built["wheel"])
    assert wheel.source.package.endswith(".whl") and wheel.source.sha256 != vllm.source.sha256
    assert wheel.replace(source=vllm.source) == vllm


def test_the_test_packages_are_byte_stable(tmp_path: Path, built: dict[str, Path]) -> None:
    assert pkgs.vllm_sdist(tmp_path).read_bytes() == built["sdist"].read_bytes()
    assert pkgs.dynamo_wheel(tmp_path).read_bytes() == built["dynamo"].read_bytes()


def test_dynamo_options_from_its_helpers(built: dict[str, Path]) -> None:
    release = extract(read_package(built["dynamo"]))
    assert isinstance(release, DynamoRelease)
    worker, frontend = release.worker_vllm.options, release.frontend.options
    mode = worker["--disaggregation-mode"]
    assert (mode.choices, mode.env_var, mode.type) == (("agg", "decode", "pd", "prefill"),
                                                       "DYN_VLLM_DISAGGREGATION_MODE", "str")
    # add_negatable_bool_argument passes BooleanOptionalAction to add_argument: a boolean option.
    events = frontend["--router-kv-events"]
    assert events.strings == ("--kv-events", "--router-kv-events")
    assert events.negatives == ("--no-kv-events", "--no-router-kv-events")
    assert events.deprecated["--kv-events"].replacement == "--router-kv-events"
    assert events.deprecated["--no-kv-events"].replacement == "--no-router-kv-events"
    assert events.default is True
    # deprecated=_policy("temperature"): the helper's f-string with the argument put in.
    temperature = frontend["--router-temperature"]
    deprecation = temperature.deprecated["--router-temperature"]
    assert (deprecation.replacement, deprecation.removed_in) == ("temperature in --router-policy-config", "v9.7")
    assert temperature.type == "float"  # arg_type=nullable_float, read by its return annotation
    aware = frontend["--load-aware"]
    assert set(aware.deprecated) == {"--load-aware", "--no-load-aware"}
    assert "[deprecated" in (frontend["--http-pool-timeout"].deprecated["--http-pool-timeout"].message or "")
    assert frontend["--http-port"].type == "int" and frontend["--http-port"].default == 8000
    assert frontend["--router-mode"].type == "str"  # the helper's arg_type default
    assert "--version" in release.worker_vllm.option_strings
    assert "--http-port" not in release.worker_vllm.option_strings
    assert release.crd == "v1beta1"
    assert release.env_vars["DYN_HTTP_PORT"].option == "--http-port"
    # The sglang extra pins sglang==0.5.21 and no nixl: the optional sglang_nixl is left out.
    assert pin_of(release) == ("dynamo", {"vllm": "9.0.0", "nixl": "1.4.1", "crd": "v1beta1", "sglang": "0.5.21"})
    assert release.worker_sglang is None  # this package has no dynamo/sglang/


def test_flashinfer_env_reads(built: dict[str, Path]) -> None:
    release = extract(read_package(built["flashinfer"]))
    assert isinstance(release, FlashinferRelease)
    assert set(release.env_vars) == {"FLASHINFER_AUTOTUNE_DIR", "FLASHINFER_LOGLEVEL", "FLASHINFER_CUDA_ARCH_LIST",
                                     "FLASHINFER_DISABLE_VERSION_CHECK"}
    assert release.env_vars["FLASHINFER_AUTOTUNE_DIR"].default == "~/.cache/flashinfer"
    assert pin_of(release) is None


def test_what_is_no_package_says_so_in_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "vllm-1.0.0.whl"
    junk.write_bytes(b"not a zip")
    with pytest.raises(PackageError, match=r"^vllm-1.0.0.whl: not a readable archive"):
        read_package(junk)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(PackageError, match="neither a wheel"):
        read_package(text)
    other = pkgs._zip(tmp_path / "requests-2.0.0-py3-none-any.whl", {
        "requests/__init__.py": "", "requests-2.0.0.dist-info/METADATA": pkgs._metadata("requests", "2.0.0", [])})
    with pytest.raises(PackageError, match="'requests' is not one stackpin catalogs"):
        read_package(other)
    bare = pkgs._tar(tmp_path / "vllm-1.0.0.tar.gz", "vllm-1.0.0", {"vllm/__init__.py": ""})
    with pytest.raises(PackageError, match="no PKG-INFO"):
        read_package(bare)


def test_dynamic_metadata_without_pins_is_refused(tmp_path: Path) -> None:
    from stackpin.errors import StackpinError

    release = vllm_of(pkgs.vllm_sdist(tmp_path, requires=["regex"]))
    with pytest.raises(StackpinError, match="no flashinfer, torch pin"):
        pin_of(release)
