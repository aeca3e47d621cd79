"""Memory fit per GPU: weights shard + reserve + KV cache against HBM x utilization."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.backends import engine_of
from stackpin.profile.sizing import PoolMemory, pool_memory
from stackpin.profile.topology import PoolTopology
from stackpin.rules import Context, Hit, Severity, pools, rule
from stackpin.yamlio import FieldPath


def _memories(ctx: Context) -> Iterator[tuple[str, FieldPath, PoolTopology, PoolMemory]]:
    """Each pool with its per-GPU memory estimate; nothing when the catalog does not know the model."""
    if ctx.model is None:
        return
    for role, path, pool in pools(ctx):
        yield role, path, pool, pool_memory(ctx.profile, pool, ctx.model, ctx.catalog)


@rule("SP131", Severity.error, "weights do not fit on the GPU")
def weights_fit(ctx: Context) -> Iterator[Hit]:
    for role, path, pool, mem in _memories(ctx):
        if mem.weights_gib + mem.reserve_gib > mem.usable_gib:
            yield Hit(path, f"{role}: weights {mem.weights_gib:.1f} GiB + reserve {mem.reserve_gib:.1f} GiB per GPU "
                      f"exceed {mem.usable_gib:.1f} GiB ({ctx.gpu.hbm_gib:g} GiB x {pool.spec.gpu_memory_utilization})",
                      "raise tensorParallel or enable expertParallel over more GPUs")


@rule("SP132", Severity.error, "KV cache cannot hold one max-length sequence")
def kv_fit(ctx: Context) -> Iterator[Hit]:
    for role, path, _pool, mem in _memories(ctx):
        if mem.weights_gib + mem.reserve_gib <= mem.usable_gib < (
                mem.weights_gib + mem.reserve_gib + mem.one_sequence_gib):
            yield Hit(path, f"{role}: {max(mem.kv_gib, 0):.1f} GiB left for KV cache per GPU cannot hold one "
                      f"{ctx.profile.spec.model.max_model_len}-token sequence ({mem.one_sequence_gib:.1f} GiB); "
                      f"{engine_of(ctx.profile).label} refuses to start", "lower model.maxModelLen or free memory")


@rule("SP133", Severity.warning, "little memory headroom per GPU")
def headroom(ctx: Context) -> Iterator[Hit]:
    for role, path, pool, mem in _memories(ctx):
        if mem.headroom_gib < ctx.catalog.engine.headroom_warn_fraction * mem.hbm_gib:
            utilization = pool.spec.gpu_memory_utilization
            yield Hit(path + ("gpuMemoryUtilization",), f"{role}: gpuMemoryUtilization={utilization} "
                      f"leaves {mem.headroom_gib:.1f} GiB ({mem.headroom_gib / mem.hbm_gib:.0%}) of {mem.hbm_gib:g} "
                      f"GiB outside {engine_of(ctx.profile).label}'s pool for the CUDA context, NCCL buffers and "
                      "fragmentation",
                      "expect out-of-memory errors under load or on restart; lower gpuMemoryUtilization")


@rule("SP134", Severity.error, "max model length above the model's context")
def max_len(ctx: Context) -> Iterator[Hit]:
    if ctx.model is not None and ctx.profile.spec.model.max_model_len > ctx.model.max_context:
        yield Hit(("spec", "model", "maxModelLen"), f"maxModelLen={ctx.profile.spec.model.max_model_len} exceeds "
                  f"{ctx.model_key}'s context of {ctx.model.max_context} tokens")


@rule("SP135", Severity.warning, "model unknown to the catalog")
def unknown_model(ctx: Context) -> Iterator[Hit]:
    if ctx.model is None:
        yield Hit(("spec", "model", "id"), f"{ctx.profile.spec.model.id!r} is not in the catalog: memory, "
                  "precision and speculative rules cannot check it", "add it to stackpin/catalog/models.yaml")
