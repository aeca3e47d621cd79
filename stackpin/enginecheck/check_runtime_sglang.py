"""Engine check for SGLang: build and resolve the pinned release's own ``ServerArgs`` for one worker, on CPU.

Usage (with the SGLang engine environment's Python, never imported by stackpin):

    python check_runtime_sglang.py SPEC.json

A ``python3 -m dynamo.sglang`` worker (Dynamo 1.6.1, dynamo/sglang/args.py ``parse_args``) hands the flags
that are not Dynamo's own to a parser SGLang fills (``ServerArgs.add_cli_args``), builds the record with
``ServerArgs.from_cli_args``, and SGLang's engine then resolves it before it starts anything
(sglang/srt/entrypoints/engine.py ``_launch_subprocesses``: ``resolve_once()``, then ``check_server_args()``).
SGLang 0.5.21's ``ServerArgs.__post_init__`` does nothing: every rule (model-specific overrides, attention and
MoE backend choice, CUDA graph sizes, speculative decoding, disaggregation, memory fraction) runs in
``resolve_once()`` (sglang/srt/arg_groups/pipeline.py). This script runs exactly those calls, in that order.

A CPU host cannot import SGLang's CUDA code paths as they are, so the narrowest stand-ins are installed first,
each named under "stand_ins" in the answer:

- Triton: SGLang's own stub for hosts without Triton (sglang/_platform_stubs.py, which SGLang installs on
  Apple silicon), loaded from the installed wheel; kernels are defined, never compiled;
- ``sgl_kernel`` (the sglang-kernel wheel: compiled CUDA kernels, 1.2 GB): placeholder modules whose
  attributes are mocks, never called while the record is resolved;
- a ``register_fake`` that skips fake-kernel registrations of ops a compiled extension that cannot load here
  would have registered (torchvision's CUDA build);
- ``torch.cuda`` reporting the spec's GPU: available, its count, compute capability, name and memory, and
  ``torch.version.cuda`` the spec's CUDA (what SGLang's ``is_sm100_supported`` and friends read,
  sglang/srt/utils/common.py ``_check_cuda_device_version``); NVML and nvidia-smi, which SGLang asks first
  on a GPU host, answer with the same device (``_get_device_sm_via_nvml``, ``get_nvgpu_memory_capacity``).

Steps that need a GPU (weights, KV cache memory profiling, CUDA graph capture, kernel JIT and autotuning) and
the launcher steps that need the running server are listed under "skipped", never pretended.

The output is one JSON object on stdout; SGLang's logs go to stderr. The exit code is 0 even when SGLang
refused the worker: that is the finding, under "failed". It is 2 only when the spec cannot be read.
"""

# sglang and torch exist only in the engine environment; to stackpin's mypy they are untyped.
# mypy: disable-error-code="import-not-found"
# mypy: no-warn-return-any

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Compiled CUDA kernel packages that cannot load on a CPU host: placeholders, never called.
_PLACEHOLDER_MODULES = ("sgl_kernel",)

_GPU_STEPS = (
    "weights load",
    "KV cache memory profiling (mem_fraction_static is resolved from the reported GPU memory, never measured)",
    "KV cache allocation",
    "CUDA graph capture",
    "kernel JIT compilation and FlashInfer autotuning",
)
_LAUNCHER_STEPS = (
    "Dynamo's disaggregation bootstrap port reservation (SGLang's default port is kept)",
    "reasoning and tool-call parser 'auto' detection (reads the tokenizer's chat template)",
    "publishing the resolved config and starting the scheduler, tokenizer and detokenizer processes",
)

# The resolved values stackpin reads, as ServerArgs.resolved_dict() names them.
_FIELDS = (
    "attention_backend", "prefill_attention_backend", "decode_attention_backend", "moe_runner_backend",
    "moe_a2a_backend", "disable_cuda_graph", "speculative_algorithm", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_dspark_block_size",
    "mem_fraction_static", "kv_cache_dtype", "page_size", "disaggregation_mode", "disaggregation_transfer_backend",
    "chunked_prefill_size", "max_running_requests", "context_length", "tp_size", "dp_size", "ep_size", "pp_size",
    "enable_dp_attention",
)


class SpecError(Exception):
    """The spec file is missing, not JSON, or lacks a required field."""


class StageFailed(Exception):
    """An SGLang step raised; carries the stage name and the original exception."""

    def __init__(self, stage: str, exc: BaseException) -> None:
        super().__init__(stage)
        self.stage = stage
        self.exc = exc


class _ArgvError(Exception):
    """SGLang's parser refused the argv (argparse would otherwise print usage and exit)."""


