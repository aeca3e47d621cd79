"""The memory and start-up estimates where a profile leaves the CUDA graph sizes to vLLM: vLLM's default
largest capture size is min(max_num_seqs x (1+k) x 2, 512, or 1024 on SM100-family GPUs), within
max-num-batched-tokens (docs/facts.md#cuda-graphs), per pool."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from stackpin.catalog import load_catalog
from stackpin.profile.sizing import pool_memory
from stackpin.profile.topology import topology_of
from stackpin.render.build import startup_budget_s
from tests.helpers import apply, base_doc, load_doc

W = "spec.placement.pools.worker"
UNPINNED = {"spec.cudaGraphs.captureSizes": None, "spec.cudaGraphs.maxCaptureSize": None}


def vllm_default_sizes(max_size: int) -> list[int]:
    """vLLM's default capture list up to `max_size` (vllm/config/vllm.py `_set_cudagraph_sizes`)."""
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    sizes += list(range(8, min(max_size + 1, 256), 8))
    sizes += list(range(256, max_size + 1, 16))
    return sizes


def reserve_of(tmp_path: Path, changes: dict[str, Any]) -> float:
    profile = load_doc(tmp_path, apply(base_doc(), {**UNPINNED, **changes})).profile
    catalog = load_catalog()
    found = catalog.model_for(profile.spec.model.id)
    assert found is not None
    [pool] = topology_of(profile, catalog).pools
    return pool_memory(profile, pool, found[1], catalog).reserve_gib


def expected_reserve(max_size: int) -> float:
    reserve = load_catalog().engine.memory_reserve
    return reserve.runtime_gib + len(vllm_default_sizes(max_size)) * reserve.cudagraph_mib_per_size / 1024


@pytest.mark.parametrize(("label", "changes", "max_size"), [
    # GB300 is sm_103, in the SM100 family: the ceiling is 1024, and 1024 sequences x 2 reach it.
    ("gb300", {"spec.speculative.method": None, f"{W}.maxNumSeqs": 1024}, 1024),
    # Vera Rubin (sm_107) is in the family too.
    ("rubin", {"spec.target.platform": "vera-rubin-nvl72", "spec.speculative.method": None,
               f"{W}.maxNumSeqs": 1024}, 1024),
    # H200 is sm_90: 512.
    ("h200", {"spec.target.platform": "h200", "spec.speculative.method": None, f"{W}.maxNumSeqs": 1024}, 512),
    # The whole formula: 40 sequences x (1+5) x 2 = 480 is below the SM100 ceiling.
    ("seqs-times-k", {f"{W}.maxNumSeqs": 40}, 40 * 6 * 2),
    # ... and no larger than max-num-batched-tokens.
    ("batched-tokens", {f"{W}.maxNumSeqs": 1024, f"{W}.maxNumBatchedTokens": 300}, 300),
    # Unpinned max-num-seqs on a GPU of >= 160 GiB: vLLM's memory-dependent default (1024).
    ("seqs-default", {f"{W}.maxNumSeqs": None, "spec.speculative.method": None}, 1024),
    # An explicit maxCaptureSize is the max.
    ("explicit-max", {"spec.cudaGraphs.maxCaptureSize": 96}, 96),
])
def test_reserve_counts_vllms_default_capture_sizes(tmp_path: Path, label: str, changes: dict[str, Any],
                                                    max_size: int) -> None:
    assert reserve_of(tmp_path, changes) == pytest.approx(expected_reserve(max_size)), label


def test_sm100_family_is_catalog_data() -> None:
    catalog = load_catalog()
    engine = catalog.engine
    family = {name for name, gpu in catalog.gpus.items() if gpu.sm_arch in engine.sm100_family}
    assert family == {"b200", "gb200", "gb300", "rubin"}
    assert engine.max_capture_ceiling(catalog.gpus["gb300"].sm_arch) == engine.default_max_capture_size.sm100_family
    assert engine.max_capture_ceiling(catalog.gpus["h200"].sm_arch) == engine.default_max_capture_size.default


def test_startup_budget_counts_the_pool_that_captures_most(tmp_path: Path) -> None:
    """Render's startup probe covers the slowest pool: on a disaggregated stack that is the pool with
    the largest default capture list (here prefill: 1024 sequences, decode 16)."""
    doc = apply(base_doc("gb300-disagg-wide-ep"), {
        **UNPINNED, "spec.speculative.method": None,
        "spec.placement.pools.prefill.maxNumSeqs": 1024, "spec.placement.pools.decode.maxNumSeqs": 16})
    profile = load_doc(tmp_path, doc).profile
    catalog = load_catalog()
    est = catalog.engine.startup_estimate
    found = catalog.model_for(profile.spec.model.id)
    assert found is not None
    seconds = est.base_s + found[1].checkpoint_gib / est.load_gib_per_s
    seconds += len(vllm_default_sizes(1024)) * est.capture_s_per_size  # replay: no tuning at start
    assert startup_budget_s(profile, catalog) == math.ceil(seconds * est.margin)
