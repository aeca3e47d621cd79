"""Kernel backends the pinned engine and the model accept (docs/facts.md#kernel-backends)."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.backends.vllm_rules import vllm_rule
from stackpin.catalog.model_configs import attention_heads
from stackpin.catalog.startup import AttentionBackend, ModelStartup, StartupFacts, startup_facts, startup_file_name
from stackpin.rules import Context, Hit, Severity, choices_hint, pools

_K = ("spec", "kernels")


@vllm_rule("SP211", Severity.error, "attention backend the model rejects")
def attention_rejected(ctx: Context) -> Iterator[Hit]:
    backend = ctx.profile.spec.kernels.attention
    if ctx.model is not None and backend in ctx.model.rejected_attention_backends:
        yield Hit(_K + ("attention",), f"{ctx.model_key}: {ctx.model.rejected_attention_backends[backend]}",
                  f"one of: {', '.join(ctx.model.attention_backends)}")


@vllm_rule("SP212", Severity.warning, "attention backend not known for the model")
def attention_unknown(ctx: Context) -> Iterator[Hit]:
    backend = ctx.profile.spec.kernels.attention
    if (ctx.model is not None and backend is not None and backend not in ctx.model.attention_backends
            and backend not in ctx.model.rejected_attention_backends):
        found = startup_model(ctx)
        ignored = (f"; vLLM {found[0].version} ignores it for {ctx.model.architecture} and picks a kernel by "
                   f"itself ({found[1].selector_source})") if found else ""
        yield Hit(_K + ("attention",), f"attention backend {backend!r} is not one the catalog knows for "
                  f"{ctx.model_key}{ignored}", f"one of: {', '.join(ctx.model.attention_backends)}")


@vllm_rule("SP213", Severity.error, "kernel backend the pinned vLLM does not have")
def backend_unknown(ctx: Context) -> Iterator[Hit]:
    if ctx.engine_catalog is None:
        return
    for field in ("attention", "moe", "linear", "all2all"):
        value = getattr(ctx.profile.spec.kernels, field)
        choices = ctx.engine_catalog.choices[f"{field}_backends"]
        if value is not None and value not in choices:
            yield Hit(_K + (field,), f"vLLM {ctx.engine_catalog.version} has no {field} backend {value!r}",
                      choices_hint(value, choices, f"catalog/engines/vllm-{ctx.engine_catalog.version}.json"))


@vllm_rule("SP214", Severity.warning, "fallback kernels on a GPU with native support")
def fallback_on_native(ctx: Context) -> Iterator[Hit]:
    if not (ctx.gpu.native_fp8 and ctx.gpu.native_fp4):
        return
    for field in ("moe", "linear"):
        value = getattr(ctx.profile.spec.kernels, field)
        if value in ctx.catalog.engine.fallback_backends:
            yield Hit(_K + (field,), f"{value} is a weight-only fallback; {ctx.gpu.name} runs FP8/FP4 natively",
                      "use a native backend (deep_gemm, cutlass, flashinfer_*)")


# --- what the pinned vLLM does with the backend once the model is built (catalog/startup.py) ---------

def startup_model(ctx: Context) -> tuple[StartupFacts, ModelStartup] | None:
    """The pinned vLLM's start-up facts for the stack's model architecture, when the catalog has them."""
    facts = startup_facts(ctx.profile.spec.engine_version)  # vLLM's rules run only for vLLM stacks
    if facts is None or ctx.model is None or ctx.model.architecture not in facts.models:
        return None
    return facts, facts.models[ctx.model.architecture]


def _attention(ctx: Context) -> tuple[StartupFacts, ModelStartup, str, AttentionBackend] | None:
    found = startup_model(ctx)
    backend = ctx.profile.spec.kernels.attention
    if found is None or backend is None or backend not in found[1].attention:
        return None
    return found[0], found[1], backend, found[1].attention[backend]


def _kv_dtype(ctx: Context) -> tuple[str, str, AttentionBackend, str] | None:
    """(vLLM version, backend, its facts, the profile's kv-cache dtype) when the catalog knows the backend."""
    found = _attention(ctx)
    return None if found is None else (found[0].version, found[2], found[3], ctx.profile.spec.kv_cache.dtype)


@vllm_rule("SP215", Severity.error, "KV-cache dtype the attention kernel raises on")
def kv_dtype_for_backend(ctx: Context) -> Iterator[Hit]:
    if (found := _kv_dtype(ctx)) is None:
        return
    version, backend, kernel, dtype = found
    if dtype not in kernel.kv_cache_dtypes:
        yield Hit(("spec", "kvCache", "dtype"), f"vLLM {version}'s {backend} layer raises on kv-cache dtype "
                  f"{dtype!r} while the model is built ({kernel.source})",
                  f"one of: {', '.join(kernel.kv_cache_dtypes)}")


@vllm_rule("SP216", Severity.error, "KV block size no attention kernel can use")
def block_size_for_backend(ctx: Context) -> Iterator[Hit]:
    if (found := _attention(ctx)) is None or ctx.profile.spec.kv_cache.block_size is None:
        return
    facts, model, backend, _ = found
    problem = model.block_size_problem(backend, ctx.gpu.compute_major, ctx.profile.spec.kv_cache.block_size)
    if problem is not None:
        yield Hit(("spec", "kvCache", "blockSize"), f"vLLM {facts.version} fails after loading the weights: "
                  f"{problem} ({model.block_size_source})", "leave blockSize unset (vLLM then picks one every "
                  "kernel takes) or set a multiple of the kernels' block size")


@vllm_rule("SP217", Severity.error, "no attention kernel of the pinned vLLM runs the model on this GPU")
def attention_for_gpu(ctx: Context) -> Iterator[Hit]:
    found = startup_model(ctx)
    if found is None:
        return
    facts, model = found
    major, backend = ctx.gpu.compute_major, ctx.profile.spec.kernels.attention
    runs = sorted(name for name, kernel in model.attention.items() if major in kernel.compute_majors)
    if not runs:
        arch = ctx.model.architecture if ctx.model else "model"
        majors = "/".join(f"{m}.x" for m in sorted({m for k in model.attention.values() for m in k.compute_majors}))
        yield Hit(("spec", "target", "platform"), f"vLLM {facts.version} has no {arch} attention kernel for "
                  f"{ctx.gpu.name} ({ctx.gpu.sm_arch}): its backends need SM {majors} ({model.selector_source})",
                  "serve the model on a GPU one of them supports")
    elif backend in model.attention and major not in model.attention[backend].compute_majors:
        yield Hit(_K + ("attention",), f"vLLM {facts.version}'s {backend} does not run on {ctx.gpu.sm_arch}; the "
                  f"selector takes it without a check and the kernels fail ({model.attention[backend].source})",
                  f"one of: {', '.join(runs)}")


@vllm_rule("SP220", Severity.error, "attention kernel that cannot split the model's heads at this tensor parallelism")
def heads_per_rank(ctx: Context) -> Iterator[Hit]:
    if (found := _attention(ctx)) is None or ctx.model_key is None:
        return
    facts, _, backend, kernel = found
    multiple, heads = kernel.heads_per_rank_multiple_of, attention_heads(ctx.model_key)
    if multiple is None or heads is None:
        return
    for role, path, pool in pools(ctx):
        tp = pool.tensor_parallel
        if heads % tp or (heads // tp) % multiple:
            fits = [n for n in range(1, heads // multiple + 1) if heads % n == 0 and (heads // n) % multiple == 0]
            yield Hit(path + ("tensorParallel",), f"vLLM {facts.version}'s {backend} layer raises while the model is "
                      f"built: {role} tensorParallel={tp} leaves {heads}/{tp} = {heads / tp:g} attention heads per "
                      f"rank, not a multiple of {multiple} ({kernel.heads_per_rank_source})",
                      f"use tensorParallel {'/'.join(map(str, fits))}, or another attention backend")


@vllm_rule("SP218", Severity.warning, "KV-cache dtype the attention kernel silently replaces")
def kv_dtype_rewritten(ctx: Context) -> Iterator[Hit]:
    if (found := _kv_dtype(ctx)) is None:
        return
    version, backend, kernel, dtype = found
    stored = kernel.kv_cache_dtypes.get(dtype)
    if stored is not None and stored != dtype and not (dtype == "auto" and stored == "bfloat16"):
        yield Hit(("spec", "kvCache", "dtype"), f"vLLM {version}'s {backend} stores kv-cache dtype "
                  f"{dtype!r} as {stored!r}, and the stack's memory and diffs would say {dtype!r} ({kernel.source})",
                  f"set kvCache.dtype: {stored}")


@vllm_rule("SP219", Severity.warning, "no start-up facts for the pinned vLLM")
def no_startup_facts(ctx: Context) -> Iterator[Hit]:
    version = ctx.profile.spec.versions.vllm
    if version is not None and ctx.engine_catalog is not None and startup_facts(version) is None:
        yield Hit(("spec", "versions", "vllm"), f"stackpin has no start-up facts for vLLM {version} "
                  f"(catalog/engines/{startup_file_name(version)}): what it raises on or changes silently once the "
                  "model is built (attention kernel, KV dtype, block size, CUDA graph fallbacks) went unchecked",
                  "add the file from the release's source (docs/engine-args.md#start-up-facts)")


@vllm_rule("SP127", Severity.warning, "wide expert parallelism on the default all2all backend")
def wide_ep_all2all(ctx: Context) -> Iterator[Hit]:
    backend = ctx.profile.spec.kernels.all2all
    for role, _path, pool in pools(ctx):
        if pool.expert_parallel and pool.nodes_needed > 1 and backend in (
                None, "allgather_reducescatter"):
            yield Hit(("spec", "kernels", "all2all"), f"the {role} pool runs expert parallelism over "
                      f"{pool.gpus_per_replica} GPUs on several nodes with the default allgather_reducescatter "
                      "all2all", "pin a multi-node all2all backend (flashinfer_nvlink_*, deepep_*, nixl_ep)")
