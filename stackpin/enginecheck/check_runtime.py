"""Engine check: run the pinned vLLM release's own start-up code for one worker pool, on CPU.

Usage (with the engine environment's Python, never imported by stackpin):

    python check_runtime.py SPEC.json

A vLLM worker on a GPU node parses its argv, builds a ``VllmConfig`` (with every
``__post_init__`` rule), and then, while building the model, picks the DeepSeek
V4.1 attention class, resolves the KV-cache dtype, chooses the kernel block size,
resolves the CUDA graph mode, and computes the FlashInfer autotune cache path.
All of those steps are pure Python. When one of them rejects a rendered stack,
the pod dies minutes into start-up on hardware that is expensive to hold.

This script stands in for that worker up to the first step that needs a GPU. It
calls vLLM's own functions, not a model of them. A CPU host cannot import vLLM's
CUDA code paths, so it installs the narrowest stand-ins that make them
importable:

- placeholder modules for the compiled CUDA extensions;
- permissive ``torch.ops._C`` and ``torch.ops._flashmla_C`` namespaces;
- a ``register_fake`` that skips ops the absent extensions would have registered;
- ``HAS_TRITON`` set as triton sets it on a GPU host;
- a CUDA platform (a ``NonNvmlCudaPlatform`` subclass) that reports the GPU named in
  the spec;
- in-process model-class inspection instead of vLLM's fresh child interpreter;
- while the attention layers are constructed (their own ``__init__``, every layer of
  the model in order): a one-process tensor-parallel group reporting the pool's TP
  size, ``torch.cuda.Event`` as a plain object, and the meta device for the weights
  and buffers the constructor allocates (each named where it is installed).

The code that runs never calls a compiled kernel; of the GPU it only reads the
device facts the platform reports. Steps that do need a GPU (weights, memory
profiling, graph capture, kernel tuning) are listed under "skipped" instead of
being run.

The output is one JSON object on stdout; vLLM's logs go to stderr. The exit code
is 0 even when a vLLM step raised: that is a finding, recorded under "failed".
The exit code is 2 only when the spec cannot be read.
"""

# vllm and torch exist only in the engine environment; to stackpin's mypy they are untyped.
# mypy: disable-error-code="import-not-found"
# mypy: allow-subclassing-any, no-warn-return-any

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Compiled CUDA extensions (.so files built against CUDA torch; they cannot load here).
_PLACEHOLDER_MODULES = (
    # Needed to import vLLM's CUDA code at all:
    "vllm._C_stable_libtorch",  # platforms/cuda.py imports it at module top
    "vllm.vllm_flash_attn",  # its __init__ raises without _vllm_fa{2,3}_C
    # Needed so vLLM's own availability probes answer as they do on a GPU node with the
    # release wheel, which ships all three: has_deep_gemm() (indexer CUDA graph support),
    # and _is_flashmla_available() (the automatic DeepSeek V4.1 attention pick).
    "vllm.third_party.deep_gemm._C",
    "vllm._flashmla_C",
    "vllm._flashmla_extension_C",
    # A CuTe DSL kernel module (imports nvidia-cutlass-dsl and the CUDA driver bindings at its top). The
    # attention layer's constructor imports it only to register token counts for the kernel's JIT warm-up
    # (models/deepseek_v41/nvidia/ops/o_proj.py:48-60; the registry records them, jit_warmup.py:971-973),
    # a GPU step this check lists as skipped.
    "vllm.models.deepseek_v41.nvidia.ops.fused_wo_a",
)

# The worker's GPU-only steps, which this check never runs.
_GPU_STEPS = (
    "weights load",
    "KV cache memory profiling",
    "KV cache allocation",
    "attention metadata builders and kernel warm-up",
    "CUDA graph capture",
)

_DSV41_ARCH = "DeepseekV41ForCausalLM"


class SpecError(Exception):
    """The spec file is missing, not JSON, or lacks a required field."""


