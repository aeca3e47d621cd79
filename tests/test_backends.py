"""The serving-engine seam (stackpin.backends): one registry, byte-identical vLLM renders, an SGLang worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from stackpin.backends import engine, engine_of, names
from stackpin.lock.lockfile import effective_profile
from stackpin.profile.model import EngineName, StackProfile
from stackpin.profile.topology import topology_of
from stackpin.render import args
from tests.helpers import base_doc, mutate

ROOT = Path(__file__).resolve().parent.parent


def sglang_doc(name: str = "gb300-tuned") -> dict[str, Any]:
    """A shipped vLLM profile moved to SGLang 0.5.21 (what Dynamo 1.6.1's sglang extra pins)."""
    doc = base_doc(name)
    mutate(doc, "spec.engine", "sglang")
    mutate(doc, "spec.versions.vllm", None)
    mutate(doc, "spec.versions.sglang", "0.5.21")
    mutate(doc, "spec.versions.nixl", "1.5.0")
    for path in ("spec.kernels.attention", "spec.kernels.moe", "spec.kernels.linear", "spec.kernels.all2all",
                 "spec.autotune.cache", "spec.cudaGraphs.captureSizes"):
        mutate(doc, path, None)
    mutate(doc, "spec.autotune.mode", "off")
    mutate(doc, "spec.kvCache.dtype", "fp8_e4m3")
    mutate(doc, "spec.speculative", {"method": "EAGLE", "numSpeculativeTokens": 3})
    mutate(doc, "spec.kernels.env", {})
    return doc


def test_the_registry_is_the_profiles_engine_list() -> None:
    assert names() == tuple(e.value for e in EngineName)
    assert all(engine(n).name == n for n in names())
    with pytest.raises(KeyError, match="no serving engine 'trtllm'"):
        engine("trtllm")


def test_each_engines_lock_check_is_its_own_engine_check() -> None:
    from stackpin.enginecheck.check import lock_check
    from stackpin.enginecheck.sglang_check import check_sglang_lock
    from stackpin.enginecheck.vllm_check import check_vllm_lock

    assert lock_check("vllm") is check_vllm_lock and lock_check("sglang") is check_sglang_lock


def test_a_profile_without_engine_runs_vllm_and_locks_as_before() -> None:
    profile = StackProfile.from_data(base_doc())
    assert profile.spec.engine == EngineName.vllm and engine_of(profile).worker_command[-1] == "dynamo.vllm"
    # The lock's profile document (which the stack digest covers) gains no key for the default engine.
    data = effective_profile(profile)
    assert "engine" not in data["spec"] and set(data["spec"]["versions"]) == {
        "dynamo", "vllm", "flashinfer", "nixl", "runtimeImage"}


@pytest.mark.parametrize(("change", "message"), [
    ({"spec.versions.sglang": "0.5.21"}, "spec.versions.sglang pins an engine this stack does not run"),
    ({"spec.engine": "sglang"}, "pin its release in spec.versions.sglang"),
    ({"spec.engine": "trtllm"}, "Expected `str` matching|expected one of|Invalid enum value"),
])
def test_the_engine_and_its_version_agree(change: dict[str, Any], message: str) -> None:
    doc = base_doc()
    for path, value in change.items():
        mutate(doc, path, value)
    with pytest.raises(msgspec.ValidationError, match=message):
        StackProfile.from_data(doc)


def test_every_shipped_lock_renders_its_committed_manifests() -> None:
    """vLLM behind the seam renders every shipped lock byte for byte as committed."""
    from click.testing import CliRunner

    from stackpin.cli.main import main

    result = CliRunner().invoke(main, ["render", "--check", "--lockdir", str(ROOT / "lockfiles"),
                                       "--output-dir", str(ROOT / "manifests")])
    assert result.exit_code == 0, result.output


def test_each_engines_worker_argv_is_its_modelled_table() -> None:
    """Every option an engine's worker_flags writes is in its modelled table (or the Dynamo worker's), so
    validation can name the field behind it and import can read it back."""
    for doc in (base_doc("gb300-tuned"), base_doc("gb300-disagg-wide-ep"), sglang_doc(), sglang_doc(
            "gb300-disagg-wide-ep")):
        profile = StackProfile.from_data(doc)
        eng = engine_of(profile)
        for pool in topology_of(profile).pools:
            written = [f for f, _ in args.worker_flags(profile, pool.role, pool.spec, model_revision="r")]
            own = {"--no-enable-prefix-caching", "--no-enable-flashinfer-autotune", "--kernel-config"}
            assert set(written) - own <= set(eng.modelled) | set(eng.modelled_dynamo), (eng.name, written)


def test_an_sglang_worker_runs_dynamo_sglang_with_sglangs_own_spellings() -> None:
    profile = StackProfile.from_data(sglang_doc())
    pool = topology_of(profile).pools[0]
    argv = args.worker_args(profile, pool.role, pool.spec, model_revision="c" * 40)
    assert engine_of(profile).worker_command == ("python3", "-m", "dynamo.sglang")
    assert argv[:4] == ["--model-path", "deepseek-ai/DeepSeek-V4.1-Flash", "--revision", "c" * 40]
    # TP 4 with expert parallelism and DP 1: SGLang's ep_size equals tp_size (parallel_hook.py:129-131).
    assert argv[argv.index("--tp-size") + 1] == "4" and argv[argv.index("--ep-size") + 1] == "4"
    assert argv[argv.index("--context-length") + 1] == "262144"
    assert argv[argv.index("--max-running-requests") + 1] == "64"
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.9"
    # Chain drafting: num_draft_tokens = num_steps + 1 (speculative_hook.py:1143-1154).
    spec = argv[argv.index("--speculative-algorithm"):]
    assert spec[:8] == ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    # DSpark (the one method SGLang serves V4.1 with): a block of gamma drafts, gamma + 1 verified.
    dspark = sglang_doc()
    mutate(dspark, "spec.speculative", {"method": "DSPARK", "numSpeculativeTokens": 5})
    profile = StackProfile.from_data(dspark)
    argv = args.worker_args(profile, pool.role, pool.spec, model_revision="c" * 40)
    spec = argv[argv.index("--speculative-algorithm"):]
    assert spec[:6] == ["--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5",
                        "--speculative-num-draft-tokens", "6"]
    assert "--disable-flashinfer-autotune" in argv and "--compilation-config" not in argv


def test_wide_ep_on_sglang_keeps_the_gpu_count_with_dp_attention() -> None:
    doc = sglang_doc("gb300-disagg-wide-ep")
    mutate(doc, "spec.speculative", {"method": "DSPARK", "numSpeculativeTokens": 5})
    profile = StackProfile.from_data(doc)
    for pool in topology_of(profile).pools:
        argv = args.worker_args(profile, pool.role, pool.spec, model_revision="r")
        tp, dp = pool.spec.tensor_parallel, pool.spec.data_parallel
        assert argv[argv.index("--disaggregation-mode") + 1] == pool.role
        assert argv[argv.index("--disaggregation-transfer-backend") + 1] == "nixl"
        if pool.spec.expert_parallel and dp > 1:
            # SGLang's DP attention runs inside one TP group: tp_size is the pool's GPUs per replica.
            assert argv[argv.index("--tp-size") + 1] == str(tp * dp) == argv[argv.index("--ep-size") + 1]
            assert "--enable-dp-attention" in argv and "--enable-dp-lm-head" in argv  # DSpark with DP attention


def test_sglang_dp_attention_gets_the_replicas_totals_of_the_per_rank_limits() -> None:
    """maxNumSeqs and maxNumBatchedTokens are per DP rank; under DP attention SGLang divides --max-running-requests
    and --chunked-prefill-size by dp_size (kv_cache_configurator.py:2299-2302, parallel_hook.py:255-266)."""
    from stackpin.profile.loader import load_profile

    profile = load_profile(ROOT / "docs" / "examples" / "gb300-sglang-disagg.yaml").profile
    seen = {}
    for pool in topology_of(profile).pools:
        argv = args.worker_args(profile, pool.role, pool.spec, model_revision="r")
        seen[pool.role] = tuple(argv[argv.index(option) + 1]
                                for option in ("--max-running-requests", "--chunked-prefill-size"))
    assert seen["decode"] == ("512", "131072")  # DP 8 with DP attention: 64 and 16384 a rank
    assert seen["prefill"] == ("16", "16384")  # DP 1: SGLang keeps the values


def test_the_step_models_read_sglangs_speculative_spelling_as_stackpins() -> None:
    """SGLang spells DSpark DSPARK; the simulator's acceptance table keys it dspark (it fell to the default)."""
    from stackpin.sim.roofline import acceptance_rate, load_params
    from stackpin.sim.stack import profile_stack

    doc = sglang_doc()
    mutate(doc, "spec.speculative", {"method": "DSPARK", "numSpeculativeTokens": 5})
    stack = profile_stack(StackProfile.from_data(doc), "s")
    assert stack.decode.spec_method == "dspark" and stack.engine == "SGLang"
    fitted = load_params()["fitted"]
    assert acceptance_rate(stack.decode, fitted) == pytest.approx(float(fitted["acceptance"]["dspark"]))
    assert engine("sglang").speculative_kind("STANDALONE") == "draft_model"
    assert engine("vllm").speculative_kind("dspark") == "dspark"


def test_autotune_capture_and_verify_refuse_an_sglang_stack_in_one_line(tmp_path: Path) -> None:
    """SGLang reads no pinned cache (autotune_dir_env None): capture-job and verify exit 2 saying so; capture-job
    used to fail with 'engine arguments carry no --model' (exit 1), verify to check vLLM's cache layout."""
    from click.testing import CliRunner

    from stackpin.cli.main import main
    from stackpin.errors import StackpinError
    from stackpin.lock.lockfile import read_lock
    from stackpin.render.capture import capture_objects

    said = "SGLang 0.5.21 keeps FlashInfer autotune results in its own cache directory"
    tuned = read_lock(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")
    sglang_lock = tuned.replace(profile=effective_profile(StackProfile.from_data(sglang_doc())))
    with pytest.raises(StackpinError, match=said) as refused:
        capture_objects(sglang_lock)
    assert refused.value.exit_code == 2
    assert capture_objects(tuned)  # vLLM's stacks still get their Jobs
    profile = tmp_path / "s.yaml"
    profile.write_text(msgspec.json.encode(sglang_doc()).decode())
    cache = tmp_path / "cache"
    cache.mkdir()
    result = CliRunner().invoke(main, ["autotune", "verify", str(cache), str(profile)])
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output, result.output


def test_what_sglang_cannot_be_given_is_said_not_dropped() -> None:
    doc = sglang_doc()
    mutate(doc, "spec.kernels.linear", "auto")
    mutate(doc, "spec.cudaGraphs.captureSizes", [8, 16])
    problems = engine_of(StackProfile.from_data(doc)).problems(StackProfile.from_data(doc))
    assert any(p.startswith("spec.kernels.linear:") for p in problems)
    assert any(p.startswith("spec.cudaGraphs.captureSizes:") for p in problems)
    assert engine_of(StackProfile.from_data(sglang_doc())).problems(StackProfile.from_data(sglang_doc())) == []


def test_an_sglang_stack_validates_locks_renders_and_diffs_against_vllm(tmp_path: Path) -> None:
    """docs/examples' SGLang stacks through the whole path, on the demo mirror's stand-ins."""
    import shutil

    import yaml
    from click.testing import CliRunner

    from stackpin.cli.main import main
    from stackpin.demo.mirror import build_demo_mirror
    from stackpin.profile.loader import load_profile

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name in ("gb300-sglang.yaml", "gb300-sglang-disagg.yaml"):
        shutil.copy(ROOT / "docs" / "examples" / name, profiles / name)
    shutil.copy(ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml", profiles / "gb300-tuned.yaml")
    build_demo_mirror(tmp_path / "mirror", [load_profile(p).profile for p in sorted(profiles.glob("*.yaml"))])
    run = CliRunner().invoke
    assert run(main, ["validate", str(profiles)]).exit_code == 0
    locked = run(main, ["lock", str(profiles), "--oci-layout", str(tmp_path / "mirror" / "oci"),
                        "--hf-cache", str(tmp_path / "mirror" / "hf"), "--lockdir", str(tmp_path / "locks")])
    assert locked.exit_code == 0, locked.output
    out = tmp_path / "manifests"
    rendered = run(main, ["render", "--lockdir", str(tmp_path / "locks"), "--output-dir", str(out)])
    assert rendered.exit_code == 0, rendered.output
    [dgd] = [yaml.safe_load(p.read_text()) for p in (out / "gb300-sglang-disagg").glob("dynamographdeployment-*")]
    assert dgd["spec"]["backendFramework"] == "sglang"
    commands = {c["name"]: c["podTemplate"]["spec"]["containers"][0] for c in dgd["spec"]["components"]}
    assert commands["decode"]["command"][-1] == "dynamo.sglang"
    assert "--enable-dp-attention" in commands["decode"]["args"]
    # Each worker attests the engine it runs: SGLang's distribution at the locked release.
    config = yaml.safe_load(next((out / "gb300-sglang").glob("configmap-*")).read_text())
    expected = json.loads(config["data"]["expected.json"])
    assert expected["packages"]["sglang"] == "0.5.21" and "vllm" not in expected["packages"]
    # import reads the rendered DGD back to the example's per-rank limits, with no note about pools differing
    # (the decode pool's --revision was compared with a revision already taken out of the stack-wide fields).
    imported = run(main, ["import", str(out / "gb300-sglang-disagg" / "dynamographdeployment-dsv41-flash.yaml"),
                          "--out", str(tmp_path / "imported.yaml")])
    assert imported.exit_code == 0 and "differs from" not in imported.output, imported.output
    pools = yaml.safe_load((tmp_path / "imported.yaml").read_text())["spec"]["placement"]["pools"]
    assert (pools["decode"]["maxNumSeqs"], pools["decode"]["maxNumBatchedTokens"]) == (64, 16384)
    assert pools["decode"]["tensorParallel"] == 2
    diff = run(main, ["diff", str(tmp_path / "locks" / "gb300-tuned.lock.yaml"),
                      str(tmp_path / "locks" / "gb300-sglang.lock.yaml")])
    assert "engine serving engine  recreate" in diff.output
    assert "backendFramework vllm -> sglang" in diff.output