def load_spec(path: str) -> dict[str, Any]:
    """Read SPEC.json and check the fields this script relies on."""
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {path}: {exc}") from exc
    if not isinstance(spec, dict):
        raise SpecError("spec is not a JSON object")
    argv = spec.get("sglang_argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise SpecError("sglang_argv must be a list of strings")
    if not isinstance(spec.get("env", {}), dict):
        raise SpecError("env must be an object")
    gpu = spec.get("gpu")
    if not isinstance(gpu, dict):
        raise SpecError("gpu must be an object")
    try:
        major, minor = (int(x) for x in gpu["capability"])
        gpu["capability"] = [major, minor]
        gpu["memory_gib"] = float(gpu["memory_gib"])
        gpu["count"] = int(gpu["count"])
        gpu["name"] = str(gpu["name"])
        gpu["cuda"] = str(gpu.get("cuda", "13.0"))
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"gpu needs capability [major, minor], name, memory_gib, count: {exc}") from exc
    for key in ("cache_root", "hf_home"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise SpecError(f"{key} must be a directory path")
    return spec


def apply_env(spec: dict[str, Any]) -> None:
    """The worker's environment, set before SGLang is imported (it reads much of it at import)."""
    for key, value in spec.get("env", {}).items():
        os.environ[str(key)] = str(value)
    # Every cache SGLang, Hugging Face and FlashInfer write stays under the spec's scratch directories.
    os.environ["SGLANG_CACHE_DIR"] = spec["cache_root"]
    os.environ["XDG_CACHE_HOME"] = spec["cache_root"]
    os.environ["HF_HOME"] = spec["hf_home"]


class _PlaceholderModule(types.ModuleType):
    """A module whose every attribute is a MagicMock."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        from unittest import mock

        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves _PLACEHOLDER_MODULES (and their submodules) ahead of any real files."""

    def find_spec(
        self,
        name: str,
        path: Any = None,  # noqa: ARG002 - importlib.abc.MetaPathFinder signature
        target: Any = None,  # noqa: ARG002
    ) -> importlib.machinery.ModuleSpec | None:
        if any(name == p or name.startswith(p + ".") for p in _PLACEHOLDER_MODULES):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:  # noqa: ARG002 - importlib.abc.Loader signature
        return None


def _install_sglang_triton_stub() -> None:
    """SGLang's own Triton stub (sglang/_platform_stubs.py), loaded from the wheel without importing sglang
    (whose package import needs Triton). SGLang installs it only on Apple silicon with MPS
    (install_platform_stubs); its gate is answered for that call alone, by the loaded module's own names.
    What the call does besides Triton (torch.mps attributes it lacks, non_blocking copies to an "mps" device)
    touches nothing a CUDA worker uses."""
    from unittest import mock

    import torch

    path = Path(sysconfig.get_paths()["purelib"]) / "sglang" / "_platform_stubs.py"
    spec = importlib.util.spec_from_file_location("_sglang_platform_stubs", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: SGLang's platform stubs are not in this environment")
    stubs = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = stubs  # dataclasses look their module up while the file runs
    spec.loader.exec_module(stubs)
    vars(stubs).update(sys=types.SimpleNamespace(platform="darwin", modules=sys.modules, meta_path=sys.meta_path),
                       platform=types.SimpleNamespace(machine=lambda: "arm64"))
    with mock.patch.object(torch.backends.mps, "is_available", lambda: True):
        stubs.install_platform_stubs()
    if "triton" not in sys.modules:
        raise ImportError("SGLang's platform stubs installed no Triton stub")


def install_stand_ins(gpu: dict[str, Any]) -> list[str]:
    """Make SGLang's CUDA code paths importable on a CPU host, reporting the spec's GPU; the stand-ins named."""
    import torch
    import torch.library

    _install_sglang_triton_stub()
    sys.meta_path.insert(0, _PlaceholderFinder())

    real_register_fake = torch.library.register_fake

    def register_fake(op: Any, fn: Callable[..., Any] | None = None, /, *args: Any, **kwargs: Any) -> Any:
        """Skips fake kernels of ops whose compiled library could not load here; never called by ServerArgs."""

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            try:
                return real_register_fake(op, func, *args, **kwargs)
            except RuntimeError as exc:
                if "does not exist" in str(exc):
                    return func
                raise

        return register(fn) if fn is not None else register

    torch.library.register_fake = register_fake

    capability = tuple(gpu["capability"])
    name, count = gpu["name"], gpu["count"]
    memory = int(gpu["memory_gib"] * (1 << 30))
    props = types.SimpleNamespace(name=name, total_memory=memory, major=capability[0], minor=capability[1],
                                  uuid="GPU-engine-check")
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: count
    cuda.get_device_capability = lambda device=None: capability  # noqa: ARG005 - torch.cuda's signature
    cuda.get_device_name = lambda device=None: name  # noqa: ARG005
    cuda.get_device_properties = lambda device=None: props  # noqa: ARG005
    cuda.mem_get_info = lambda device=None: (memory, memory)  # noqa: ARG005
    torch.version.cuda = gpu["cuda"]

    # SGLang asks NVML and nvidia-smi before torch on a GPU host: on one, they would describe that host's GPU.
    import sglang.srt.utils.common as common

    common._get_device_sm_via_nvml = lambda: None
    common.get_nvgpu_memory_capacity = lambda: memory / (1 << 20)
    return [
        "triton: SGLang's own stub (sglang/_platform_stubs.py)",
        "sgl_kernel: placeholder modules (compiled CUDA kernels)",
        "torch.library.register_fake: skips ops of compiled libraries that cannot load here (torchvision)",
        f"torch.cuda: {count} x {name}, compute capability {capability[0]}.{capability[1]}, "
        f"{gpu['memory_gib']:g} GiB, CUDA {gpu['cuda']}",
        "NVML and nvidia-smi: the same GPU (sglang.srt.utils.common _get_device_sm_via_nvml, "
        "get_nvgpu_memory_capacity)",
    ]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _stage(stage: str, fn: Callable[[], Any]) -> Any:
    """Run one SGLang step; a raise becomes a StageFailed finding."""
    try:
        return fn()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- any raise is the finding
        traceback.print_exc(file=sys.stderr)
        raise StageFailed(stage, exc) from exc


def parse_server_args(argv: list[str]) -> Any:
    """The record dynamo.sglang 1.6.1 builds from the flags it hands SGLang (dynamo/sglang/args.py parse_args):
    a parser of SGLang's own options (ServerArgs.add_cli_args) with what Dynamo adds to it (_compat.py
    add_sglang_cli_compat: --disable-piecewise-cuda-graph where SGLang lacks it; "gms" among --load-format's
    choices), then the fields Dynamo sets on an LLM worker's namespace before ServerArgs.from_cli_args
    (served_model_name defaults to the model path; incremental_streaming_output on)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    options = parser._option_string_actions
    if "--disable-piecewise-cuda-graph" not in options and "--cuda-graph-backend-prefill" in options:
        parser.add_argument("--disable-piecewise-cuda-graph", dest="cuda_graph_backend_prefill",
                            action="store_const", const="disabled", default=argparse.SUPPRESS)
    for action in parser._actions:
        if getattr(action, "dest", None) == "load_format" and action.choices:
            action.choices = [*action.choices, "gms"]
            break

    def error(message: str) -> Any:
        raise _ArgvError(message)

    parser.error = error  # type: ignore[method-assign]
    namespace = parser.parse_args(argv)
    if not namespace.served_model_name:
        namespace.served_model_name = namespace.model_path
    namespace.incremental_streaming_output = True
    return ServerArgs.from_cli_args(namespace)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def summarize(server_args: Any) -> dict[str, Any]:
    """The resolved values stackpin compares (ServerArgs.resolved_dict(): what the engine runs with)."""
    resolved = server_args.resolved_dict()
    out = {name: _plain(resolved.get(name)) for name in _FIELDS}
    graphs = resolved.get("cuda_graph_config") or {}
    for phase in ("decode", "prefill"):
        config = graphs.get(phase) or {}
        out[f"cuda_graph_{phase}"] = {"backend": _plain(config.get("backend")), "max_bs": config.get("max_bs"),
                                      "bs": _plain(config.get("bs"))}
    decode = out["cuda_graph_decode"]
    out["cuda_graph_max_bs"], out["cuda_graph_bs"] = decode["max_bs"], decode["bs"]
    return out


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """All stages in order; the first SGLang raise ends the run and is reported under "failed"."""
    result: dict[str, Any] = {
        "sglang_version": "",
        "accepted": False,
        "failed": None,
        "resolved": None,
        "stand_ins": [],
        "skipped": [*_GPU_STEPS, *_LAUNCHER_STEPS],
    }
    try:
        result["stand_ins"] = _stage("import", lambda: install_stand_ins(spec["gpu"]))
        import sglang.version

        result["sglang_version"] = sglang.version.__version__
        _stage("import", lambda: importlib.import_module("sglang.srt.server_args"))
        server_args = _stage("parse", lambda: parse_server_args(spec["sglang_argv"]))
        _stage("resolve", server_args.resolve_once)
        _stage("check", server_args.check_server_args)
        result["resolved"] = _stage("resolve", lambda: summarize(server_args))
        result["accepted"] = True
    except StageFailed as failed:
        result["failed"] = {"stage": failed.stage, "error": _error(failed.exc)}
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check_runtime_sglang.py SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = load_spec(argv[1])
    except SpecError as exc:
        print(f"check_runtime_sglang: {exc}", file=sys.stderr)
        return 2
    apply_env(spec)
    # SGLang and native code may print to fd 1; everything goes to stderr, a private copy of stdout keeps the
    # one JSON line.
    sys.stdout.flush()
    json_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    result = run(spec)
    sys.stdout.flush()
    json_out.write(json.dumps(result) + "\n")
    json_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
