"""The engine check: every shipped stack through the pinned vLLM 0.31.0's own code, on CPU.

These tests run vLLM itself (its published wheel, in the environment scripts/install-engine-check.sh builds in
.enginecheck/; `make test` builds it when it can): its argument parser and engine-config construction from
the argv and env render writes, then the pure-Python steps of model build. What they stand in for is narrow
and named in stackpin/enginecheck/check_runtime.py: the compiled CUDA extensions (never called while a
config is built) and the GPU's identity (a CUDA platform reporting the rack's capability, name and memory).
Weights, memory profiling, CUDA graph capture and kernels need a GPU and are not run.

Each defect issue 17 found on the shipped stacks is reproduced here against vLLM's own code, so the check
is shown to catch it, and the fixed stacks are shown to pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import pytest

from stackpin.enginecheck.check import check_lock
from stackpin.enginecheck.vllm_check import judge, pool_specs, run_pool
from stackpin.lock.lockfile import StackLock
from tests.lockkit import ROOT, shipped_locks, with_profile_value
from tests.ownenv import own_env

ENGINE_PYTHON = Path(os.environ.get("STACKPIN_ENGINE_PYTHON", ROOT / ".enginecheck" / "vllm-0.31.0" / "bin" / "python"))
UNAVAILABLE = ROOT / ".enginecheck" / "UNAVAILABLE"
REVISION = "507aab8f74cbb3e9b06fe5356548a23b91d3deaf"  # the demo mirror's stand-in model revision


def _engine() -> Path:
    return own_env(ENGINE_PYTHON, UNAVAILABLE, "engine check", "engine-env", "STACKPIN_REQUIRE_ENGINE_CHECK")


@pytest.fixture(scope="module")
def engine() -> Path:
    return _engine()


def _one_pool(lock: StackLock, role: str, engine: Path, tmp_path: Path,
              argv_edit: Any = None) -> tuple[dict[str, Any], list[str]]:
    """vLLM's answer and stackpin's judgement for one pool, the argv optionally edited first."""
    [spec] = [s for r, s in pool_specs(lock, tmp_path) if r == role]
    if argv_edit is not None:
        spec["vllm_argv"] = argv_edit(spec["vllm_argv"])
    result = run_pool(engine, spec, tmp_path)
    return result, judge(lock, role, result, spec["env"].get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"))


# --- every shipped stack starts as declared ----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(shipped_locks()))
def test_every_pool_of_every_shipped_stack_passes_the_pinned_vllm(name: str, engine: Path) -> None:
    lock = shipped_locks()[name]
    pools = check_lock(lock, engine)
    assert pools and all(p.ok for p in pools), [(p.role, p.problems) for p in pools]
    profile = lock.stack_profile
    for pool in pools:
        result = pool.result
        assert result["vllm_version"] == "0.31.0" and result["failed"] is None
        config, model = result["config"], result["model"]
        assert config["cudagraph_mode"] == model["cudagraph_mode_runtime"] == profile.spec.cuda_graphs.mode.value
        assert model["kernel_block_size"] == config["block_size"] == 128
        # Every backbone layer's attention built by its own constructor, the published V4.1 topology.
        assert model["attention_layers"] == 40 and model["compress_ratios"] == [0, 1, 2]
        assert model["kv_source_layers"] == [2, 8, 14, 20]
        # The draft reads the target's checkpoint at the locked revision, as the target does.
        assert result["speculative"]["draft_revision"] == result["speculative"]["target_revision"] == REVISION
        assert "CUDA graph capture" in " ".join(result["skipped"])


# --- the defects of the stacks as they were, reproduced by vLLM's own code -------------------------------

def test_flashinfer_sparse_with_the_packed_kv_cache_raises_while_the_model_is_built(engine: Path,
                                                                                   tmp_path: Path) -> None:
    """gb300-launch as shipped before: FLASHINFER_MLA_SPARSE_DSV41 stores plain KV rows, so fp8_ds_mla raises
    in the layer's constructor (models/deepseek_v41/attention.py:159-164) and no worker becomes ready."""
    old = with_profile_value(shipped_locks()["gb300-launch"], ("spec", "kvCache", "dtype"), "fp8_ds_mla")
    result, problems = _one_pool(old, "decode", engine, tmp_path)
    assert result["failed"] is not None and "fp8_ds_mla is a packed FlashMLA" in result["failed"]["error"]
    assert problems and "fails at" in problems[0]


