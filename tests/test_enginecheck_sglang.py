"""The SGLang engine check (stackpin/enginecheck/sglang_check.py): a dynamo.sglang worker's flags through the pinned
SGLang 0.5.21's own parser and ServerArgs resolution, in its engine environment (.enginecheck/sglang-0.5.21;
`make engine-env` builds it, CI requires it). The model is DeepSeek V4.1 Flash with the catalog's config.json in
a scratch Hugging Face cache read offline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stackpin.catalog.flags import dynamo_catalog
from stackpin.catalog.model_configs import model_config
from stackpin.enginecheck.check import EngineCheckError
from stackpin.enginecheck.sglang_check import SglangGpu, check_sglang_argv, split_dynamo_options
from tests.lockkit import ROOT
from tests.ownenv import own_env

ENGINE_PYTHON = ROOT / ".enginecheck" / "sglang-0.5.21" / "bin" / "python"
UNAVAILABLE = ROOT / ".enginecheck" / "sglang" / "UNAVAILABLE"
GB300 = SglangGpu("NVIDIA GB300", (10, 3), 277.5, 4)
H200 = SglangGpu("NVIDIA H200", (9, 0), 140, 4)
MODEL = ["--model-path", "deepseek-ai/DeepSeek-V4.1-Flash", "--revision", "main", "--tp-size", "4"]
# DeepSeek V4.1 with DSpark, as stackpin's SGLang render writes it, with one of Dynamo's own options among them.
DSPARK = [*MODEL, "--attention-backend", "dsv4", "--cuda-graph-max-bs-decode", "64", "--speculative-algorithm",
          "DSPARK", "--speculative-dspark-block-size", "3", "--speculative-num-draft-tokens", "4",
          "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.85", "--endpoint", "dyn://ns.backend.generate"]


@pytest.fixture(scope="module")
def engine() -> Path:
    return own_env(ENGINE_PYTHON, UNAVAILABLE, "SGLang engine check", "engine-env", "STACKPIN_REQUIRE_ENGINE_CHECK")


def _check(argv: list[str], engine: Path, gpu: SglangGpu = GB300):
    return check_sglang_argv(argv, {}, gpu, engine, model_config=model_config("deepseek-v4.1-flash"))


def test_a_deepseek_dspark_worker_is_accepted_with_what_sglang_resolved(engine: Path) -> None:
    verdict = _check(DSPARK, engine)
    assert verdict.accepted and verdict.message == "SGLang 0.5.21 accepts the worker", verdict.message
    assert verdict.dynamo_options == ("--endpoint", "dyn://ns.backend.generate")
    assert "--endpoint" not in verdict.sglang_argv
    resolved = verdict.resolved
    assert (resolved["attention_backend"], resolved["kv_cache_dtype"], resolved["mem_fraction_static"]) == (
        "dsv4", "fp8_e4m3", 0.85)
    assert (resolved["speculative_algorithm"], resolved["speculative_num_draft_tokens"],
            resolved["speculative_dspark_block_size"]) == ("DSPARK", 4, 3)
    assert resolved["tp_size"] == 4 and resolved["dp_size"] == 1 and resolved["disaggregation_mode"] == "null"
    # SGLang's own decisions: the decode capture list up to the cap, no prefill graph for DeepSeek V4 (breakable
    # graphs are off for it), its MoE runner and running-request default for the model on SM103.
    assert resolved["cuda_graph_max_bs"] == 64 and resolved["cuda_graph_bs"][-1] == 64
    assert resolved["cuda_graph_decode"]["backend"] == "full"
    assert resolved["cuda_graph_prefill"]["backend"] == "disabled"
    assert resolved["moe_runner_backend"] == "flashinfer_mxfp4" and resolved["max_running_requests"] == 256
    assert any("NVIDIA GB300, compute capability 10.3" in s for s in verdict.stand_ins)
    assert "CUDA graph capture" in verdict.skipped


def test_an_unknown_attention_backend_is_refused_by_sglangs_parser(engine: Path) -> None:
    verdict = _check([*MODEL, "--attention-backend", "no_such_backend"], engine)
    assert not verdict.accepted and verdict.stage == "parse"
    assert verdict.error is not None and verdict.error.startswith(
        "_ArgvError: argument --attention-backend: invalid choice: 'no_such_backend'")
    assert verdict.message.startswith("SGLang 0.5.21 refuses the worker at parse: _ArgvError: argument "
                                      "--attention-backend: invalid choice")


def test_eagle_on_deepseek_v41_is_refused_while_sglang_resolves(engine: Path) -> None:
    """sglang/srt/arg_groups/deepseek_v4_hook.py validate_deepseek_v41_features: only DSpark drafts V4.1."""
    verdict = _check([*MODEL, "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], engine)
    assert not verdict.accepted and verdict.stage == "resolve" and verdict.resolved == {}
    assert verdict.error == ("ValueError: DeepSeek-V4.1 does not support speculative decoding other than DSpark "
                             "yet; disable it to serve this model.")


def test_the_gpu_reported_is_the_one_sglang_sizes_memory_for(engine: Path) -> None:
    """With no --mem-fraction-static SGLang derives it from the GPU's memory (arg_groups/memory_hook.py
    handle_gpu_memory_settings): the spec's GB300 and H200 get different fractions."""
    fractions = {gpu.name: _check(MODEL, engine, gpu).resolved["mem_fraction_static"] for gpu in (GB300, H200)}
    assert fractions == {"NVIDIA GB300": 0.906, "NVIDIA H200": 0.9}


