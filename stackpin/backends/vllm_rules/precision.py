"""Precision the GPU runs natively, and the fallbacks a profile must state when it does not."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.backends.vllm_rules import vllm_rule
from stackpin.profile.model import Precision
from stackpin.rules import Context, Hit, Severity

_WEIGHTS = ("spec", "model", "weights")
_FALLBACKS = ("spec", "fallbacks")


def needed_formats(ctx: Context) -> set[str]:
    """Low-precision formats the stack computes in: from the weights and the KV-cache dtype."""
    weights = ctx.profile.spec.model.weights
    formats = {Precision.fp8_fp4: {"fp8", "fp4"}, Precision.fp8: {"fp8"}, Precision.fp4: {"fp4"}}.get(weights, set())
    kv = ctx.profile.spec.kv_cache.dtype
    if kv.startswith("fp8"):
        formats.add("fp8")
    if kv.startswith("nvfp4"):
        formats.add("fp4")
    return formats


def _native(ctx: Context, fmt: str) -> bool:
    return ctx.gpu.native_fp8 if fmt == "fp8" else ctx.gpu.native_fp4


def _precision_rule(fmt: str, ctx: Context) -> Iterator[Hit]:
    if fmt not in needed_formats(ctx) or _native(ctx, fmt):
        return
    emulated = fmt in ctx.profile.spec.fallbacks.precision_emulation
    if emulated:
        yield Hit(_FALLBACKS + ("precisionEmulation",), f"{ctx.gpu.name} ({ctx.gpu.sm_arch}) has no native "
                  f"{fmt.upper()}: it runs emulated (weight-only kernels dequantize on the fly), far slower",
                  "fine for self-hosting; do not compare its numbers with native stacks", Severity.warning)
    else:
        yield Hit(_WEIGHTS, f"{ctx.gpu.name} ({ctx.gpu.sm_arch}) has no native {fmt.upper()} but the stack "
                  f"computes in {fmt.upper()}", f"state fallbacks.precisionEmulation: [{fmt}] with "
                  "marlin/triton kernels, or use a GPU with native support")


@vllm_rule("SP141", Severity.error, "FP8 on a GPU without native FP8",
      warning_when="fallbacks.precisionEmulation declares it", acknowledge=True)
def fp8(ctx: Context) -> Iterator[Hit]:
    yield from _precision_rule("fp8", ctx)


@vllm_rule("SP142", Severity.error, "FP4 on a GPU without native FP4",
      warning_when="fallbacks.precisionEmulation declares it", acknowledge=True)
def fp4(ctx: Context) -> Iterator[Hit]:
    yield from _precision_rule("fp4", ctx)


@vllm_rule("SP143", Severity.warning, "emulation declared where the GPU is native")
def needless_emulation(ctx: Context) -> Iterator[Hit]:
    for fmt in ctx.profile.spec.fallbacks.precision_emulation:
        if _native(ctx, fmt):
            yield Hit(_FALLBACKS + ("precisionEmulation",), f"{ctx.gpu.name} runs {fmt.upper()} natively; "
                      "emulating it only costs speed", f"remove {fmt} from precisionEmulation")


@vllm_rule("SP144", Severity.error, "emulation without fallback kernels")
def emulation_kernels(ctx: Context) -> Iterator[Hit]:
    if not ctx.profile.spec.fallbacks.precision_emulation:
        return
    kernels = ctx.profile.spec.kernels
    fallback = set(ctx.catalog.engine.fallback_backends)
    for field in ("moe", "linear"):
        if getattr(kernels, field) not in fallback:
            yield Hit(("spec", "kernels", field), f"precision emulation needs a weight-only fallback kernel for "
                      f"{field}, got {getattr(kernels, field)!r}", f"one of: {', '.join(sorted(fallback))}")


@vllm_rule("SP145", Severity.warning, "weights offloaded to CPU memory")
def cpu_offload(ctx: Context) -> Iterator[Hit]:
    gib = ctx.profile.spec.fallbacks.cpu_offload_gib
    if gib:
        yield Hit(_FALLBACKS + ("cpuOffloadGib",), f"{gib:g} GiB of weights per GPU live in CPU memory and cross "
                  "PCIe on every forward pass", "expect a large drop in output tok/s")


@vllm_rule("SP146", Severity.error, "KV-cache dtype the model or the pinned vLLM does not support")
def kv_dtype(ctx: Context) -> Iterator[Hit]:
    dtype = ctx.profile.spec.kv_cache.dtype
    if ctx.model is not None and dtype not in ctx.model.kv_cache_dtypes:
        yield Hit(("spec", "kvCache", "dtype"), f"{ctx.model_key} does not support kv-cache dtype {dtype!r}",
                  f"one of: {', '.join(ctx.model.kv_cache_dtypes)}")
    elif ctx.engine_catalog is not None and dtype not in ctx.engine_catalog.choices["kv_cache_dtypes"]:
        yield Hit(("spec", "kvCache", "dtype"), f"vLLM {ctx.engine_catalog.version} has no kv-cache dtype {dtype!r}")