@pytest.mark.parametrize("name", ["gb300-launch", "gb300-tuned"])
def test_a_64_token_kv_block_has_no_common_kernel_block_size(name: str, engine: Path, tmp_path: Path) -> None:
    """Every DSV41 kernel and the indexer take 128-token blocks on SM 10.x: select_common_block_size raises
    for 64 (v1/worker/utils.py:330-392), after the weights are loaded."""
    old = with_profile_value(shipped_locks()[name], ("spec", "kvCache", "blockSize"), 64)
    role = "decode" if name == "gb300-launch" else "worker"
    result, _ = _one_pool(old, role, engine, tmp_path)
    assert result["failed"] is not None and "No common block size for 64" in result["failed"]["error"]


@pytest.mark.parametrize("name", ["gb300-tuned", "gb300-disagg-wide-ep"])
def test_breakable_graphs_off_runs_full_and_piecewise_as_full_decode_only(name: str, engine: Path,
                                                                         tmp_path: Path) -> None:
    """VLLM_USE_BREAKABLE_CUDAGRAPH=0: DeepseekV41ForCausalLM is never torch.compiled, so the model runner has
    no piecewise capture and adaptive verification drops FULL_AND_PIECEWISE to FULL_DECODE_ONLY silently."""
    old = with_profile_value(shipped_locks()[name], ("spec", "kernels", "env", "VLLM_USE_BREAKABLE_CUDAGRAPH"), "0")
    role = "worker" if name == "gb300-tuned" else "prefill"
    result, problems = _one_pool(old, role, engine, tmp_path)
    assert result["config"]["cudagraph_mode"] == "FULL_AND_PIECEWISE"  # what the config says...
    assert result["model"]["cudagraph_mode_runtime"] == "FULL_DECODE_ONLY"  # ... and what the runner captures
    assert not result["model"]["piecewise_capture_available"]
    assert problems == ["cudaGraphs.mode FULL_AND_PIECEWISE runs as FULL_DECODE_ONLY (piecewise capture "
                        "available: False)"]


def test_a_draft_without_the_revision_loads_the_default_branch(engine: Path, tmp_path: Path) -> None:
    """The dspark draft is read from the target's checkpoint at the speculative config's own revision
    (config/speculative.py:1297), never the target's --revision: rendered without it, vLLM's draft config
    says None (the Hub's default branch)."""
    lock = shipped_locks()["gb300-tuned"]

    def without_revision(argv: list[str]) -> list[str]:
        i = argv.index("--speculative-config") + 1
        config = json.loads(argv[i])
        del config["revision"]
        return [*argv[:i], json.dumps(config), *argv[i + 1:]]

    result, problems = _one_pool(lock, "worker", engine, tmp_path, without_revision)
    assert result["speculative"]["draft_revision"] is None
    assert result["speculative"]["target_revision"] == REVISION
    assert problems == [f"the dspark draft loads revision None, the target {REVISION}"]


# --- the autotune cache: capture layout -> pack -> mount as rendered -> vLLM's own resolver ------------