class StageFailed(Exception):
    """A vLLM step raised; carries the stage name and the original exception."""

    def __init__(self, stage: str, exc: BaseException) -> None:
        super().__init__(stage)
        self.stage = stage
        self.exc = exc


def load_spec(path: str) -> dict[str, Any]:
    """Read SPEC.json and check the fields this script relies on."""
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {path}: {exc}") from exc
    if not isinstance(spec, dict):
        raise SpecError("spec is not a JSON object")
    argv = spec.get("vllm_argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise SpecError("vllm_argv must be a list of strings")
    env = spec.get("env", {})
    if not isinstance(env, dict):
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
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"gpu needs capability [major, minor], name, memory_gib, count: {exc}") from exc
    for key in ("cache_root", "hf_home"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise SpecError(f"{key} must be a directory path")
    return spec


def apply_env(spec: dict[str, Any]) -> None:
    """Set the worker's environment before vLLM is imported; vLLM reads much of it at import."""
    for key, value in spec.get("env", {}).items():
        os.environ[str(key)] = str(value)
    # Keep every cache vLLM, Hugging Face and FlashInfer write under the spec's temp dirs.
    os.environ["VLLM_CACHE_ROOT"] = spec["cache_root"]
    os.environ["HF_HOME"] = spec["hf_home"]
    os.environ["XDG_CACHE_HOME"] = spec["cache_root"]
    # vLLM's autotune path uses only the last two parts of FlashInfer's workspace dir.
    os.environ["FLASHINFER_WORKSPACE_BASE"] = spec["cache_root"]
    # dynamo.vllm sets these two before it builds the config (main.py).
    os.environ["VLLM_NO_USAGE_STATS"] = "1"
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    # vLLM logs to stdout by default; stdout carries only this script's JSON.
    os.environ["VLLM_LOGGING_STREAM"] = "ext://sys.stderr"
    # FlashInfer derives its arch directory from the visible GPUs; name the spec's GPU instead.
    # For SM 12.x it would also ask nvcc for the CUDA version (>= 12.9 gives 120f / 12Na);
    # the suffix is given here because vLLM 0.31.0's CUDA 13 build always qualifies.
    major, minor = spec["gpu"]["capability"]
    arch = f"{major}.{minor}" if major != 12 else f"{major}.{minor}{'f' if minor == 0 else 'a'}"
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", arch)


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
    """Serves _PLACEHOLDER_MODULES (and their submodules) ahead of the real files."""

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


def install_stand_ins(gpu: dict[str, Any]) -> None:
    """Make vLLM's CUDA code importable on a CPU-only host (see the module docstring)."""
    # Stands in for the compiled CUDA kernels (_PLACEHOLDER_MODULES); config construction
    # imports them but never calls into them.
    sys.meta_path.insert(0, _PlaceholderFinder())

    from unittest import mock

    import torch
    import torch.library

    class _PermissiveOps:
        """Stands in for the compiled kernels' torch.ops namespace; config construction never calls these ops."""

        def __init__(self, namespace: str) -> None:
            self._namespace = namespace

        def __getattr__(self, name: str) -> Any:
            return mock.MagicMock(name=f"torch.ops.{self._namespace}.{name}")

    # Import-time probes such as cutlass_scaled_mm_supports_block_fp8 read torch.ops._C.
    torch.ops.__dict__["_C"] = _PermissiveOps("_C")
    # is_flashmla_mega_attn_supported() asks hasattr() for the mega-attention ops; the
    # release's _flashmla_C.abi3.so registers them (fused_norm_rope_attn_rope_cast_decode,
    # permute_q_b_proj).
    torch.ops.__dict__["_flashmla_C"] = _PermissiveOps("_flashmla_C")

    real_register_fake = torch.library.register_fake

    def register_fake(op: Any, fn: Callable[..., Any] | None = None, /, *args: Any, **kwargs: Any) -> Any:
        """Stands in for fake-kernel registration of compiled ops that are absent here; never called by config code."""

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            try:
                return real_register_fake(op, func, *args, **kwargs)
            except RuntimeError as exc:
                if "does not exist" in str(exc):
                    return func
                raise

        return register(fn) if fn is not None else register

    torch.library.register_fake = register_fake

    # `import vllm` resolves the platform (UnspecifiedPlatform here, since NVML finds
    # no GPU) before any module binds current_platform, so replacing it now is enough.
    import vllm.platforms as platforms
    from vllm.platforms.cuda import NonNvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability

    capability = DeviceCapability(*gpu["capability"])
    name = gpu["name"]
    memory = int(gpu["memory_gib"] * (1 << 30))
    count = gpu["count"]

    class SpecCudaPlatform(NonNvmlCudaPlatform):
        """Stands in for the GPU: reports the spec's device; config construction only reads these facts."""

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:  # noqa: ARG003 - Platform signature
            return capability

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:  # noqa: ARG003 - Platform signature
            return name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:  # noqa: ARG003 - Platform signature
            return memory

        @classmethod
        def device_count(cls) -> int:
            return count

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:  # noqa: ARG003 - Platform signature
            return True

    platforms._current_platform = SpecCudaPlatform()

    # Stands in for triton finding an active GPU driver (it finds none here, and vLLM
    # then turns model runner V2 off); config construction never launches a kernel.
    import vllm.config.vllm as config_vllm

    config_vllm.HAS_TRITON = True

    # Stands in for the child interpreter vLLM inspects a model class in (so the parent
    # never initialises CUDA; there is no CUDA here). The child would see no GPU and an
    # unspecified platform, where the real one sees the GPU this platform stands in for.
    # Running it in-process also saves ~12 s per fresh cache root.
    import vllm.model_executor.models.registry as registry

    registry._run_in_subprocess = lambda fn: fn()


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _stage(stage: str, fn: Callable[[], Any]) -> Any:
    """Run one vLLM step; a raise becomes a StageFailed finding."""
    try:
        return fn()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- any raise is the finding
        traceback.print_exc(file=sys.stderr)
        raise StageFailed(stage, exc) from exc


class _ArgvError(Exception):
    """vLLM's parser rejected the argv (argparse would otherwise exit)."""


def parse_engine_args(argv: list[str]) -> Any:
    """Parse the worker's argv with vLLM's own parser, the way dynamo.vllm 1.6.1 does.

    dynamo/vllm/args.py builds FlexibleArgumentParser(add_help=False), adds
    AsyncEngineArgs.add_cli_args(async_args_only=False), parses, and calls
    AsyncEngineArgs.from_cli_args. Its update_engine_config_with_dynamo then sets a few
    EngineArgs fields before the config is built; those assignments are repeated here.
    """
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(add_help=False)
    AsyncEngineArgs.add_cli_args(parser, async_args_only=False)

    def error(message: str) -> None:
        raise _ArgvError(message)

    parser.error = error
    namespace = parser.parse_args(argv)
    engine_args = AsyncEngineArgs.from_cli_args(namespace)
    if engine_args.enable_prefix_caching is None:
        engine_args.enable_prefix_caching = True
    if not engine_args.enable_prefix_caching:
        engine_args.kv_events_config = None
    engine_args.skip_tokenizer_init = False
    engine_args.enable_log_requests = False
    engine_args.disable_log_stats = False
    return engine_args


def summarize_config(vllm_config: Any) -> dict[str, Any]:
    """The fields stackpin compares, read from the finished VllmConfig."""
    import vllm.envs as envs

    cc = vllm_config.compilation_config
    cache = vllm_config.cache_config
    sched = vllm_config.scheduler_config
    par = vllm_config.parallel_config
    backend = vllm_config.attention_config.backend
    return {
        "cudagraph_mode": cc.cudagraph_mode.name,
        "compilation_mode": cc.mode.name,
        # __post_init__ may have set it (auto-enable for DeepSeek V4.1 when unset).
        "breakable_cudagraph": bool(envs.VLLM_USE_BREAKABLE_CUDAGRAPH),
        "capture_sizes": list(cc.cudagraph_capture_sizes or []),
        "max_capture_size": cc.max_cudagraph_capture_size,
        # CacheConfig fills 16 when unset; the worker then picks the real one after model load.
        "block_size": cache.block_size if cache.user_specified_block_size else None,
        "kv_cache_dtype": str(cache.cache_dtype),
        "attention_backend": backend.name if backend is not None else None,
        "max_num_seqs": sched.max_num_seqs,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "tensor_parallel_size": par.tensor_parallel_size,
        "data_parallel_size": par.data_parallel_size,
        "enable_expert_parallel": bool(par.enable_expert_parallel),
        "model_runner_v2": bool(vllm_config.use_v2_model_runner),
        "config_hash": vllm_config.compute_hash(),
    }


def summarize_speculative(vllm_config: Any) -> dict[str, Any] | None:
    """Which draft checkpoint revision the worker would load, next to the target's."""
    sc = vllm_config.speculative_config
    if sc is None:
        return None
    draft = sc.draft_model_config
    return {
        "method": str(sc.method),
        "num_speculative_tokens": int(sc.num_speculative_tokens or 0),
        "draft_model": str(draft.model if draft is not None else sc.model),
        # None means the draft resolves the Hub's default branch, not the pinned commit.
        "draft_revision": draft.revision if draft is not None else sc.revision,
        "target_revision": vllm_config.model_config.revision,
    }


def has_torch_compile_decorator(architecture: str) -> bool:
    """Whether the model class's package uses @support_torch_compile, decided from the source.

    The worker asks has_compiled_submodule(model) of the loaded model; that needs the
    weights on a GPU. A submodule can only be compiled if its class carries the
    decorator, so the package that defines the model is searched instead: the
    vllm.models.<name> package for the hardware-isolated layout, else the model file.
    """
    from vllm.model_executor.models.registry import ModelRegistry

    module_name = ModelRegistry.models[architecture].module_name
    found = importlib.util.find_spec(module_name)
    if found is None or not found.origin:
        return False
    origin = Path(found.origin)
    parts = module_name.split(".")
    if parts[:2] == ["vllm", "models"] and len(parts) >= 3:
        package = importlib.util.find_spec(".".join(parts[:3]))
        files = sorted(Path(package.origin).parent.rglob("*.py")) if package and package.origin else [origin]
    else:
        files = [origin]
    pattern = re.compile(r"^\s*@support_torch_compile\b|^[^#\n]*\bsupport_torch_compile\(", re.MULTILINE)
    return any(pattern.search(f.read_text(errors="replace")) for f in files)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def init_tensor_parallel(tp_size: int) -> None:
    """vLLM's process groups for one process, its tensor-parallel group reporting `tp_size` ranks.

    As vLLM's own CPU tests do (tests/conftest.py dist_init: init_distributed_environment with world size 1,
    then initialize_model_parallel(1, 1)), here over gloo on loopback, under a default VllmConfig so the
    groups are sized for one process. Stand-in: the TP group's world_size is then set to the pool's TP, which
    is all get_tensor_model_parallel_world_size() reads (distributed/parallel_state.py:2356-2358); the layers
    built are rank 0's. Nothing is ever sent over the group.
    """
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    with set_current_vllm_config(VllmConfig()):
        parallel_state.init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
        )
        parallel_state.ensure_model_parallel_initialized(1, 1)
    parallel_state.get_tp_group().world_size = tp_size


