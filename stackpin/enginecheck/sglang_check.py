"""The SGLang engine check: one `dynamo.sglang` worker's flags through the pinned SGLang's own ServerArgs, on CPU.

`check_sglang_argv` takes the flags after `python3 -m dynamo.sglang` and the worker's environment, leaves out
what Dynamo's own parser takes (the Dynamo catalog's `worker_sglang` options) and rewrites --disaggregation-mode
as the worker does (the catalog's `disaggregation_modes`), and runs `check_runtime_sglang.py` (beside this
module) with the SGLang engine environment's Python (.enginecheck/sglang-<version>, `python3 -m
stackpin.enginecheck.envbuild --sglang VERSION`): SGLang's parser, `ServerArgs.from_cli_args`, `resolve_once()`
and `check_server_args()`, as the engine runs them before it starts. The answer is a typed verdict: accepted
with the values SGLang resolved, or the step and the error SGLang raised. The model's config.json is handed
over in a scratch Hugging Face cache read offline: no Hub access. stackpin never imports SGLang.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackpin.catalog.flags import FlagCatalog, dynamo_catalog, dynamo_sglang_worker
from stackpin.enginecheck.check import (
    EngineCheckError,
    PoolCheck,
    _hub_snapshot,
    _option,
    _takes_value,
    _workers,
    model_config,
    run_script,
)

if TYPE_CHECKING:
    from stackpin.catalog import Catalog
    from stackpin.lock.lockfile import StackLock

SCRIPT = "check_runtime_sglang.py"
TIMEOUT_S = 300  # SGLang's imports and resolution take about 7 s on two cores
DYNAMO = "1.6.1"  # the Dynamo release whose catalog splits its options from SGLang's by default


@dataclass(frozen=True)
class SglangGpu:
    """The GPU the worker runs on, as the check reports it to SGLang (torch.cuda, NVML, nvidia-smi)."""

    name: str  # as nvidia-smi reports it
    capability: tuple[int, int]  # (10, 3) for GB300
    memory_gib: float  # what the runtime can allocate
    count: int  # GPUs the worker's pod sees
    cuda: str = "13.0"  # torch.version.cuda in the runtime image (SGLang 0.5.21's cu13 build)

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "capability": list(self.capability), "memory_gib": self.memory_gib,
                "count": self.count, "cuda": self.cuda}


@dataclass(frozen=True)
class SglangVerdict:
    """What the pinned SGLang made of one worker's flags."""

    accepted: bool
    sglang_version: str
    sglang_argv: tuple[str, ...]  # what SGLang's parser got
    dynamo_options: tuple[str, ...]  # what Dynamo's own parser took (left out)
    stage: str | None = None  # where SGLang refused: import, parse, resolve, check
    error: str | None = None  # SGLang's own words, `ExceptionType: message`
    resolved: Mapping[str, Any] = field(default_factory=dict)  # ServerArgs.resolved_dict()'s fields that matter
    stand_ins: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        if self.accepted:
            return f"SGLang {self.sglang_version} accepts the worker"
        return f"SGLang {self.sglang_version} refuses the worker at {self.stage}: {self.error}"


def split_dynamo_options(argv: Iterable[str], dynamo: FlagCatalog | None,
                         modes: Mapping[str, str | None] | None = None) -> tuple[list[str], list[str]]:
    """(SGLang's argv, Dynamo's options) from a dynamo.sglang worker's flags. Dynamo's parser takes its own
    options first (parse_known_args, dynamo/sglang/args.py:604) and hands SGLang the rest; `--x=v` spellings
    count. --disaggregation-mode values Dynamo rewrites (`modes`: agg and pd to null; encode taken out) are
    rewritten so."""
    argv = list(argv)
    sglang: list[str] = []
    taken: list[str] = []
    i = 0
    while i < len(argv):
        written = argv[i]
        option, eq, _ = written.partition("=")
        if written.startswith("--") and dynamo is not None and dynamo.accepts(option):
            step = 1 if eq or not _takes_value(dynamo, option) or i + 1 >= len(argv) else 2
            taken += argv[i:i + step]
            i += step
            continue
        sglang.append(written)
        i += 1
    if modes:
        out, i = [], 0
        while i < len(sglang):
            option, eq, value = sglang[i].partition("=")
            if option == "--disaggregation-mode" and (eq or i + 1 < len(sglang)):
                value = value if eq else sglang[i + 1]
                if value in modes:
                    if modes[value] is not None:
                        out += ["--disaggregation-mode", str(modes[value])]
                    i += 1 if eq else 2
                    continue
            out.append(sglang[i])
            i += 1
        sglang = out
    return sglang, taken


def _engine_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment less what would change SGLang's answer (its own and Hugging Face's settings,
    CUDA_VISIBLE_DEVICES); the worker's environment on top."""
    import os

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SGLANG_", "SGL_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "CUDA_", "TRITON_"))}
    return {**env, **extra, "PYTHONNOUSERSITE": "1"}


