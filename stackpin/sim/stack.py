"""What the simulator reads from a lock: the stack's shape and the settings its timing depends on."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from stackpin.catalog import Gpu, ModelFacts, load_catalog
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock, read_lock
from stackpin.profile.model import StackProfile
from stackpin.profile.sizing import pool_memory
from stackpin.profile.topology import PoolTopology, Role, topology_of


@dataclass(frozen=True)
class SimPool:
    """One pool's replicas as the scheduler sees them."""

    role: Role
    replicas: int
    engines: int  # schedulers: replicas x data-parallel ranks (each DP rank schedules its own batch; a
    # replica's ranks step together: stackpin.sim.engine.Replica)
    gpus_per_engine: int  # TP x PP
    weights_gib_per_gpu: float
    model_parallel: int  # GPUs the dense weights split over (TP x PP)
    expert_shards: int  # GPUs the routed experts split over
    max_num_seqs: int  # per engine, as vLLM applies it
    max_batched_tokens: int
    kv_tokens: int  # KV cache capacity of one engine, in tokens (MLA: every TP rank holds whole tokens)
    spec_method: str | None
    spec_k: int
    rejection: str
    draft_sample: str
    adaptive: bool


@dataclass(frozen=True)
class SimStack:
    name: str
    digest: str
    model_id: str
    model: ModelFacts
    precision: str  # weights as served (fp8-fp4, ...)
    platform: str
    gpu_key: str
    gpu: Gpu
    colocated: bool
    pools: tuple[SimPool, ...]
    graph_mode: str
    capture_sizes: tuple[int, ...]  # sorted; empty when CUDA graphs are off
    full_decode_graphs: bool
    piecewise_graphs: bool
    attention: str
    moe: str
    autotune: str
    gpus: int  # every GPU the stack occupies
    engine: str  # the serving engine as people write it (ServingEngine.label): "vLLM", "SGLang"
    unmodelled: tuple[str, ...] = ()  # what the profile does that no step model here times: stated, never hidden
    kv_cache_dtype: str = "auto"  # --kv-cache-dtype as the profile sets it (sim/kvcache.py resolves it)

    def pool(self, role: Role) -> SimPool:
        for p in self.pools:
            if p.role == role:
                return p
        raise KeyError(role)

    @property
    def decode(self) -> SimPool:
        return self.pool(Role.worker if self.colocated else Role.decode)


def _pool(profile: StackProfile, topo: PoolTopology, model: ModelFacts, gpu: Gpu) -> SimPool:
    from stackpin.backends import engine_of

    catalog = load_catalog()
    defaults = catalog.engine.memory_dependent_defaults
    spec = profile.speculative_for(topo.spec)
    # The step models' tables key methods by stackpin's name, not the engine's spelling (SGLang's DSPARK).
    method = engine_of(profile).speculative_kind(spec.method) if spec.method else None
    memory = pool_memory(profile, topo, model, catalog)
    return SimPool(
        role=topo.role, replicas=topo.replicas, engines=topo.replicas * topo.data_parallel,
        gpus_per_engine=topo.model_parallel, weights_gib_per_gpu=memory.weights_gib,
        model_parallel=topo.model_parallel, expert_shards=topo.expert_shards,
        max_num_seqs=topo.spec.max_num_seqs or defaults.max_num_seqs_for(gpu.hbm_gib) or 256,
        max_batched_tokens=topo.spec.max_num_batched_tokens or defaults.max_num_batched_tokens_for(gpu.hbm_gib) or 8192,
        kv_tokens=memory.kv_tokens,
        spec_method=method, spec_k=spec.k, rejection=spec.rejection_sample_method or "standard",
        draft_sample=spec.draft_sample_method or "greedy", adaptive=bool(spec.adaptive_verification),
    )


def sim_stack(lock: StackLock) -> SimStack:
    """The simulator's view of a lock; a stack it cannot simulate is one line saying why."""
    return profile_stack(lock.stack_profile, lock.metadata.name, lock.stack_digest)