def _read_only(path: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """argv with `path` bind-mounted read-only, as a Kubernetes image volume is (root writes through file
    modes, so only a read-only mount shows what vLLM would do to the image)."""
    script = f'mount --bind "{path}" "{path}" && mount -o remount,bind,ro "{path}" && exec "$@"'
    return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *argv], capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_pinned_cache_is_found_by_vllms_resolver_in_the_seeded_copy_and_never_written(
        engine: Path, tmp_path: Path) -> None:
    from stackpin.autotune.image import pack_cache
    from stackpin.render.build import build_objects

    if shutil.which("unshare") is None:
        pytest.skip("no unshare here for a read-only mount")
    lock = shipped_locks()["gb300-tuned"]
    [spec] = [s for r, s in pool_specs(lock, tmp_path / "first") if r == "worker"]
    # 1. Where vLLM keeps this engine's tuning: its own resolver, on an empty cache directory.
    first = run_pool(engine, spec, tmp_path / "first")
    assert first["failed"] is None, first["failed"]
    config_hash = first["autotune"]["config_hash_dir"]
    # 2. The capture's layout, as vLLM writes it under VLLM_CACHE_ROOT (flashinfer_autotune_cache/<fi>/<arch>/
    #    <hash>/), packed as `stackpin autotune pack` packs it, unpacked as the image volume shows it.
    captured = tmp_path / "capture" / "flashinfer_autotune_cache" / "0.7.0.post1" / "103a" / config_hash
    captured.mkdir(parents=True)
    content = json.dumps({"_metadata": {"gpu": "NVIDIA GB300"}, "k": ["Runner", 1]}).encode()
    (captured / "autotune_configs.json").write_bytes(content)
    image = tmp_path / "image"
    image.mkdir()
    subprocess.run(["tar", "-xzf", "-", "-C", str(image)], input=pack_cache(tmp_path / "capture"), check=True)
    # 3. The seed init container, as rendered, with its paths under this tree.
    pod = next(c for c in build_objects(lock)[0]["spec"]["components"] if c["name"] == "worker")["podTemplate"]
    [seed] = [c for c in pod["spec"]["initContainers"] if c["name"] == "autotune-seed"]
    mounts = {m["mountPath"]: m for m in seed["volumeMounts"]}
    work = tmp_path / "work"
    work.mkdir()
    source = seed["command"][2].replace(next(p for p in mounts if mounts[p].get("readOnly")), str(image))
    copied = _read_only(image, [*seed["command"][:2], source, str(work)])
    if copied.returncode != 0 and ("unshare:" in copied.stderr or "mount:" in copied.stderr):
        pytest.skip(f"no mount namespace here for a read-only mount: {copied.stderr.strip()}")
    assert copied.returncode == 0, copied.stderr
    # 4. The engine on that copy, the image still mounted read-only: vLLM resolves the packed file.
    spec["env"]["VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"] = str(work)
    spec_file = tmp_path / "second.json"
    spec_file.write_text(json.dumps(spec))
    with resources.as_file(resources.files("stackpin.enginecheck").joinpath("check_runtime.py")) as script:
        run = _read_only(image, [str(engine), str(script), str(spec_file)])
    assert run.returncode == 0, run.stderr[-2000:]
    second = json.loads(run.stdout)
    assert second["failed"] is None and second["autotune"]["config_hash_dir"] == config_hash
    found = Path(second["autotune"]["file"])
    assert found == work / config_hash / "autotune_configs.json" and found.read_bytes() == content
    before = hashlib.sha256(content).hexdigest()
    assert hashlib.sha256((image / "flashinfer_autotune_cache" / "0.7.0.post1" / "103a" / config_hash /
                           "autotune_configs.json").read_bytes()).hexdigest() == before

    # The rendering before this fix pointed vLLM at the image itself: its resolver's mkdir of the hash
    # directory fails on the read-only mount (EROFS), as every worker did after loading its weights.
    spec["env"]["VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"] = str(image / "flashinfer_autotune_cache")
    spec_file.write_text(json.dumps(spec))
    with resources.as_file(resources.files("stackpin.enginecheck").joinpath("check_runtime.py")) as script:
        old = _read_only(image, [str(engine), str(script), str(spec_file)])
    assert old.returncode == 0, old.stderr[-2000:]
    failed = json.loads(old.stdout)["failed"]
    assert failed is not None and "Read-only file system" in failed["error"], failed


# --- the command ------------------------------------------------------------------------------------------

def _documented_check() -> tuple[list[str], str]:
    """The `stackpin engines check` example in docs/engines.md: its argv and the output it shows."""
    text = (ROOT / "docs" / "engines.md").read_text()
    block = text[text.index("```\n$ stackpin engines check ") + 4:]
    command, shown = block[:block.index("\n```")].split("\n", 1)
    return command.removeprefix("$ stackpin ").split(), shown