def run_spec(python: Path, spec: dict[str, Any], workdir: Path, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run check_runtime_sglang.py with the engine environment's Python on one spec; its JSON answer."""
    return run_script(SCRIPT, python, spec, workdir, _engine_env(spec.get("env", {})), timeout_s=timeout_s,
                      what="SGLang engine check", build="SGLang engine environment with "
                      "`python3 -m stackpin.enginecheck.envbuild --sglang VERSION`")


def check_sglang_argv(argv: Iterable[str], env: Mapping[str, str], gpu: SglangGpu, python: Path, *,
                      model_config: Mapping[str, Any] | None = None, dynamo_version: str = DYNAMO,
                      dynamo: FlagCatalog | None = None, timeout_s: float = TIMEOUT_S) -> SglangVerdict:
    """One dynamo.sglang worker's flags (`argv`, after `python3 -m dynamo.sglang`) and environment through the
    pinned SGLang at `python`. `model_config`: the config.json SGLang reads for --model-path, put where the
    pod has it (a Hub id in a scratch Hugging Face cache at --revision, read offline; a path as a scratch
    directory). `dynamo`: the catalog of Dynamo's own worker options (default: Dynamo `dynamo_version`'s
    worker_sglang). EngineCheckError when the check cannot run at all; a refusal is a verdict."""
    dynamo = dynamo if dynamo is not None else dynamo_catalog(dynamo_version, "worker_sglang")
    worker = dynamo_sglang_worker(dynamo_version)
    sglang_argv, taken = split_dynamo_options(argv, dynamo, worker.disaggregation_modes if worker else None)
    with tempfile.TemporaryDirectory(prefix="stackpin-sglang-check-") as tmp:
        scratch = Path(tmp)
        hf_home = scratch / "hf_home"
        hf_home.mkdir()
        run_argv = list(sglang_argv)
        model = _option(run_argv, "--model-path")
        if model_config is not None and model is not None:
            config = dict(model_config)
            if model.startswith("/"):
                local = scratch / "model"
                local.mkdir()
                (local / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
                run_argv[run_argv.index("--model-path") + 1] = str(local)
            else:
                _hub_snapshot(hf_home, model, _option(run_argv, "--revision"), config)
        spec = {"sglang_argv": run_argv, "env": {**env, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"},
                "gpu": gpu.spec(), "cache_root": str(scratch / "cache"), "hf_home": str(hf_home)}
        result = run_spec(python, spec, scratch, timeout_s)
    failed = result.get("failed") or {}
    return SglangVerdict(
        accepted=bool(result.get("accepted")), sglang_version=str(result.get("sglang_version", "")),
        sglang_argv=tuple(sglang_argv), dynamo_options=tuple(taken),
        stage=failed.get("stage"), error=failed.get("error"), resolved=result.get("resolved") or {},
        stand_ins=tuple(result.get("stand_ins", ())), skipped=tuple(result.get("skipped", ())))


def check_sglang_lock(lock: StackLock, python: Path, catalog: Catalog | None = None,
                      timeout_s: float = TIMEOUT_S) -> list[PoolCheck]:
    """Every worker pool of an SGLang stack through the pinned SGLang at `python`: each container's argv and
    env as render writes them (the kubelet's `$$` reduced), the rack's GPU as the pod sees it, the model's
    config.json from the catalog. A refusal is a pool problem in SGLang's own words."""
    from stackpin.catalog import load_catalog
    from stackpin.profile.topology import topology_of
    from stackpin.render.build import build_objects
    from stackpin.render.pod import kubelet_value

    catalog = catalog or load_catalog()
    spec = lock.stack_profile.spec
    found = catalog.model_for(spec.model.id)
    if found is None:
        raise EngineCheckError(f"model {spec.model.id} is not in the catalog: no config.json to hand SGLang")
    config = model_config(found[0])
    hw = catalog.gpu_of(spec.target.platform)
    major, minor = divmod(int(re.sub(r"\D", "", hw.sm_arch) or 0), 10)
    pods = {str(pool.role): pool.gpus_per_pod for pool in topology_of(lock.stack_profile, catalog).pools}
    out = []
    for role, container in _workers(build_objects(lock, catalog)):
        argv = [kubelet_value(a) for a in container["args"]]
        env = {e["name"]: kubelet_value(e["value"]) for e in container.get("env", []) if "value" in e}
        gpu = SglangGpu(name=hw.device_name, capability=(major, minor), memory_gib=hw.hbm_gib, count=pods[role])
        verdict = check_sglang_argv(argv, env, gpu, python, model_config=config,
                                    dynamo_version=spec.versions.dynamo, timeout_s=timeout_s)
        if verdict.sglang_version not in (None, "", spec.engine_version):
            raise EngineCheckError(f"{python} runs SGLang {verdict.sglang_version}, the lock pins "
                                   f"{spec.engine_version}")
        result = {"engine": "sglang", "sglang_version": verdict.sglang_version, "accepted": verdict.accepted,
                  "stage": verdict.stage, "error": verdict.error, "resolved": dict(verdict.resolved),
                  "stand_ins": list(verdict.stand_ins), "skipped": list(verdict.skipped)}
        out.append(PoolCheck(lock.metadata.name, role, result, () if verdict.accepted else (verdict.message,),
                             resolved_line(result) if verdict.accepted else ""))
    return out


def resolved_line(result: dict[str, Any]) -> str:
    """What SGLang's ServerArgs resolved for a pool, in one line."""
    r = result["resolved"]
    keys = ("attention_backend", "kv_cache_dtype", "page_size", "speculative_algorithm", "mem_fraction_static",
            "cuda_graph_max_bs_decode", "max_running_requests")
    shown = ", ".join(f"{k} {r[k]}" for k in keys if r.get(k) is not None)
    return f"SGLang {result['sglang_version']} resolves {shown}"
