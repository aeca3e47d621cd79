"""The vLLM engine check: a rendered stack through the pinned vLLM's own code, on CPU.

stackpin's rules model what vLLM does; this runs what vLLM does. For every worker pool of a lock, the argv and
environment render writes into the pod go to `check_runtime.py` (beside this module), which runs in an
environment of its own holding the pinned vLLM from its published wheel and CPU torch
(`stackpin engines setup-check`). There vLLM's own parser builds EngineArgs, `create_engine_config()` builds
the VllmConfig with every post-init rule, and the pure-Python steps of model build follow: the attention
class, every attention layer built by its own constructor (the KV-cache dtype it stores, every limit it
enforces), the kernel block size, the CUDA graph mode the model runner resolves, the draft model's revision and
the autotune file vLLM resolves, hashed with the model paths the pod has. What needs a GPU (weights, memory profiling,
capture, kernels) is named as skipped, never pretended.

`judge` then compares what vLLM did with what the profile declares: a step that raised, a graph mode or KV
dtype changed silently, a draft loaded at another revision, an autotune file outside the directory the seed
fills or missing from the pinned cache. The model's config.json comes from the catalog
(`catalog/model_configs.yaml`): no Hub access. The parts every engine's check shares are in check.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from stackpin.catalog import Catalog, load_catalog
from stackpin.catalog.flags import FlagCatalog, dynamo_catalog, vllm_catalog
from stackpin.enginecheck.check import (
    TIMEOUT_S,
    EngineCheckError,
    PoolCheck,
    _hub_snapshot,
    _option,
    _takes_value,
    _workers,
    model_config,
    run_script,
)
from stackpin.lock.lockfile import StackLock
from stackpin.render.pod import kubelet_value

SCRIPT = "check_runtime.py"
# Directories the rendered pod names that the check maps into its own scratch tree.
_MAPPED_ENV = ("HF_HOME", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "VLLM_CACHE_ROOT")


def vllm_argv(argv: list[str], vllm: FlagCatalog, dynamo: FlagCatalog | None) -> list[str]:
    """The worker argv as vLLM's own parser sees it inside `dynamo.vllm`: Dynamo's own options (those the
    pinned vLLM does not have, like --disaggregation-mode) and their values left out."""
    out, i = [], 0
    while i < len(argv):
        option = argv[i]
        if option.startswith("-") and vllm.resolve(option) is None and dynamo is not None and dynamo.accepts(option):
            i += 2 if _takes_value(dynamo, option) and i + 1 < len(argv) else 1
            continue
        out.append(option)
        i += 1
    return out


# What Dynamo's operator adds to the leader of a pool that spans nodes with vLLM's mp executor
# (deploy/operator/internal/dynamo/backend_vllm.go, injectMpDistributedLaunchFlags): without them vLLM refuses a
# world size larger than one node's GPUs. The address and port are the leader's; never dialled here.
def _multinode_leader_flags(nodes: int) -> list[str]:
    return ["--distributed-executor-backend", "mp", "--nnodes", str(nodes), "--master-addr", "leader",
            "--master-port", "29500", "--node-rank", "0"]


def pool_specs(lock: StackLock, workdir: Path, catalog: Catalog | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(role, the spec check_runtime.py reads) for every worker pool of the lock, from the objects render
    writes: the container's own argv and env, the `--model` the pod passes (its config.json from the catalog,
    in a scratch Hugging Face cache read offline), other paths mapped under `workdir` and recorded as the pod
    sees them (`rendered_env`, `pod_paths`)."""
    from stackpin.profile.topology import topology_of
    from stackpin.render.build import build_objects

    catalog = catalog or load_catalog()
    profile = lock.stack_profile
    spec = profile.spec
    vllm = vllm_catalog(spec.engine_version)
    if vllm is None:
        raise EngineCheckError(f"no flag catalog for vLLM {spec.versions.vllm}: cannot tell vLLM's options apart")
    dynamo = dynamo_catalog(spec.versions.dynamo, "worker_vllm")
    found = catalog.model_for(spec.model.id)
    if found is None:
        raise EngineCheckError(f"model {spec.model.id} is not in the catalog: no config.json to hand vLLM")
    config = model_config(found[0])
    gpu = catalog.gpu_of(spec.target.platform)
    pools = {p.role.value: p for p in topology_of(profile, catalog).pools}
    out = []
    for role, container in _workers(build_objects(lock, catalog)):
        # What the kubelet hands the container, `$$` reduced (render/pod.py kubelet_literal).
        argv = vllm_argv([kubelet_value(a) for a in container["args"]], vllm, dynamo)
        scratch = workdir / role
        env = {e["name"]: kubelet_value(e["value"]) for e in container.get("env", [])}
        rendered = {name: env[name] for name in _MAPPED_ENV if name in env}
        for name in rendered:
            env[name] = str(scratch / name.lower())
        hf_home = scratch / "hf_home"
        model = _option(argv, "--model") or spec.model.id
        pod_paths = {str(hf_home): rendered.get("HF_HOME", "")}
        if model.startswith("/"):
            # A model directory the pod mounts: its config.json in a scratch directory named as the pod's.
            local = scratch / "model"
            local.mkdir(parents=True, exist_ok=True)
            (local / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
            argv[argv.index("--model") + 1] = str(local)
            pod_paths[str(local)] = model
        else:
            _hub_snapshot(hf_home, model, _option(argv, "--revision"), config)
        env["HF_HOME"], env["HF_HUB_OFFLINE"] = str(hf_home), "1"  # no Hub here; neither enters vLLM's hashes
        pool = pools[role]
        if (pool.nodes_per_replica or 1) > 1 and "--nnodes" not in argv:
            argv += _multinode_leader_flags(pool.nodes_per_replica)
        out.append((role, {
            "rendered_env": rendered,  # the pod's own values, to show results as the pod would see them
            "pod_paths": pod_paths,
            "vllm_argv": argv, "env": env,
            "gpu": {"capability": list(gpu.compute_capability), "name": gpu.device_name,
                    "memory_gib": gpu.hbm_gib, "count": pool.gpus_per_pod},
            "cache_root": str(scratch / "vllm_cache_root"), "hf_home": str(hf_home),
            "autotune": "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR" in env,
        }))
    return out


def _engine_env() -> dict[str, str]:
    """This process's environment less what would change vLLM's answer: its own and Hugging Face's settings
    (the spec sets those the pod has); every VLLM_* the config hash covers (envs.py compile_factors)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    return {**env, "PYTHONNOUSERSITE": "1"}


def run_pool(python: Path, spec: dict[str, Any], workdir: Path, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run check_runtime.py with the engine environment's Python on one pool's spec; its JSON answer."""
    return run_script(SCRIPT, python, spec, workdir, _engine_env(), timeout_s=timeout_s, what="engine check",
                      build="engine environment with `stackpin engines setup-check`")


def _declared_kv(dtype: str, stored: str) -> bool:
    """Whether a layer storing `stored` is what a profile declaring `dtype` asked for ("auto" asks for the
    kernel's own choice)."""
    return dtype in ("auto", stored)


def judge(lock: StackLock, role: str, result: dict[str, Any], autotune_dir: str | None = None) -> list[str]:
    """What the pinned vLLM did that the stack does not declare: every difference, one line each.
    `autotune_dir`: VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR as the check ran it (the seed's copy)."""
    from stackpin.profile.topology import topology_of

    profile = lock.stack_profile
    spec = profile.spec
    if result.get("failed"):
        failed = result["failed"]
        return [f"vLLM {result.get('vllm_version', spec.versions.vllm)} fails at {failed['stage']}: {failed['error']}"]
    problems = []
    model, config = result.get("model"), result["config"]
    declared = spec.cuda_graphs.mode.value
    if model is not None and model["cudagraph_mode_runtime"] != declared:
        problems.append(f"cudaGraphs.mode {declared} runs as {model['cudagraph_mode_runtime']} (piecewise capture "
                        f"available: {model['piecewise_capture_available']})")
    if model is not None and not _declared_kv(spec.kv_cache.dtype, model["kv_cache_dtype_stored"]):
        problems.append(f"kvCache.dtype {spec.kv_cache.dtype} is stored as {model['kv_cache_dtype_stored']} by "
                        f"{model['attention_class']}")
    if spec.kernels.attention is not None and config.get("attention_backend") != spec.kernels.attention:
        problems.append(f"kernels.attention {spec.kernels.attention} reached vLLM as {config.get('attention_backend')}")
    if spec.kv_cache.block_size is not None and config.get("block_size") != spec.kv_cache.block_size:
        problems.append(f"kvCache.blockSize {spec.kv_cache.block_size} became {config.get('block_size')}")
    speculative = result.get("speculative")
    [pool] = [p.spec for p in topology_of(profile).pools if p.role == role]
    wanted = profile.speculative_for(pool)
    if wanted.enabled and speculative is None:
        problems.append("speculative decoding is declared but vLLM built no speculative config")
    if speculative is not None:
        if speculative["draft_revision"] != speculative["target_revision"] and not wanted.draft_model:
            problems.append(f"the {speculative['method']} draft loads revision {speculative['draft_revision']}, the "
                            f"target {speculative['target_revision']}")
        if wanted.draft_model and speculative["draft_revision"] != wanted.draft_revision:
            problems.append(f"draft {wanted.draft_model} loads revision {speculative['draft_revision']}")
    autotune = result.get("autotune")
    if autotune is not None and autotune_dir is not None and not autotune["file"].startswith(autotune_dir + "/"):
        problems.append(f"vLLM resolves the autotune cache to {autotune['file']}, outside the directory the seed "
                        f"fills ({autotune_dir})")
    elif autotune is not None:
        found = pinned_cache_lookup(lock, autotune)
        if found["held"] is False and not found["stand_in"]:
            problems.append(f"vLLM opens {found['path']} under the seeded directory; the pinned autotune cache "
                            f"{found['pinned']} holds no such file (it holds {', '.join(found['holds']) or 'none'}): "
                            "the pool starts with FlashInfer's untuned tactics")
    return problems


def pinned_cache_lookup(lock: StackLock, autotune: dict[str, Any]) -> dict[str, Any]:
    """Whether the lock's pinned autotune cache holds the file vLLM opens. The seed copies the image's
    flashinfer_autotune_cache/<fi>/<arch>/ into VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR (render/pod.py), so vLLM's
    <config hash>/autotune_configs.json is a hit when the cache recorded <fi>/<arch>/<config hash>/
    autotune_configs.json (`stackpin autotune pack` records every file). `held` is None when it cannot be
    told: no pinned cache, files not recorded, or a model path the pod's is unknown for (the hash would not
    be the pod's)."""
    cache = lock.resolved.autotune_cache
    path = f"{autotune['config_hash_dir']}/{autotune['file'].rsplit('/', 1)[-1]}"
    files = cache.file_digests() if cache is not None else None
    tree = cache.tree() if cache is not None else None
    held = None
    if files is not None and tree is not None and not autotune.get("unmapped_paths"):
        held = f"{tree}/{path}" in files
    return {"path": path, "held": held, "pinned": cache.pinned if cache is not None else None,
            "stand_in": bool(cache is not None and cache.stand_in),
            "holds": sorted({p.split("/")[2][:12] for p in files or () if p.count("/") == 3})}



def check_vllm_lock(lock: StackLock, python: Path, catalog: Catalog | None = None,
                    timeout_s: float = TIMEOUT_S) -> list[PoolCheck]:
    """Every worker pool of `lock` through the pinned vLLM at `python`."""
    out = []
    with tempfile.TemporaryDirectory(prefix="stackpin-engine-check-") as tmp:
        for role, spec in pool_specs(lock, Path(tmp), catalog):
            workdir = Path(tmp) / role
            workdir.mkdir(parents=True, exist_ok=True)
            result = run_pool(python, spec, workdir, timeout_s)
            if result.get("vllm_version") not in (None, lock.stack_profile.spec.versions.vllm):
                raise EngineCheckError(f"{python} runs vLLM {result.get('vllm_version')}, the lock pins "
                                       f"{lock.stack_profile.spec.versions.vllm}")
            here = spec["env"].get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR")
            problems = judge(lock, role, result, here)
            if result.get("autotune") and here:
                result["autotune"]["pinned_cache"] = pinned_cache_lookup(lock, result["autotune"])
                # The file as the pod sees it: the rendered directory, not this check's scratch copy of it.
                pod_dir = spec["rendered_env"]["VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"]
                result["autotune"]["file"] = pod_dir + result["autotune"]["file"].removeprefix(here)
            out.append(PoolCheck(lock.metadata.name, role, result, tuple(problems),
                                 "" if problems else resolved_line(result)))
    return out


def resolved_line(result: dict[str, Any]) -> str:
    """What vLLM's engine-config construction and model build resolved for a pool, in one line."""
    model, config, spec = result.get("model") or {}, result["config"], result.get("speculative")
    mode = model.get("cudagraph_mode_runtime", config["cudagraph_mode"])
    parts = [f"vLLM {result['vllm_version']}", f"cudagraph {mode}"]
    if model:
        parts.append(f"{model['attention_layers']} {model['attention_class']} layers built "
                     f"({model['heads_per_rank']} heads a rank) storing {model['kv_cache_dtype_stored']} in "
                     f"{config['block_size']}-token blocks (kernel {model['kernel_block_size']})")
    if spec:
        parts.append(f"{spec['method']} draft at {spec['draft_revision']}")
    if result.get("autotune"):
        autotune = result["autotune"]
        found = autotune.get("pinned_cache") or {}
        verdict = {True: "in the pinned cache", False: "not in the pinned cache",
                   None: "hit or miss not known"}[found.get("held")]
        if found.get("held") is False and found.get("stand_in"):
            verdict += ": a stand-in cache, whose hashes are not vLLM's"
        parts.append(f"autotune file {autotune['file']} ({verdict})")
    return ", ".join(parts) + f"; not run here: {', '.join(result.get('skipped', []))}"
