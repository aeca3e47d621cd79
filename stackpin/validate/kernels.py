"""Kernel backends the pinned engine and the model accept (docs/facts.md#kernel-backends)."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.validate import Context, Hit, Severity, choices_hint, rule

_K = ("spec", "kernels")


@rule("SP211", Severity.error, "attention backend the model rejects")
def attention_rejected(ctx: Context) -> Iterator[Hit]:
    backend = ctx.profile.spec.kernels.attention
    if ctx.model is not None and backend in ctx.model.rejected_attention_backends:
        yield Hit(_K + ("attention",), f"{ctx.model_key}: {ctx.model.rejected_attention_backends[backend]}",
                  f"one of: {', '.join(ctx.model.attention_backends)}")


@rule("SP212", Severity.warning, "attention backend not known for the model")
def attention_unknown(ctx: Context) -> Iterator[Hit]:
    backend = ctx.profile.spec.kernels.attention
    if (ctx.model is not None and backend is not None and backend not in ctx.model.attention_backends
            and backend not in ctx.model.rejected_attention_backends):
        yield Hit(_K + ("attention",), f"attention backend {backend!r} is not one the catalog knows for "
                  f"{ctx.model_key}", f"one of: {', '.join(ctx.model.attention_backends)}")


@rule("SP213", Severity.error, "kernel backend the pinned vLLM does not have")
def backend_unknown(ctx: Context) -> Iterator[Hit]:
    if ctx.vllm is None:
        return
    for field in ("attention", "moe", "linear", "all2all"):
        value = getattr(ctx.profile.spec.kernels, field)
        choices = ctx.vllm.choices[f"{field}_backends"]
        if value is not None and value not in choices:
            yield Hit(_K + (field,), f"vLLM {ctx.vllm.version} has no {field} backend {value!r}",
                      choices_hint(value, choices, f"catalog/engines/vllm-{ctx.vllm.version}.json"))


@rule("SP214", Severity.warning, "fallback kernels on a GPU with native support")
def fallback_on_native(ctx: Context) -> Iterator[Hit]:
    if not (ctx.gpu.native_fp8 and ctx.gpu.native_fp4):
        return
    for field in ("moe", "linear"):
        value = getattr(ctx.profile.spec.kernels, field)
        if value in ctx.catalog.engine.fallback_backends:
            yield Hit(_K + (field,), f"{value} is a weight-only fallback; {ctx.gpu.name} runs FP8/FP4 natively",
                      "use a native backend (deep_gemm, cutlass, flashinfer_*)")