def profile_stack(profile: StackProfile, name: str, digest: str = "") -> SimStack:
    """The simulator's view of a profile (a what-if not locked yet: `stackpin plan`)."""
    from stackpin.backends import engine_of
    from stackpin.profile.sizing import max_capture_size

    catalog = load_catalog()
    spec = profile.spec
    found = catalog.model_for(spec.model.id)
    if found is None:
        raise StackpinError(f"{name}: model {spec.model.id} is not in the catalog; cannot simulate it")
    model = found[1]
    if model.experts is None:
        raise StackpinError(f"{name}: the catalog gives no expert routing for {spec.model.id}; cannot simulate it")
    gpu_key = catalog.platforms[spec.target.platform].gpu
    gpu = catalog.gpus[gpu_key]
    topo = topology_of(profile, catalog)
    if topo.missing:
        raise StackpinError(f"{name}: placement {topo.mode.value} has no {topo.missing[0]} pool")
    pools = tuple(_pool(profile, p, model, gpu) for p in topo.pools)
    graphs = spec.cuda_graphs
    mode = str(graphs.mode)
    if mode == "NONE":
        sizes: tuple[int, ...] = ()
    elif graphs.capture_sizes is not None:
        sizes = tuple(sorted(set(graphs.capture_sizes)))
    else:
        top = max_capture_size(profile, topo.by_role[topo.decode_role], catalog)
        sizes = tuple(catalog.engine.default_capture_sizes.up_to(top))
    return SimStack(
        name=name, digest=digest, model_id=spec.model.id, model=model,
        precision=str(spec.model.weights), platform=spec.target.platform, gpu_key=gpu_key, gpu=gpu,
        colocated=topo.mode.value == "colocated", pools=pools, graph_mode=mode, capture_sizes=sizes,
        full_decode_graphs=mode in catalog.engine.full_decode_modes,
        piecewise_graphs=mode in catalog.engine.piecewise_modes,
        attention=spec.kernels.attention or "auto", moe=spec.kernels.moe or "auto",
        autotune=str(spec.autotune.mode.value), gpus=topo.gpus, engine=engine_of(profile).label,
        unmodelled=_unmodelled(profile, gpu), kv_cache_dtype=spec.kv_cache.dtype,
    )


def _unmodelled(profile: StackProfile, gpu: Gpu) -> tuple[str, ...]:
    """The profile's fallbacks a step model does not time (the A100 stack's): said in every answer."""
    fallbacks = profile.spec.fallbacks
    said = []
    if fallbacks.precision_emulation:
        said.append(f"precision emulation ({', '.join(fallbacks.precision_emulation)} on {gpu.name}) is not modelled: "
                    "weights are timed as bytes read at the GPU's bandwidth, compute at its peak, not as emulated")
    if fallbacks.cpu_offload_gib:
        said.append(f"CPU offload of {fallbacks.cpu_offload_gib:g} GiB of weights is not modelled: every weight is "
                    "timed as read from GPU memory, so the answer is faster than the stack")
    return tuple(said)


def share_of(stack: SimStack, share: int) -> SimStack:
    """1/`share` of the stack: every pool keeps that part of its replicas (so a disaggregated stack keeps
    its prefill:decode ratio). Replicas are independent behind the router, so per-GPU and per-agent
    figures hold for the whole stack while a bench drives `share` times fewer agents."""
    if share == 1:
        return stack
    uneven = [f"{p.role} has {p.replicas}" for p in stack.pools if share < 1 or p.replicas % share]
    if uneven:
        raise StackpinError(f"--share {share}: must divide every pool's replicas ({', '.join(uneven)}) in "
                            f"{stack.name}")
    pools = tuple(replace(p, replicas=p.replicas // share, engines=p.engines // share) for p in stack.pools)
    return replace(stack, pools=pools, gpus=stack.gpus // share)


def load_stack(path: Path) -> SimStack:
    return sim_stack(read_lock(path))