def test_the_documented_command_runs_as_the_docs_show_with_no_python_named() -> None:
    """As a user runs it: from the project root, no --python and no $STACKPIN_ENGINE_PYTHON; the check finds
    the environment `stackpin engines setup-check` builds there (.enginecheck/vllm-0.31.0), although vLLM runs
    from a scratch directory."""
    own_env(ROOT / ".enginecheck" / "vllm-0.31.0" / "bin" / "python", UNAVAILABLE, "engine check", "engine-env",
            "STACKPIN_REQUIRE_ENGINE_CHECK")
    argv, shown = _documented_check()
    assert argv[:2] == ["engines", "check"] and "--python" not in argv
    env = {k: v for k, v in os.environ.items() if k != "STACKPIN_ENGINE_PYTHON"}
    run = subprocess.run([sys.executable, "-m", "stackpin", *argv], capture_output=True, text=True, cwd=ROOT,
                         timeout=900, check=False, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == shown.strip()
    [line] = run.stdout.splitlines()
    assert line.startswith("ok gb300-tuned worker: vLLM 0.31.0, cudagraph FULL_AND_PIECEWISE, 40 "
                           "DeepseekV4MegaAttnAttention layers built (16 heads a rank)")
    assert "not run here: " in line


def test_the_documented_command_runs_from_a_wheel_install(engine: Path, tmp_path: Path) -> None:
    """As a user who ran `pip install stackpin` runs it: the installed package (no checkout on the path),
    in a directory of their own where `stackpin engines setup-check` built .enginecheck/vllm-0.31.0 (here a
    link to the one built for the tests); setup-check finds its recipe in the package and leaves a current
    environment alone, and the documented check passes with no --python."""
    from devkit.installed import installed_stackpin

    argv, shown = _documented_check()
    work = tmp_path / "site"
    (work / ".enginecheck").mkdir(parents=True)
    (work / ".enginecheck" / "vllm-0.31.0").symlink_to(engine.parent.parent)
    for arg in argv:
        if arg.endswith(".lock.yaml"):
            (work / arg).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / arg, work / arg)
    env = {k: v for k, v in os.environ.items() if k not in ("STACKPIN_ENGINE_PYTHON", "PYTHONPATH")}
    with installed_stackpin() as bin_dir:
        setup = subprocess.run([str(bin_dir / "stackpin"), "engines", "setup-check"], cwd=work, capture_output=True,
                               text=True, timeout=120, check=False, env=env)
        assert setup.returncode == 0 and setup.stderr.startswith("engine check environment current: "), setup.stderr
        run = subprocess.run([str(bin_dir / "stackpin"), *argv], cwd=work, capture_output=True, text=True,
                             timeout=900, check=False, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == shown.strip()


def test_the_command_takes_a_relative_python_from_where_it_runs(engine: Path, tmp_path: Path) -> None:
    """--python given relative to the current directory, as a shell completes it: resolved there, not in the
    scratch directory vLLM runs from."""
    (tmp_path / "locks").mkdir()
    shutil.copy(ROOT / "lockfiles" / "gb300-tuned.lock.yaml", tmp_path / "locks")
    env = {k: v for k, v in os.environ.items() if k != "STACKPIN_ENGINE_PYTHON"}
    relative = os.path.relpath(engine, tmp_path)  # not .absolute(): a venv's python is a link to the base one
    run = subprocess.run([sys.executable, "-m", "stackpin", "engines", "check", "locks/gb300-tuned.lock.yaml",
                          "--python", relative], capture_output=True, text=True, cwd=tmp_path, timeout=900,
                         check=False, env={**env, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok gb300-tuned worker: vLLM 0.31.0, ")


def test_the_command_without_an_engine_environment_is_one_line_exit_2(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "stackpin", "engines", "check", "lockfiles/gb300-tuned.lock.yaml",
                          "--python", str(tmp_path / "nope" / "python")], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, check=False)
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1
    assert f"{tmp_path}/nope/python: no engine check environment for vLLM 0.31.0" in run.stderr
    assert f"stackpin engines setup-check --vllm 0.31.0 {tmp_path}" in run.stderr


def test_the_default_environment_missing_names_the_path_tried_and_the_setup(tmp_path: Path) -> None:
    """Run where no environment was built (a wheel install's working directory): one line naming the
    absolute path it looked for and the packaged command that builds it there."""
    (tmp_path / "locks").mkdir()
    shutil.copy(ROOT / "lockfiles" / "gb300-tuned.lock.yaml", tmp_path / "locks")
    env = {k: v for k, v in os.environ.items() if k != "STACKPIN_ENGINE_PYTHON"}
    run = subprocess.run([sys.executable, "-m", "stackpin", "engines", "check", "locks/gb300-tuned.lock.yaml"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
                         env={**env, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr == (f"error: {tmp_path}/.enginecheck/vllm-0.31.0/bin/python: no engine check environment for "
                          f"vLLM 0.31.0 (no such Python); build it with `stackpin engines setup-check --vllm 0.31.0` "
                          f"in {tmp_path}, or name its Python with --python\n")
    assert "install-engine-check.sh" not in run.stderr  # a wheel does not ship scripts/


def test_attestation_calls_the_real_flashinfer_load_rule(engine: Path, tmp_path: Path) -> None:
    """The attestation script uses FlashInfer's own _collect_metadata and _classify_metadata_mismatches
    (tests/test_attestation.py uses a stand-in for them): here the real ones, from the engine environment's
    flashinfer-python 0.7.0.post1. On this CPU host FlashInfer reports no GPU, so a cache captured on GB300
    is one it would ignore, and the pod fails saying so."""
    from stackpin.render.attestation import script_text

    config_hash = "c" * 64
    cache = tmp_path / "flashinfer-autotune" / config_hash
    cache.mkdir(parents=True)
    content = json.dumps({"_metadata": {"flashinfer_version": "0.7.0.post1", "gpu": "NVIDIA GB300"},
                          "k": ["Runner", 1]}).encode()
    (cache / "autotune_configs.json").write_bytes(content)
    expected = {"deployment": "dsv41-flash", "packages": {}, "gpu": None,
                "autotuneCache": {"dir": str(cache.parent), "image": "x", "files": {
                    f"{config_hash}/autotune_configs.json": hashlib.sha256(content).hexdigest()}}}
    (tmp_path / "attest.py").write_text(script_text())
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    run = subprocess.run([str(engine), str(tmp_path / "attest.py"), str(tmp_path / "expected.json")],
                         capture_output=True, text=True, timeout=300, check=False,
                         env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 1, run.stderr[-2000:]
    line = run.stderr.strip().splitlines()[-1]
    assert f"FlashInfer ignores autotune cache file {config_hash}/autotune_configs.json: " in line
    assert "gpu saved 'NVIDIA GB300' vs 'unknown' here" in line


def _facts_cases() -> list[tuple[str, str, str | None]]:
    """(backend, --kv-cache-dtype, what the start-up facts say it stores; None: raises) on SM 10.x."""
    from stackpin.catalog.startup import startup_facts

    facts = startup_facts("0.31.0")
    assert facts is not None
    model = facts.models["DeepseekV41ForCausalLM"]
    cases: list[tuple[str, str, str | None]] = []
    for name, backend in model.attention.items():
        if 10 in backend.compute_majors:
            cases += [(name, dtype, stored) for dtype, stored in backend.kv_cache_dtypes.items()]
            # One dtype the layer's constructor refuses: bf16 for the packed layouts, a packed one for plain rows.
            # (FLASHMLA_SPARSE_DSV41 also leaves out nvfp4_ds_mla, which only the mega kernel decodes: a kernel
            # fact, refused on the GPU, not in Python.)
            cases.append((name, "bfloat16" if "bfloat16" not in backend.kv_cache_dtypes else "nvfp4_ds_mla", None))
    return cases


@pytest.mark.parametrize(("backend", "dtype", "stored"), _facts_cases(),
                         ids=[f"{b}-{d}" for b, d, _ in _facts_cases()])
def test_the_start_up_facts_are_what_vllm_does(backend: str, dtype: str, stored: str | None, engine: Path,
                                               tmp_path: Path) -> None:
    """catalog/engines/vllm-0.31.0.startup.yaml, held to the code: for every SM 10.x backend and KV-cache dtype
    it lists, vLLM stores what it says in 128-token kernel blocks; one it does not list raises."""
    lock = with_profile_value(shipped_locks()["gb300-tuned"], ("spec", "kernels", "attention"), backend)
    lock = with_profile_value(lock, ("spec", "kvCache", "dtype"), dtype)
    result, _ = _one_pool(lock, "worker", engine, tmp_path)
    if stored is None:
        # The layer's own constructor raises (models/deepseek_v41/attention.py:159-164 or :152-156).
        assert result["failed"] is not None and result["failed"]["stage"] == "attention_layers", result["failed"]
        assert "ValueError" in result["failed"]["error"]
        return
    assert result["failed"] is None, result["failed"]
    expected = "bfloat16" if stored == "bfloat16" else stored
    assert result["model"]["kv_cache_dtype_stored"] == expected
    assert result["model"]["kernel_block_size"] == 128


def test_the_mega_kernels_heads_per_rank_fact_is_the_release_code(engine: Path) -> None:
    """SP220's fact (vllm-0.31.0.startup.yaml, FLASHMLA_MEGA_ATTN_DSV41 heads_per_rank_multiple_of), held to the
    wheel: the constant vLLM imports, and the lines it cites raise on it and take the explicit backend unchecked."""
    from stackpin.catalog.startup import startup_facts

    facts = startup_facts("0.31.0")
    assert facts is not None
    kernel = facts.models["DeepseekV41ForCausalLM"].attention["FLASHMLA_MEGA_ATTN_DSV41"]
    run = subprocess.run([str(engine), "-c", "import pathlib, vllm\n"
                          "from vllm.models.deepseek_v41.common.ops.fused_layout import WV_GROUP_SIZE\n"
                          "print(pathlib.Path(vllm.__file__).parent, WV_GROUP_SIZE)"],
                         capture_output=True, text=True, timeout=300, check=False, env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    root, size = run.stdout.split()
    assert int(size) == kernel.heads_per_rank_multiple_of == 8
    source = kernel.heads_per_rank_source or ""

    def lines(file: str, first: int, last: int) -> str:
        assert f"{file}:{first}" + (f"-{last}" if last != first else "") in source
        return "\n".join((Path(root) / "models" / "deepseek_v41" / file).read_text().splitlines()[first - 1:last])

    raises = lines("nvidia/flash_mla_mega_attn.py", 174, 178)
    assert "if self.n_local_heads % WV_GROUP_SIZE:" in raises and "raise ValueError(" in raises
    assert "to be a multiple of {WV_GROUP_SIZE}" in raises
    explicit = lines("nvidia/model.py", 217, 218)
    assert "FLASHMLA_MEGA_ATTN_DSV41" in explicit and "return DeepseekV4MegaAttnAttention" in explicit
    assert lines("common/ops/fused_layout.py", 18, 18) == "WV_GROUP_SIZE = 8"


# --- the attention layers' own constructors -----------------------------------------------------------

def _at_tp(name: str, tp: int, backend: str | None = None) -> StackLock:
    lock = with_profile_value(shipped_locks()[name], ("spec", "placement", "pools", "worker", "tensorParallel"), tp)
    return lock if backend is None else with_profile_value(lock, ("spec", "kernels", "attention"), backend)


def test_mega_attention_at_tp16_is_refused_by_the_layers_constructor(engine: Path) -> None:
    """64 heads at TP 16 leave 4 a rank and 8 o_groups leave none: DeepseekV4MegaAttnAttention's constructor
    (through FlashMLA's, models/deepseek_v41/nvidia/ops/o_proj.py:42) raises on the first layer, as every worker
    would, after its weights download. Built without constructors, the check passed this stack."""
    lock = _at_tp("gb300-tuned", 16)
    assert lock.stack_profile.spec.kernels.attention == "FLASHMLA_MEGA_ATTN_DSV41"
    [pool] = check_lock(lock, engine)
    failed = pool.result["failed"]
    assert failed is not None and failed["stage"] == "attention_layers", failed
    assert failed["error"] == "ZeroDivisionError: integer division or modulo by zero"
    assert pool.problems == (f"vLLM 0.31.0 fails at attention_layers: {failed['error']}",)


def test_the_command_refuses_tp16_mega_attention_and_validate_does_too(engine: Path, tmp_path: Path) -> None:
    """The same stack through `stackpin engines check` (exit 1, vLLM's own error) and `stackpin validate`
    (SP220, from the start-up facts)."""
    from stackpin.lock.lockfile import stack_digest
    from stackpin.yamlio import dump_yaml

    lock = _at_tp("gb300-tuned", 16)
    data = {**lock.to_data(), "stackDigest": stack_digest(lock.profile, lock.resolved)}  # as `stackpin lock` writes
    path = tmp_path / "tp16.lock.yaml"
    path.write_text(dump_yaml(data))
    env = {k: v for k, v in os.environ.items() if k != "STACKPIN_ENGINE_PYTHON"}
    run = subprocess.run([sys.executable, "-m", "stackpin", "engines", "check", str(path), "--python", str(engine)],
                         capture_output=True, text=True, cwd=ROOT, timeout=900, check=False, env=env)
    assert run.returncode == 1, run.stderr
    assert run.stdout == ("problem gb300-tuned worker: vLLM 0.31.0 fails at attention_layers: "
                          "ZeroDivisionError: integer division or modulo by zero\n")
    profile = tmp_path / "tp16.yaml"
    profile.write_text(dump_yaml(data["profile"]))
    validate = subprocess.run([sys.executable, "-m", "stackpin", "validate", str(profile)], capture_output=True,
                              text=True, cwd=ROOT, timeout=300, check=False, env=env)
    assert validate.returncode == 1 and "SP220" in validate.stdout + validate.stderr, validate.stdout


def test_tp8_mega_attention_builds_eight_heads_a_rank(engine: Path, tmp_path: Path) -> None:
    """The limit is the constructor's, not a blanket refusal of wide TP: TP 8 leaves 8 heads and one o_group
    a rank, and all 40 layers build."""
    result, problems = _one_pool(_at_tp("gb300-tuned", 8), "worker", engine, tmp_path)
    assert result["failed"] is None, result["failed"]
    assert result["model"]["heads_per_rank"] == 8 and result["model"]["attention_layers"] == 40
    assert not [p for p in problems if "fails at" in p]


def test_v4_compress_ratios_are_refused_by_the_v41_constructor(engine: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The config this check used before (V4's ratios 4 and 128) is not a V4.1 one: vLLM 0.31.0's V4.1
    attention raises outside 0/1/2 (models/deepseek_v41/attention.py:305-310)."""
    import stackpin.enginecheck.vllm_check as check

    published = check.model_config("deepseek-v4.1-flash")
    v4_ratios = {**published, "text_config": {**published["text_config"],
                                              "compress_ratios": [0, 0] + [4, 128] * 19 + [0, 0, 0]}}
    monkeypatch.setattr(check, "model_config", lambda _key: v4_ratios)
    result, _ = _one_pool(shipped_locks()["gb300-tuned"], "worker", engine, tmp_path)
    assert result["failed"] is not None and result["failed"]["stage"] == "attention_layers"
    assert "has compress_ratio=4; only 0 (sliding window), 1 and 2 are supported" in result["failed"]["error"]


# --- the autotune file, hashed with the model path the pod has ------------------------------------------

def _with_cache_files(lock: StackLock, files: dict[str, str], stand_in: bool) -> StackLock:
    data = lock.to_data()
    cache = data["resolved"]["autotuneCache"]
    cache["annotations"]["files"] = json.dumps(files, sort_keys=True, separators=(",", ":"))
    cache["standIn"] = stand_in
    return msgspec.convert(data, StackLock)


def test_the_autotune_hash_is_the_one_vllm_computes_where_the_pod_mounts_the_model(engine: Path,
                                                                                   tmp_path: Path) -> None:
    """The check reads the model from a scratch Hugging Face cache and renames its paths to the pod's before
    vLLM hashes (the draft is named by its snapshot directory under HF_HOME). Held to vLLM: with the model
    volume mounted at a directory this test owns, vLLM run on the files there computes the same hash."""
    mount = tmp_path / "pod-model-cache"
    lock = with_profile_value(shipped_locks()["gb300-tuned"], ("spec", "modelStore", "mountPath"), str(mount))
    [spec] = [s for r, s in pool_specs(lock, tmp_path / "check") if r == "worker"]
    assert spec["pod_paths"] == {spec["hf_home"]: str(mount)}
    renamed = run_pool(engine, spec, tmp_path / "check")
    assert renamed["failed"] is None and renamed["autotune"]["unmapped_paths"] == []
    assert str(mount) in renamed["autotune"]["models"][1]  # the draft, by its snapshot path in the pod
    # The pod's own view: the same snapshot at the mount itself, nothing renamed.
    shutil.copytree(Path(spec["hf_home"]), mount)
    direct = {**spec, "hf_home": str(mount), "pod_paths": {}, "env": {**spec["env"], "HF_HOME": str(mount)}}
    there = run_pool(engine, direct, tmp_path / "check")
    assert there["failed"] is None
    assert there["autotune"]["config_hash_dir"] == renamed["autotune"]["config_hash_dir"]
    # Another mount path is another hash: the path is in it, as the issue said.
    [other] = [s for r, s in pool_specs(shipped_locks()["gb300-tuned"], tmp_path / "other") if r == "worker"]
    assert run_pool(engine, other, tmp_path / "other")["autotune"]["config_hash_dir"] != \
        there["autotune"]["config_hash_dir"]


def test_a_pinned_cache_holding_the_file_vllm_opens_is_a_hit(engine: Path) -> None:
    lock = shipped_locks()["gb300-tuned"]
    [first] = check_lock(lock, engine)
    config_hash = first.result["autotune"]["config_hash_dir"]
    tree = lock.resolved.autotune_cache.tree() if lock.resolved.autotune_cache else None
    assert tree == "0.7.0.post1/103a"
    hit = _with_cache_files(lock, {f"{tree}/{config_hash}/autotune_configs.json": "a" * 64}, stand_in=False)
    [pool] = check_lock(hit, engine)
    assert pool.ok, pool.problems
    found = pool.result["autotune"]["pinned_cache"]
    assert found["held"] is True and found["path"] == f"{config_hash}/autotune_configs.json"
    pod_file = f"/var/lib/stackpin/flashinfer-autotune/{config_hash}/autotune_configs.json"
    assert pool.result["autotune"]["file"] == pod_file


def test_a_pinned_cache_without_it_is_a_miss_and_a_problem(engine: Path) -> None:
    """A real (not stand-in) cache captured for another config: vLLM would open a file the seed never copied,
    and start untuned."""
    lock = shipped_locks()["gb300-tuned"]
    other = "ca3aa12086a7b3b82651fe4800834d8aee3c95a03defa04cbf895c3ec6febe2a"
    miss = _with_cache_files(lock, {f"0.7.0.post1/103a/{other}/autotune_configs.json": "b" * 64}, stand_in=False)
    [pool] = check_lock(miss, engine)
    found = pool.result["autotune"]["pinned_cache"]
    assert found["held"] is False and found["holds"] == ["ca3aa12086a7"]
    [problem] = pool.problems
    assert problem.startswith(f"vLLM opens {found['path']} under the seeded directory; the pinned autotune cache ")
    assert problem.endswith("holds no such file (it holds ca3aa12086a7): the pool starts with FlashInfer's "
                            "untuned tactics")
    # The shipped lock's cache is a demo stand-in: the same miss is reported, not failed.
    [shipped] = check_lock(lock, engine)
    assert shipped.ok and shipped.result["autotune"]["pinned_cache"]["held"] is False
    assert shipped.result["autotune"]["pinned_cache"]["stand_in"] is True
