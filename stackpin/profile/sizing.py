"""Per-GPU memory arithmetic for a pool: weights shard, KV cache, reserve, headroom. Pure."""

from __future__ import annotations

import msgspec

from stackpin.catalog import Catalog, ModelFacts
from stackpin.profile.model import CudaGraphMode, StackProfile
from stackpin.profile.topology import PoolTopology

GIB = 1024**3


class PoolMemory(msgspec.Struct, frozen=True):
    """What one GPU of a pool holds, in GiB (estimates built from catalog facts)."""

    hbm_gib: float
    usable_gib: float  # HBM x gpu-memory-utilization: vLLM's pool
    weights_gib: float
    reserve_gib: float
    kv_gib: float  # left for the KV cache
    one_sequence_gib: float  # KV of one max-model-len sequence
    kv_tokens: int  # KV cache capacity in tokens on this GPU

    @property
    def headroom_gib(self) -> float:
        """HBM outside vLLM's pool: all the CUDA context, NCCL/NIXL buffers and fragmentation get."""
        return self.hbm_gib - self.usable_gib

    @property
    def fits(self) -> bool:
        return self.kv_gib >= self.one_sequence_gib


def weights_per_gpu_gib(model: ModelFacts, pool: PoolTopology, offload_gib: float) -> float:
    """Routed experts shard over the expert-parallel group, everything else over TP x PP."""
    experts = model.checkpoint_gib * model.routed_expert_share
    dense = model.checkpoint_gib - experts
    return max(dense / pool.model_parallel + experts / pool.expert_shards - offload_gib, 0.0)


def max_capture_size(profile: StackProfile, pool: PoolTopology, catalog: Catalog) -> int:
    """The largest size a pool captures when the profile lists no sizes (docs/facts.md#cuda-graphs):
    maxCaptureSize if set, else vLLM's default min(max_num_seqs x (1+k) x 2, the GPU family's
    ceiling); either way no larger than max-num-batched-tokens. Unpinned max-num-seqs and
    max-num-batched-tokens take vLLM's memory-dependent defaults where the catalog has them; where
    it has none (GPUs below its threshold) that term is left out, so the estimate is an upper bound."""
    engine = catalog.engine
    gpu = catalog.gpu_of(profile.spec.target.platform)
    defaults = engine.memory_dependent_defaults
    size = profile.spec.cuda_graphs.max_capture_size
    if size is None:
        size = engine.max_capture_ceiling(gpu.sm_arch)
        seqs = pool.spec.max_num_seqs or defaults.max_num_seqs_for(gpu.hbm_gib)
        if seqs is not None:
            size = min(size, seqs * (1 + profile.speculative_for(pool.spec).k) * 2)
    batched = pool.spec.max_num_batched_tokens or defaults.max_num_batched_tokens_for(gpu.hbm_gib)
    return min(size, batched) if batched is not None else size


def capture_size_count(profile: StackProfile, pool: PoolTopology, catalog: Catalog) -> int:
    """How many CUDA graph sizes a pool captures: the listed ones, else vLLM's default list."""
    graphs = profile.spec.cuda_graphs
    if graphs.mode == CudaGraphMode.NONE:
        return 0
    if graphs.capture_sizes is not None:
        return len(set(graphs.capture_sizes))
    return len(catalog.engine.default_capture_sizes.up_to(max_capture_size(profile, pool, catalog)))


def pool_memory(profile: StackProfile, pool: PoolTopology, model: ModelFacts, catalog: Catalog) -> PoolMemory:
    gpu = catalog.gpu_of(profile.spec.target.platform)
    reserve_facts = catalog.engine.memory_reserve
    usable = gpu.hbm_gib * pool.spec.gpu_memory_utilization
    weights = weights_per_gpu_gib(model, pool, profile.spec.fallbacks.cpu_offload_gib)
    reserve = reserve_facts.runtime_gib + capture_size_count(profile, pool, catalog) * (
        reserve_facts.cudagraph_mib_per_size / 1024)
    kv = usable - weights - reserve
    # MLA keeps one latent KV head, replicated on every TP rank: each GPU holds whole tokens.
    one_sequence = profile.spec.model.max_model_len * model.kv_bytes_per_token / GIB
    kv_tokens = max(int(kv * GIB / model.kv_bytes_per_token), 0)
    return PoolMemory(gpu.hbm_gib, usable, weights, reserve, kv, one_sequence, kv_tokens)
