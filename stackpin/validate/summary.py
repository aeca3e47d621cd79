"""A short, typed summary of a stack: target, GPUs used, placement and per-GPU memory."""

from __future__ import annotations

from typing import Any

from stackpin.catalog import Catalog, load_catalog
from stackpin.profile.model import StackProfile
from stackpin.profile.sizing import pool_memory
from stackpin.profile.topology import shape_label, topology_of
from stackpin.records import Record


class PoolSummary(Record, frozen=True):
    role: str
    replicas: int
    tensor_parallel: int
    data_parallel: int
    expert_parallel_size: int
    gpus: int
    nodes_per_replica: int
    weights_gib_per_gpu: float | None
    kv_gib_per_gpu: float | None
    kv_tokens_per_gpu: int | None
    headroom_gib_per_gpu: float | None
    pipeline_parallel: int = 1  # in the label only: to_data leaves it out, so -o json keeps its keys

    @property
    def shape(self) -> str:
        label = shape_label(self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.expert_parallel_size)
        return f"{self.replicas}x {label}"

    def to_data(self) -> dict[str, Any]:
        data = super().to_data()
        del data["pipeline_parallel"]
        return data


class StackSummary(Record, frozen=True):
    name: str
    platform: str
    gpu: str
    gpus_available: int
    gpus_used: int
    placement: str
    pools: tuple[PoolSummary, ...]

    def to_data(self) -> dict[str, Any]:
        return {**super().to_data(), "pools": [p.to_data() for p in self.pools]}


def summarize(profile: StackProfile, catalog: Catalog | None = None) -> StackSummary:
    catalog = catalog or load_catalog()
    platform = catalog.platforms[profile.spec.target.platform]
    found = catalog.model_for(profile.spec.model.id)
    topology = topology_of(profile, catalog)
    pools = []
    for pool in topology.pools:
        mem = pool_memory(profile, pool, found[1], catalog) if found else None
        pools.append(PoolSummary(
            role=pool.role, replicas=pool.replicas, tensor_parallel=pool.tensor_parallel,
            data_parallel=pool.data_parallel, expert_parallel_size=pool.expert_parallel_size, gpus=pool.gpus,
            # What the GPUs need: a profile that asks for another count fails SP124.
            nodes_per_replica=pool.nodes_needed,
            weights_gib_per_gpu=round(mem.weights_gib, 1) if mem else None,
            kv_gib_per_gpu=round(mem.kv_gib, 1) if mem else None,
            kv_tokens_per_gpu=mem.kv_tokens if mem else None,
            headroom_gib_per_gpu=round(mem.headroom_gib, 1) if mem else None,
            pipeline_parallel=pool.pipeline_parallel,
        ))
    return StackSummary(
        name=profile.name, platform=profile.spec.target.platform, gpu=catalog.gpus[platform.gpu].name,
        gpus_available=topology.gpus_available, gpus_used=topology.gpus, placement=profile.spec.placement.mode,
        pools=tuple(pools))
