"""The engine check: a rendered stack through the pinned vLLM's own code, on CPU.

stackpin's rules model what vLLM does; this runs what vLLM does. For every worker pool of a lock, the argv and
environment render writes into the pod go to `check_runtime.py` (beside this module), which runs in an
environment of its own holding the pinned vLLM from its published wheel and CPU torch
(`stackpin engines setup-check`). There vLLM's own parser builds EngineArgs, `create_engine_config()` builds
the VllmConfig with every post-init rule, and the pure-Python steps of model build follow: the attention
class, the KV-cache dtype it stores, the kernel block size, the CUDA graph mode the model runner resolves, the
draft model's revision and the autotune file vLLM resolves. What needs a GPU (weights, memory profiling,
capture, kernels) is named as skipped, never pretended.

`judge` then compares what vLLM did with what the profile declares: a step that raised, a graph mode or KV
dtype changed silently, a draft loaded at another revision, an autotune file outside the directory the seed
fills. The model's config.json comes from the catalog (`catalog/model_configs.yaml`): no Hub access.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from stackpin.catalog import Catalog, load_catalog
from stackpin.catalog.flags import FlagCatalog, dynamo_catalog, vllm_catalog
from stackpin.catalog.model_configs import model_config as catalog_model_config
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.render.pod import kubelet_value

SCRIPT = "check_runtime.py"
TIMEOUT_S = 600  # one pool: vLLM's imports and config construction take some seconds on two cores
MAX_OUTPUT = 4 * 1024 * 1024
# Directories the rendered pod names that the check maps into its own scratch tree.
_MAPPED_ENV = ("HF_HOME", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "VLLM_CACHE_ROOT")


class EngineCheckError(StackpinError):
    """The engine environment could not run the check at all (exit 2): not a finding about the stack."""


@dataclass(frozen=True)
class PoolCheck:
    stack: str
    role: str
    result: dict[str, Any]
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def model_config(catalog_key: str) -> dict[str, Any]:
    config = catalog_model_config(catalog_key)
    if config is None:
        raise EngineCheckError(f"no config.json for model {catalog_key} in stackpin/catalog/model_configs.yaml")
    return config


def _takes_value(catalog: FlagCatalog, option: str) -> bool:
    found = catalog.option(option)
    return not (found is None or found.type == "bool" or found.store_true or option in found.negatives)


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


def _workers(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    [dgd] = [o for o in objects if o["kind"] == "DynamoGraphDeployment"]
    if "components" in dgd["spec"]:
        return [(c["name"], c["podTemplate"]["spec"]["containers"][0]) for c in dgd["spec"]["components"]
                if c["name"] != "frontend"]
    return [(name, s["extraPodSpec"]["mainContainer"]) for name, s in dgd["spec"]["services"].items()
            if name != "frontend"]


def pool_specs(lock: StackLock, workdir: Path, catalog: Catalog | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(role, the spec check_runtime.py reads) for every worker pool of the lock, from the objects render
    writes: the container's own argv and env, paths mapped under `workdir`, `--model` the catalog's config."""
    from stackpin.profile.topology import topology_of
    from stackpin.render.build import build_objects

    catalog = catalog or load_catalog()
    profile = lock.stack_profile
    spec = profile.spec
    vllm = vllm_catalog(spec.versions.vllm)
    if vllm is None:
        raise EngineCheckError(f"no flag catalog for vLLM {spec.versions.vllm}: cannot tell vLLM's options apart")
    dynamo = dynamo_catalog(spec.versions.dynamo, "worker_vllm")
    found = catalog.model_for(spec.model.id)
    if found is None:
        raise EngineCheckError(f"model {spec.model.id} is not in the catalog: no config.json to hand vLLM")
    model_dir = workdir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(model_config(found[0]), indent=2, sort_keys=True))
    gpu = catalog.gpu_of(spec.target.platform)
    gpus: dict[str, int] = {p.role: p.gpus_per_pod for p in topology_of(profile, catalog).pools}
    out = []
    for role, container in _workers(build_objects(lock, catalog)):
        # What the kubelet hands the container, `$$` reduced (render/pod.py kubelet_literal).
        argv = vllm_argv([kubelet_value(a) for a in container["args"]], vllm, dynamo)
        argv[argv.index("--model") + 1] = str(model_dir)
        scratch = workdir / role
        env = {e["name"]: kubelet_value(e["value"]) for e in container.get("env", [])}
        rendered = {name: env[name] for name in _MAPPED_ENV if name in env}
        for name in rendered:
            env[name] = str(scratch / name.lower())
        out.append((role, {
            "rendered_env": rendered,  # the pod's own values, to show results as the pod would see them
            "vllm_argv": argv, "env": env,
            "gpu": {"capability": list(gpu.compute_capability), "name": gpu.device_name,
                    "memory_gib": gpu.hbm_gib, "count": gpus[role]},
            "cache_root": str(scratch / "vllm_cache_root"), "hf_home": str(scratch / "hf_home"),
            "autotune": "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR" in env,
        }))
    return out


def run_pool(python: Path, spec: dict[str, Any], workdir: Path, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run check_runtime.py with the engine environment's Python on one pool's spec; its JSON answer."""
    spec_file = workdir / "spec.json"
    spec_file.write_text(json.dumps(spec))
    script = resources.files(__package__).joinpath(SCRIPT)
    with resources.as_file(script) as path:
        try:
            run = subprocess.run([str(python), str(path), str(spec_file)], capture_output=True, timeout=timeout_s,
                                 check=False, cwd=workdir, env={**os.environ, "PYTHONNOUSERSITE": "1"})
        except FileNotFoundError:
            raise EngineCheckError(f"{python}: no such Python; build the engine environment with "
                                   "`stackpin engines setup-check`") from None
        except subprocess.TimeoutExpired:
            raise EngineCheckError(f"the engine check ran past {timeout_s:g} s") from None
    if run.returncode != 0 or len(run.stdout) > MAX_OUTPUT:
        tail = run.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise EngineCheckError(f"the engine check exited {run.returncode}: {tail[0][:400]}")
    try:
        result: dict[str, Any] = json.loads(run.stdout)
    except ValueError:
        raise EngineCheckError("the engine check printed no JSON answer") from None
    return result


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
    return problems


def check_lock(lock: StackLock, python: Path, catalog: Catalog | None = None,
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
                # The file as the pod sees it: the rendered directory, not this check's scratch copy of it.
                pod_dir = spec["rendered_env"]["VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"]
                result["autotune"]["file"] = pod_dir + result["autotune"]["file"].removeprefix(here)
            out.append(PoolCheck(lock.metadata.name, role, result, tuple(problems)))
    return out