class _NoCudaEvent:
    """Stands in for torch.cuda.Event, which cannot be created without CUDA: the attention constructor only
    keeps four for its forward's stream ordering (models/deepseek_v41/attention.py:485); none is recorded here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def construct_attention_layers(vllm_config: Any, attn_cls: type) -> list[Any]:
    """Every backbone layer's attention, built by its own constructor in the model's order, as
    DeepseekV4DecoderLayer does (models/deepseek_v41/nvidia/model.py: `_select_dsv4_attn_cls(vllm_config)(
    vllm_config, prefix=f"{prefix}.attn", ...)`): every limit a constructor enforces (heads and o_groups per
    rank, compress ratios and KV sources, KV-cache dtype for its layout, the subclass's own checks) is met or
    raised as on the GPU. The weights and buffers are made on the meta device (stands in for the GPU memory
    the worker allocates them in; nothing is computed). The layers are unregistered afterwards."""
    import torch
    from vllm.config import set_current_vllm_config

    context = vllm_config.compilation_config.static_forward_context
    before = set(context)
    real_event = torch.cuda.Event
    torch.cuda.Event = _NoCudaEvent
    try:
        with set_current_vllm_config(vllm_config), torch.device("meta"):
            layers = [attn_cls(vllm_config, prefix=f"model.layers.{i}.attn")
                      for i in range(vllm_config.model_config.hf_config.num_hidden_layers)]
    finally:
        torch.cuda.Event = real_event
        for name in set(context) - before:
            del context[name]
    return layers


def _kv_dtype_stored(cache_dtype: str, torch_dtype: Any) -> str:
    """The KV-cache dtype string the layer resolved: a packed record (fp8_ds_mla, nvfp4_ds_mla) or a
    plain-row dtype (fp8, fp8_e4m3, bfloat16). "auto" is named by the element dtype it resolves to."""
    if cache_dtype == "auto":
        return str(torch_dtype).removeprefix("torch.")
    return cache_dtype


def run_model_steps(vllm_config: Any, skipped: list[str]) -> dict[str, Any]:
    """DeepSeek V4.1's model-build steps that are pure Python, in the worker's order."""
    import vllm.envs as envs
    from vllm.config import CompilationMode, set_current_vllm_config

    # The attention layer class the decoder layer constructor instantiates.
    def select() -> Any:
        from vllm.models.deepseek_v41.nvidia.model import _select_dsv4_attn_cls

        return _select_dsv4_attn_cls(vllm_config)

    attn_cls = _stage("attention_class", select)

    # The layers' own constructors: each resolves the KV dtype from its layout and writes the
    # canonical string back onto cache_config, as the worker does.
    tp_size = vllm_config.parallel_config.tensor_parallel_size
    _stage("attention_layers", lambda: init_tensor_parallel(tp_size))
    layers = _stage("attention_layers", lambda: construct_attention_layers(vllm_config, attn_cls))
    cache_dtype, torch_dtype = layers[0].kv_cache_dtype, layers[0].kv_cache_torch_dtype

    # The indexer K cache layer picks its backend from the attention config. Its
    # constructor allocates nothing on a device; head_dim does not enter the choice.
    def indexer_backend() -> Any:
        import torch
        from vllm.models.deepseek_v41.attention import DeepseekV4IndexerCache

        prefix = "engine_check.indexer.k_cache"
        with set_current_vllm_config(vllm_config):
            layer = DeepseekV4IndexerCache(
                head_dim=128, dtype=torch.uint8, prefix=prefix, cache_config=vllm_config.cache_config
            )
        # It registered itself as a layer; the config must not keep a layer that isn't there.
        vllm_config.compilation_config.static_forward_context.pop(prefix, None)
        return layer.get_attn_backend()

    indexer_cls = _stage("indexer_backend", indexer_backend)

    # Kernel block size: initialize_kv_cache -> prepare_kernel_block_sizes.
    kernel_block_size: int | None = None
    if vllm_config.cache_config.user_specified_block_size:

        def select_block() -> Any:
            from vllm.v1.worker.utils import select_common_block_size

            return select_common_block_size(vllm_config.cache_config.block_size, [attn_cls.backend_cls, indexer_cls])

        kernel_block_size = _stage("kernel_block_size", select_block)
    else:
        skipped.append(
            "kernel block size selection (--block-size unset: vLLM picks the block size "
            "after model load, update_block_size_for_backend)"
        )

    # CUDA graph mode: v1/worker/gpu/model_runner.py initialize_kv_cache.
    compiled = has_torch_compile_decorator(vllm_config.model_config.architectures[0])
    # A decorated submodule compiles only under VLLM_COMPILE (compilation/decorators.py).
    compiled_submodule = compiled and vllm_config.compilation_config.mode == CompilationMode.VLLM_COMPILE
    skipped.append(
        "has_compiled_submodule() on the loaded model (decided from the source instead: the "
        f"model's package {'uses' if compiled else 'has no'} @support_torch_compile)"
    )
    piecewise = bool(envs.VLLM_USE_BREAKABLE_CUDAGRAPH or compiled_submodule)

    def resolve_cudagraph() -> Any:
        from vllm.models.deepseek_v41.compressor import CompressorBackend
        from vllm.v1.attention.backend import AttentionCGSupport
        from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWABackend
        from vllm.v1.worker.gpu.spec_decode.adaptive_verification import resolve_adaptive_cudagraph_mode

        cc = vllm_config.compilation_config
        sc = vllm_config.speculative_config
        if vllm_config.use_v2_model_runner and sc is not None and sc.enable_adaptive_verification:
            cc.cudagraph_mode = resolve_adaptive_cudagraph_mode(
                cc.cudagraph_mode, piecewise_capture_available=piecewise
            )
        # The runner takes the weakest CUDA graph support among all attention groups'
        # metadata builders; a DeepSeek V4.1 decoder layer brings these four (main
        # attention, sliding-window cache, indexer K cache, compressor state).
        backends = [
            attn_cls.backend_cls,
            attn_cls.swa_backend_cls or DeepseekSparseSWABackend,
            indexer_cls,
            CompressorBackend,
        ]
        min_support, min_backend = AttentionCGSupport.ALWAYS, None
        for backend in backends:
            support = backend.get_builder_cls().get_cudagraph_support(vllm_config, None)
            if support.value < min_support.value:
                min_support, min_backend = support, backend.__name__
        decode_query_len = 1 + vllm_config.num_speculative_tokens
        kwargs: dict[str, Any] = {
            "use_v2_model_runner": bool(vllm_config.use_v2_model_runner),
            "tensor_parallel_size": vllm_config.parallel_config.tensor_parallel_size,
            "kv_cache_config": None,
            "max_num_reqs": vllm_config.scheduler_config.max_num_seqs,
            "is_profiling": False,
        }
        if vllm_config.use_v2_model_runner:
            # Model runner V1 does not pass it (it keeps the default True).
            kwargs["piecewise_capture_available"] = piecewise
        return cc.resolve_cudagraph_mode_and_sizes(min_support, min_backend, decode_query_len, **kwargs)

    runtime_mode = _stage("cudagraph_mode", resolve_cudagraph)
    sc = vllm_config.speculative_config
    if sc is not None and sc.enable_adaptive_verification:
        skipped.append("adaptive verification's confidence-head check (reads the draft weights)")

    return {
        "attention_class": attn_cls.__name__,
        "attention_layers": len(layers),
        "heads_per_rank": layers[0].n_local_heads,
        "compress_ratios": sorted({layer.compress_ratio for layer in layers}),
        "kv_source_layers": [layer.layer_id for layer in layers if layer.is_kv_source],
        "kv_cache_dtype_stored": _kv_dtype_stored(cache_dtype, torch_dtype),
        "kernel_block_size": kernel_block_size,
        "piecewise_capture_available": piecewise,
        "compiled_submodule": compiled_submodule,
        "cudagraph_mode_runtime": runtime_mode.name,
    }


def _model_configs(vllm_config: Any) -> list[Any]:
    sc = vllm_config.speculative_config
    draft = sc.draft_model_config if sc is not None else None
    return [c for c in (vllm_config.model_config, draft) if c is not None]


def as_pod_sees(vllm_config: Any, pod_paths: dict[str, str]) -> list[str]:
    """Rewrite the model configs' path fields from this check's scratch model store to the pod's.

    vLLM's config hash covers every ModelConfig field but a few (config/model.py:423-480), the target's and the
    draft's: `model` is the --model the pod passes (a Hub id stays one), but a draft read from the target's
    checkpoint is named by its snapshot directory under HF_HOME (config/speculative.py:1158-1162 takes the
    target's resolved model). Here HF_HOME is a scratch directory; the pod's is the model volume's mount. So
    each string field under a scratch directory is renamed to the pod's before hashing, as if the files lay
    there. Returns the fields it still finds under a scratch directory with no pod path (none when all map)."""
    from dataclasses import fields

    unmapped = []
    for config in _model_configs(vllm_config):
        for f in fields(config):
            value = getattr(config, f.name, None)
            if not isinstance(value, str):
                continue
            for scratch, pod in pod_paths.items():
                if value == scratch or value.startswith(scratch.rstrip("/") + "/"):
                    if pod:
                        setattr(config, f.name, pod.rstrip("/") + value[len(scratch.rstrip("/")):])
                    else:
                        unmapped.append(f"{f.name}={value}")
    return unmapped


def resolve_autotune(vllm_config: Any, pod_paths: dict[str, str]) -> dict[str, Any]:
    """The file the leader rank's kernel warm-up reads and rewrites, from vLLM's own resolver.

    It hashes runner.vllm_config as the worker holds it at warm-up, i.e. after the
    model-build steps above have written the KV dtype and CUDA graph mode back, with
    the model paths the pod has (as_pod_sees).
    """
    from vllm.model_executor.warmup.flashinfer_autotune_cache import resolve_flashinfer_autotune_file

    unmapped = as_pod_sees(vllm_config, pod_paths)
    # The resolver reads only runner.vllm_config.
    runner = types.SimpleNamespace(vllm_config=vllm_config)
    path = resolve_flashinfer_autotune_file(runner)
    return {"file": str(path), "config_hash_dir": path.parent.name,
            "models": [c.model for c in _model_configs(vllm_config)],
            # A path the pod's is unknown for (no HF_HOME rendered): the hash is not the pod's.
            "unmapped_paths": unmapped}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """All stages in order; the first vLLM raise ends the run and is reported as "failed"."""
    result: dict[str, Any] = {
        "vllm_version": "",
        "failed": None,
        "config": None,
        "model": None,
        "speculative": None,
        "autotune": None,
        "skipped": list(_GPU_STEPS),
    }
    autotune = bool(spec.get("autotune"))
    if autotune:
        result["skipped"].append("FlashInfer autotune kernels")
    try:
        _stage("import", lambda: install_stand_ins(spec["gpu"]))
        import vllm

        result["vllm_version"] = vllm.__version__
        engine_args = _stage("parse", lambda: parse_engine_args(spec["vllm_argv"]))

        def create() -> Any:
            from vllm.usage.usage_lib import UsageContext

            # dynamo.vllm builds the config with the OpenAI server's usage context.
            return engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)

        vllm_config = _stage("config", create)
        result["config"] = _stage("config", lambda: summarize_config(vllm_config))
        # Read from the finished config; no further vLLM step is involved.
        result["speculative"] = _stage("speculative", lambda: summarize_speculative(vllm_config))

        if _DSV41_ARCH in (vllm_config.model_config.architectures or []):
            result["model"] = run_model_steps(vllm_config, result["skipped"])
        else:
            result["skipped"].append(
                "model-build steps (attention class, KV dtype, kernel block size, runtime CUDA graph mode): "
                "run only for DeepseekV41ForCausalLM; any autotune hash is of the config as built"
            )
        if autotune:
            pod_paths = {str(k): str(v) for k, v in (spec.get("pod_paths") or {}).items()}
            result["autotune"] = _stage("autotune", lambda: resolve_autotune(vllm_config, pod_paths))
    except StageFailed as failed:
        result["failed"] = {"stage": failed.stage, "error": _error(failed.exc)}
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check_runtime.py SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = load_spec(argv[1])
    except SpecError as exc:
        print(f"check_runtime: {exc}", file=sys.stderr)
        return 2
    apply_env(spec)
    # vLLM and native code may print to fd 1; send everything to stderr and keep a
    # private copy of stdout for the one JSON line.
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