def test_dynamos_own_options_and_mode_rewrites_are_split_off_as_the_worker_does() -> None:
    dynamo = dynamo_catalog("1.6.1", "worker_sglang")
    assert dynamo is not None
    modes = {"agg": "null", "pd": "null", "encode": None}
    sglang, taken = split_dynamo_options(
        ["--model-path", "m", "--endpoint=dyn://a.b.c", "--disaggregation-mode", "agg", "--tp-size", "2"], dynamo,
        modes)
    assert sglang == ["--model-path", "m", "--disaggregation-mode", "null", "--tp-size", "2"]
    assert taken == ["--endpoint=dyn://a.b.c"]
    assert split_dynamo_options(["--disaggregation-mode=encode", "--model-path", "m"], dynamo, modes)[0] == [
        "--model-path", "m"]
    # Without a catalog nothing is taken: SGLang's parser then names what it does not know.
    assert split_dynamo_options(["--endpoint", "x"], None) == (["--endpoint", "x"], [])


def test_no_engine_python_is_one_error_naming_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(EngineCheckError, match=r"no such Python; build the SGLang engine environment with "
                                               r"`python3 -m stackpin.enginecheck.envbuild --sglang VERSION`"):
        check_sglang_argv(MODEL, {}, GB300, tmp_path / "missing" / "python")


def test_engines_check_runs_each_pool_of_an_sglang_lock_through_sglang(engine: Path, tmp_path: Path) -> None:
    """`stackpin engines check` on SGLang locks: the shipped example stacks pass; the disaggregated one with
    DSpark on is refused in SGLang's own words (DSpark PD needs Mooncake and DP 1), naming each pool."""
    import shutil

    from click.testing import CliRunner

    from stackpin.cli.main import main
    from stackpin.demo.mirror import build_demo_mirror
    from stackpin.profile.loader import load_profile

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name in ("gb300-sglang.yaml", "gb300-sglang-disagg.yaml"):
        shutil.copy(ROOT / "docs" / "examples" / name, profiles / name)
    dspark = (profiles / "gb300-sglang-disagg.yaml").read_text().replace(
        "  speculative:\n    method: null\n    numSpeculativeTokens: null\n", "")
    (profiles / "gb300-dspark-disagg.yaml").write_text(dspark.replace("name: gb300-sglang-disagg",
                                                                      "name: gb300-dspark-disagg"))
    build_demo_mirror(tmp_path / "m", [load_profile(p).profile for p in sorted(profiles.glob("*.yaml"))])
    run = CliRunner().invoke
    locks = tmp_path / "locks"
    locked = run(main, ["lock", str(profiles), "--oci-layout", str(tmp_path / "m" / "oci"),
                        "--hf-cache", str(tmp_path / "m" / "hf"), "--lockdir", str(locks)])
    assert locked.exit_code == 0, locked.output
    good = run(main, ["engines", "check", str(locks / "gb300-sglang.lock.yaml"),
                      str(locks / "gb300-sglang-disagg.lock.yaml"), "--python", str(engine)])
    assert good.exit_code == 0, good.output
    assert "ok gb300-sglang worker: SGLang 0.5.21 resolves attention_backend dsv4" in good.output
    assert "ok gb300-sglang-disagg decode:" in good.output
    bad = run(main, ["engines", "check", str(locks / "gb300-dspark-disagg.lock.yaml"), "--python", str(engine)])
    assert bad.exit_code == 1
    for role in ("prefill", "decode"):
        assert f"problem gb300-dspark-disagg {role}: SGLang 0.5.21 refuses the worker at resolve" in bad.output
    assert "DSpark PD requires static verify, Mooncake, DP=1" in bad.output
