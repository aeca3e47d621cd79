"""FlashInfer autotune: off, tune at start, or replay a pinned cache (docs/facts.md#autotune-cache)."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.profile.model import AutotuneMode, CudaGraphMode
from stackpin.validate import Context, Hit, Severity, rule

_A = ("spec", "autotune")


@rule("SP201", Severity.error, "replay without a cache")
def replay_without_cache(ctx: Context) -> Iterator[Hit]:
    if ctx.profile.spec.autotune.mode == AutotuneMode.replay and not ctx.profile.spec.autotune.cache:
        yield Hit(_A + ("mode",), "autotune.mode is replay but no cache is pinned",
                  "set autotune.cache to the OCI reference made by `stackpin autotune pack --push`")


@rule("SP202", Severity.warning, "cache pinned but not replayed")
def cache_unused(ctx: Context) -> Iterator[Hit]:
    autotune = ctx.profile.spec.autotune
    if autotune.cache and autotune.mode != AutotuneMode.replay:
        yield Hit(_A + ("cache",), f"a cache is pinned but autotune.mode is {autotune.mode}; it is not used",
                  "set mode: replay")


@rule("SP203", Severity.warning, "autotune at every start")
def tune_at_start(ctx: Context) -> Iterator[Hit]:
    if ctx.profile.spec.autotune.mode == AutotuneMode.tune:
        yield Hit(_A + ("mode",), "tuning at start costs ~43 s per shape profile on every restart and two fresh "
                  "tunes can differ by ~9% in serving speed (flashinfer#3920)",
                  "capture a cache once, pack it and replay it (mode: replay)")


@rule("SP204", Severity.warning, "autotune with CUDA graphs off")
def autotune_without_graphs(ctx: Context) -> Iterator[Hit]:
    if ctx.profile.spec.autotune.mode != AutotuneMode.off and ctx.profile.spec.cuda_graphs.mode == CudaGraphMode.NONE:
        yield Hit(_A + ("mode",), "vLLM tunes kernels right before CUDA graph capture; with graphs off the tuned "
                  "shapes do not match what runs", "enable CUDA graphs or turn autotune off")
