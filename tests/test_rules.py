"""Every validation rule: one mutation of a valid shipped profile that triggers it, one close variant
that does not. Each trigger asserts the code, severity, field path and `file:line:col` location."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from stackpin.profile.tuning import parse_ranks_summary
from stackpin.validate import Finding, all_rules, run_rules
from stackpin.validate.check import check_profiles
from stackpin.validate.upgradecheck import upgrade_findings
from tests.helpers import NULL, SHIPPED, apply, base_doc, dump, line_of, load_doc

W = "spec.placement.pools.worker"
D = "spec.placement.pools.decode"
DIGEST = "@sha256:" + "a" * 64
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime"
PINS_1_5 = {"spec.versions.dynamo": "1.5.1", "spec.versions.vllm": "0.28.0", "spec.versions.flashinfer": "0.6.16.post3",
            "spec.versions.nixl": "1.3.2", "spec.versions.runtimeImage": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1"}
OLD_PINS = {"spec.versions.dynamo": "1.3.1", "spec.versions.vllm": "0.23.0", "spec.versions.flashinfer": "0.6.12",
            "spec.versions.nixl": "1.1.0"}


SITE_OVERLAY = str(Path(__file__).parent / "data" / "site" / "overlay")
VLLM_033 = {"spec.versions.vllm": "0.33.0", "spec.versions.flashinfer": "0.7.2.post1"}


class Case(NamedTuple):
    code: str
    severity: str
    path: str  # where the finding points (dotted, as Finding.path spells it)
    trigger: dict[str, Any]
    ok: dict[str, Any]  # a close variant that must not trigger the rule
    base: str = "gb300-tuned"
    label: str = ""
    cache: str | None = None  # the pinned cache's ranks annotation, as a lock records it (rules that read it)
    upgrade: str | None = None  # `validate --upgrade-to vllm==X`: the findings of the upgrade, for both variants


# gb300-tuned moved to SGLang 0.5.21 (Dynamo 1.6.1's sglang extra), dropping what SGLang cannot be given.
SGLANG = {"spec.engine": "sglang", "spec.versions.vllm": None, "spec.versions.sglang": "0.5.21",
          "spec.versions.nixl": "1.5.0", "spec.versions.flashinfer": "0.6.18", "spec.kernels": {},
          "spec.autotune": {"mode": "off"}, "spec.cudaGraphs.captureSizes": None,
          "spec.speculative": {"method": "DSPARK", "numSpeculativeTokens": 5}}

CASES = [
    # CUDA graphs
    Case("SP101", "warning", "spec.cudaGraphs.captureSizes",
         {"spec.cudaGraphs.captureSizes": [12, 6, 24, 48, 96, 192, 384, 384]},
         {"spec.cudaGraphs.captureSizes": [6, 12, 24, 48, 96, 192, 384]}),
    Case("SP102", "warning", "spec.cudaGraphs.captureSizes", {f"{W}.maxNumBatchedTokens": 383},
         {f"{W}.maxNumBatchedTokens": 384}),
    Case("SP103", "error", "spec.cudaGraphs.maxCaptureSize", {"spec.cudaGraphs.maxCaptureSize": 512},
         {"spec.cudaGraphs.maxCaptureSize": None}),
    Case("SP104", "warning", "spec.cudaGraphs.captureSizes", {"spec.speculative.numSpeculativeTokens": 3},
         {"spec.speculative.numSpeculativeTokens": 2}),
    Case("SP105", "error", "spec.cudaGraphs.captureSizes",
         {"spec.cudaGraphs.captureSizes": [1, 2], "spec.cudaGraphs.maxCaptureSize": 2},
         {"spec.cudaGraphs.captureSizes": [1, 6], "spec.cudaGraphs.maxCaptureSize": 6}),
    # An empty list with graphs on: vLLM asserts at least one size at startup (not "no graphs").
    Case("SP105", "error", "spec.cudaGraphs.captureSizes", {"spec.cudaGraphs.captureSizes": []},
         {"spec.cudaGraphs.captureSizes": [384]}, label="empty"),
    Case("SP106", "warning", "spec.cudaGraphs.mode", {"spec.cudaGraphs.mode": "NONE"},
         {"spec.cudaGraphs.mode": "PIECEWISE"}),
    Case("SP106", "warning", "spec.cudaGraphs.mode",
         {"spec.cudaGraphs.mode": "NONE", "spec.cudaGraphs.captureSizes": [], "spec.cudaGraphs.maxCaptureSize": None},
         {"spec.cudaGraphs.mode": "NONE", "spec.cudaGraphs.captureSizes": None,
          "spec.cudaGraphs.maxCaptureSize": None}, label="empty-list"),
    Case("SP107", "warning", "spec.cudaGraphs",
         {"spec.cudaGraphs.captureSizes": None, "spec.cudaGraphs.maxCaptureSize": None},
         {"spec.cudaGraphs.captureSizes": None, "spec.cudaGraphs.maxCaptureSize": None,
          "spec.cudaGraphs.mode": "NONE", "spec.autotune": {"mode": "off"}}),
    Case("SP108", "warning", "spec.kernels.env", {"spec.kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH": None},
         {"spec.kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}),
    # Decode graphs only up to maxNumSeqs x (1+k) = 64 x 6 = 384 tokens in gb300-tuned's worker pool.
    Case("SP100", "warning", "spec.cudaGraphs.captureSizes", {f"{W}.maxNumSeqs": 32},
         {f"{W}.maxNumSeqs": 32, "spec.cudaGraphs.captureSizes": [6, 12, 24, 48, 96, 192],
          "spec.cudaGraphs.maxCaptureSize": 192}),
    # vLLM 0.31.0 never torch.compiles DeepSeek V4.1: without breakable graphs, piecewise modes fall back.
    Case("SP110", "error", "spec.cudaGraphs.mode", {"spec.kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH": "0"},
         {"spec.kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "spec.cudaGraphs.mode": "FULL_DECODE_ONLY"}),
    Case("SP110", "error", "spec.cudaGraphs.mode",
         {"spec.kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "spec.cudaGraphs.mode": "PIECEWISE"},
         {"spec.kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH": None, "spec.cudaGraphs.mode": "PIECEWISE"},
         label="piecewise-to-none"),
    # speculative decoding
    Case("SP111", "error", "spec.speculative.method", {"spec.speculative.method": "dspark2"},
         {"spec.speculative.method": "ngram"}),
    Case("SP112", "error", "spec.speculative.method", {"spec.speculative.method": "mtp"},
         {"spec.speculative.method": "suffix"}),
    Case("SP112", "error", "spec.placement.pools.worker.speculative.method",
         {f"{W}.speculative": {"method": "deepseek_mtp", "numSpeculativeTokens": 5}},
         {f"{W}.speculative": {"method": "dspark", "numSpeculativeTokens": 5}}, label="pool-override-legacy"),
    Case("SP113", "warning", "spec.speculative.method", {"spec.speculative.method": "deepseek_mtp"},
         {"spec.speculative.method": "mtp"}),
    Case("SP114", "error", "spec.speculative", {"spec.speculative.numSpeculativeTokens": None},
         {"spec.speculative.numSpeculativeTokens": 1}),
    Case("SP115", "error", "spec.speculative.method", {"spec.speculative.method": "draft_model"},
         {"spec.speculative.method": "draft_model", "spec.speculative.draftModel": "acme/tiny-draft"}),
    Case("SP116", "error", "spec.speculative.draftTensorParallelSize",
         {"spec.speculative.draftTensorParallelSize": 2}, {"spec.speculative.draftTensorParallelSize": 4}),
    Case("SP117", "warning", "spec.speculative", {"spec.speculative.method": None}, {"spec.speculative": {}}),
    Case("SP118", "error", "spec.speculative.draftModel", {"spec.speculative.draftModel": "acme/draft-1"},
         {"spec.speculative.draftModel": "acme/draft-1", "spec.speculative.draftRevision": "0123456789" * 4}),
    # vLLM 0.31.0 refuses adaptive verification without full CUDA graphs (config/vllm.py:3151-3168) ...
    Case("SP119", "error", "spec.speculative.adaptiveVerification", {"spec.cudaGraphs.mode": "PIECEWISE"},
         {"spec.cudaGraphs.mode": "PIECEWISE", "spec.speculative.adaptiveVerification": False}),
    Case("SP119", "error", "spec.speculative.adaptiveVerification",
         {"spec.cudaGraphs.mode": "NONE", "spec.cudaGraphs.captureSizes": None, "spec.cudaGraphs.maxCaptureSize": None},
         {"spec.cudaGraphs.mode": "FULL_DECODE_ONLY"}, label="graphs-off"),
    # --enforce-eager passed through turns the pool's graphs off whatever cudaGraphs says (config/vllm.py:1694-1696)
    Case("SP119", "error", "spec.speculative.adaptiveVerification",
         {"spec.placement.pools.worker.engineArgs": {"--enforce-eager": True}},
         {"spec.placement.pools.worker.engineArgs": {"--no-enforce-eager": True}}, label="enforce-eager"),
    # ... and its model runner rewrites FULL (adaptive_verification.py:36-43).
    Case("SP120", "warning", "spec.cudaGraphs.mode", {"spec.cudaGraphs.mode": "FULL"},
         {"spec.cudaGraphs.mode": "FULL", "spec.speculative.adaptiveVerification": False}),
    # parallelism
    Case("SP121", "warning", f"{W}.tensorParallel", {f"{W}.tensorParallel": 8, f"{W}.replicas": 9},
         {f"{W}.tensorParallel": 4, f"{W}.dataParallel": 2, f"{W}.replicas": 9}, label="nvl72-warning"),
    Case("SP121", "error", f"{W}.tensorParallel", {f"{W}.tensorParallel": 16}, {f"{W}.tensorParallel": 8},
         base="a100-8x-selfhost", label="a100-error"),
    Case("SP121", "error", f"{W}.tensorParallel",
         {"spec.target.platform": "b200", f"{W}.replicas": 1, f"{W}.tensorParallel": 16},
         {"spec.target.platform": "b200", f"{W}.replicas": 1, f"{W}.tensorParallel": 8}, label="b200-error"),
    Case("SP121", "error", f"{W}.tensorParallel",
         {"spec.target.platform": "h200", f"{W}.replicas": 1, f"{W}.tensorParallel": 16},
         {"spec.target.platform": "h200", f"{W}.replicas": 1, f"{W}.tensorParallel": 8}, label="h200-error"),
    Case("SP122", "error", W, {f"{W}.replicas": 1, f"{W}.dataParallel": 19},
         {f"{W}.replicas": 1, f"{W}.dataParallel": 18}),
    # An 8-GPU HGX B200 node is its own NVLink domain: a replica past 8 GPUs has no NVLink to span (issue 19).
    Case("SP122", "error", W, {"spec.target.platform": "b200", f"{W}.replicas": 1, f"{W}.dataParallel": 4},
         {"spec.target.platform": "b200", f"{W}.replicas": 1, f"{W}.dataParallel": 2}, label="b200-domain"),
    # ... while a GB200 NVL72 rack spans trays over NVLink, as GB300's does.
    Case("SP121", "warning", f"{W}.tensorParallel",
         {"spec.target.platform": "gb200-nvl72", f"{W}.tensorParallel": 8, f"{W}.replicas": 9},
         {"spec.target.platform": "gb200-nvl72", f"{W}.tensorParallel": 4, f"{W}.replicas": 18},
         label="gb200-warning"),
    Case("SP123", "error", "spec.placement.pools",
         {"spec.target.platform": "b200", f"{W}.replicas": 3},
         {"spec.target.platform": "b200", f"{W}.replicas": 3, "spec.target.count": 2}, label="b200-nodes"),
    Case("SP123", "error", "spec.placement.pools", {f"{W}.replicas": 19},
         {f"{W}.replicas": 19, "spec.target.count": 2}),
    Case("SP124", "error", f"{W}.nodesPerReplica", {f"{W}.nodesPerReplica": 2}, {f"{W}.nodesPerReplica": 1}),
    Case("SP125", "error", W, {f"{W}.tensorParallel": 2, f"{W}.dataParallel": 3, f"{W}.replicas": 12},
         {f"{W}.tensorParallel": 2, f"{W}.dataParallel": 4, f"{W}.replicas": 9}),
    Case("SP126", "info", "spec.placement.pools", {f"{W}.replicas": 17}, {f"{W}.replicas": 18}),
    Case("SP127", "warning", "spec.kernels.all2all", {f"{W}.dataParallel": 2, f"{W}.replicas": 9},
         {f"{W}.dataParallel": 2, f"{W}.replicas": 9, "spec.kernels.all2all": "flashinfer_nvlink_one_sided"}),
    # memory
    Case("SP131", "error", W, {f"{W}.tensorParallel": 1, f"{W}.replicas": 72},
         {f"{W}.tensorParallel": 2, f"{W}.replicas": 36}),
    # V4.1's KV is 890 B/token (docs/facts.md#models): one 1M-token sequence needs 0.87 GiB.
    Case("SP132", "error", W, {f"{W}.tensorParallel": 2, f"{W}.replicas": 36, f"{W}.gpuMemoryUtilization": 0.875,
                               "spec.model.maxModelLen": 1048576},
         {f"{W}.tensorParallel": 2, f"{W}.replicas": 36, f"{W}.gpuMemoryUtilization": 0.88,
          "spec.model.maxModelLen": 1048576}),
    Case("SP133", "warning", f"{W}.gpuMemoryUtilization", {f"{W}.gpuMemoryUtilization": 0.97},
         {f"{W}.gpuMemoryUtilization": 0.94}),
    Case("SP134", "error", "spec.model.maxModelLen", {"spec.model.maxModelLen": 1048577},
         {"spec.model.maxModelLen": 1048576}),
    Case("SP135", "warning", "spec.model.id", {"spec.model.id": "acme/Unknown-1"},
         {"spec.model.id": "deepseek-v4.1-flash"}),
    # precision
    Case("SP141", "error", "spec.model.weights", {"spec.fallbacks.precisionEmulation": ["fp4"]},
         {"spec.fallbacks.precisionEmulation": ["fp4"], "spec.model.weights": "fp4"},
         base="a100-8x-selfhost", label="a100-undeclared-error"),
    Case("SP141", "warning", "spec.fallbacks.precisionEmulation", {"spec.fallbacks.precisionEmulation": ["fp8", "fp4"]},
         {"spec.fallbacks.precisionEmulation": ["fp8", "fp4"], "spec.model.weights": "bf16"},
         base="a100-8x-selfhost", label="a100-declared-warning"),
    Case("SP141", "error", "spec.model.weights",
         {"spec.model.weights": "bf16", "spec.kvCache.dtype": "fp8", "spec.fallbacks.precisionEmulation": []},
         {"spec.model.weights": "bf16", "spec.kvCache.dtype": "auto", "spec.fallbacks.precisionEmulation": []},
         base="a100-8x-selfhost", label="a100-fp8-kv-cache"),
    Case("SP142", "error", "spec.model.weights", {"spec.fallbacks.precisionEmulation": ["fp8"]},
         {"spec.fallbacks.precisionEmulation": ["fp8"], "spec.model.weights": "fp8"},
         base="a100-8x-selfhost", label="a100-undeclared-error"),
    Case("SP142", "warning", "spec.fallbacks.precisionEmulation", {"spec.fallbacks.precisionEmulation": ["fp8", "fp4"]},
         {"spec.fallbacks.precisionEmulation": ["fp8", "fp4"], "spec.model.weights": "fp8"},
         base="a100-8x-selfhost", label="a100-declared-warning"),
    Case("SP142", "error", "spec.model.weights", {"spec.target.platform": "h200"},
         {"spec.target.platform": "b200"}, label="h200-undeclared-error"),
    Case("SP142", "warning", "spec.fallbacks.precisionEmulation",
         {"spec.target.platform": "h200", "spec.fallbacks.precisionEmulation": ["fp4"]},
         {"spec.target.platform": "h200", "spec.fallbacks.precisionEmulation": ["fp4"], "spec.model.weights": "fp8",
          "spec.kvCache.dtype": "fp8"}, label="h200-declared-warning"),
    Case("SP143", "warning", "spec.fallbacks.precisionEmulation", {"spec.fallbacks.precisionEmulation": ["fp8"]},
         {"spec.fallbacks.precisionEmulation": []}),
    Case("SP144", "error", "spec.kernels.moe", {"spec.kernels.moe": "flashinfer_cutlass"},
         {"spec.kernels.moe": "triton"}, base="a100-8x-selfhost"),
    Case("SP145", "warning", "spec.fallbacks.cpuOffloadGib", {"spec.fallbacks.cpuOffloadGib": 8},
         {"spec.fallbacks.cpuOffloadGib": 0}),
    Case("SP146", "error", "spec.kvCache.dtype", {"spec.kvCache.dtype": "fp8_e4m3"}, {"spec.kvCache.dtype": "fp8"}),
    # placement
    Case("SP146", "error", "spec.kvCache.dtype", {**PINS_1_5, "spec.kvCache.dtype": "nvfp4_ds_mla"},
         {**PINS_1_5, "spec.kvCache.dtype": "fp8_ds_mla"}, label="not-in-pinned-vllm"),
    Case("SP151", "error", "spec.placement", {"spec.placement.kvConnector": None}, {},
         base="gb300-disagg-wide-ep"),
    Case("SP152", "error", "spec.placement.pools", {f"{D}": None}, {}, base="gb300-disagg-wide-ep"),
    Case("SP153", "warning", "spec.placement.pools.prefill", {"spec.placement.pools.prefill": {"replicas": 1}},
         {"spec.placement.pools.prefill": NULL}),
    Case("SP154", "error", f"{D}.speculative", {f"{D}.speculative": {"method": "dspark", "numSpeculativeTokens": 3}},
         {f"{D}.speculative": {"method": "dspark", "numSpeculativeTokens": 5, "draftSampleMethod": "probabilistic",
                               "rejectionSampleMethod": "block", "adaptiveVerification": True}},
         base="gb300-disagg-wide-ep"),
    Case("SP155", "error", "spec.placement.kvConnector", {"spec.placement.kvConnector": "LMCacheConnector"},
         {"spec.placement.kvConnector": "NixlConnector"}, base="gb300-disagg-wide-ep"),
    Case("SP156", "warning", "spec.placement.kvConnector", {"spec.placement.kvConnector": "NixlConnector"},
         {"spec.placement.kvConnector": NULL}),
    Case("SP158", "warning", "metadata.deployment", {"metadata.deployment": "a" * 38},
         {"metadata.deployment": "a" * 37}),
    Case("SP157", "warning", "spec.service.agents", {"spec.service.agents": 1153}, {"spec.service.agents": 1152}),
    # versions and env
    Case("SP161", "warning", "spec.versions.dynamo", {"spec.versions.dynamo": "1.7.0"},
         {"spec.versions.dynamo": "1.6.0"}),
    Case("SP162", "error", "spec.versions.vllm", {"spec.versions.vllm": "0.28.0"}, {"spec.versions.vllm": "0.31.0"}),
    Case("SP163", "error", "spec.versions.nixl", {"spec.versions.nixl": "1.3.2"}, {"spec.versions.nixl": "1.4.1"}),
    Case("SP164", "error", "spec.versions.flashinfer", {"spec.versions.flashinfer": "0.7.2.post1"},
         {"spec.versions.flashinfer": "0.7.0.post1"}),
    Case("SP165", "warning", "spec.versions.runtimeImage", {"spec.versions.runtimeImage": f"{IMAGE}:1.5.1"},
         {"spec.versions.runtimeImage": f"{IMAGE}:1.6.1-cuda13{DIGEST}"}),
    Case("SP166", "error", "spec.versions.vllm", PINS_1_5,
         {"spec.versions.vllm": "0.33.0"}),
    Case("SP167", "warning", "spec.versions.vllm", {"spec.versions.vllm": "0.26.0"}, {"spec.versions.vllm": "0.28.0"}),
    Case("SP171", "error", "spec.kernels.env.VLLM_ATTENTION_BACKEND",
         {"spec.kernels.env.VLLM_ATTENTION_BACKEND": "FLASHMLA"},
         {**OLD_PINS, "spec.versions.runtimeImage": f"{IMAGE}:1.3.1",
          "spec.kernels.env.VLLM_USE_FLASHINFER_MOE_FP4": "1"}),
    Case("SP171", "error", "spec.kernels.env.VLLM_NOT_A_SETTING", {"spec.kernels.env.VLLM_NOT_A_SETTING": "1"},
         {"spec.kernels.env.VLLM_DEEP_GEMM_WARMUP": "skip", "spec.kernels.env.NCCL_DEBUG": "INFO"},
         label="not-in-envs"),
    Case("SP172", "warning", "spec.kernels.env.VLLM_CACHE_ROOT", {"spec.kernels.env.VLLM_CACHE_ROOT": "/cache"},
         {"spec.kernels.env.VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS": "moe"}),
    # provenance
    Case("SP181", "warning", "spec.versions.runtimeImage", {},
         {"spec.versions.runtimeImage": f"{IMAGE}:1.6.1{DIGEST}"}),
    Case("SP182", "error", "spec.versions.runtimeImage", {"spec.versions.runtimeImage": f"{IMAGE}:latest"},
         {"spec.versions.runtimeImage": f"{IMAGE}:1.6.1"}),
    Case("SP182", "error", "spec.versions.runtimeImage", {"spec.versions.runtimeImage": "localhost:5000/vllm-runtime"},
         {"spec.versions.runtimeImage": "localhost:5000/vllm-runtime:1.6.1"}, label="registry-port"),
    Case("SP183", "warning", "spec.model.revision", {"spec.model.revision": "v4.1"}, {"spec.model.revision": "0" * 40}),
    Case("SP184", "warning", "spec", {"spec.modelStore": None}, {"spec.modelStore": {"pvc": "model-cache"}}),
    Case("SP185", "warning", "spec.attestation", {"spec.attestation": False}, {"spec.attestation": True}),
    Case("SP193", "error", f"{W}.maxNumBatchedTokens", {f"{W}.maxNumBatchedTokens": 63},
         {f"{W}.maxNumBatchedTokens": 64, "spec.cudaGraphs.captureSizes": [6, 12, 24, 48],
          "spec.cudaGraphs.maxCaptureSize": 48}),
    Case("SP191", "warning", W, {f"{W}.maxNumSeqs": None}, {f"{W}.maxNumSeqs": 1}),
    Case("SP192", "warning", W, {f"{W}.maxNumBatchedTokens": None}, {f"{W}.maxNumBatchedTokens": 16384}),
    # autotune
    Case("SP201", "error", "spec.autotune.mode", {"spec.autotune.cache": None}, {"spec.autotune.cache": "x:1"}),
    Case("SP202", "warning", "spec.autotune.cache", {"spec.autotune.mode": "off"}, {"spec.autotune.mode": "replay"}),
    Case("SP203", "warning", "spec.autotune.mode", {"spec.autotune.mode": "tune"}, {"spec.autotune.mode": "replay"}),
    Case("SP204", "warning", "spec.autotune.mode", {"spec.cudaGraphs.mode": "NONE"},
         {"spec.cudaGraphs.mode": "NONE", "spec.autotune": {"mode": "off"}}),
    # A colocated stack's cache (one config directory) pinned by a disaggregated stack, whose prefill
    # and decode pools run two engine configs; quiet when both pools run one.
    Case("SP205", "error", "spec.autotune.cache", {}, {"spec.placement.pools.prefill": {
        "replicas": 2, "tensorParallel": 2, "dataParallel": 8, "expertParallel": True, "nodesPerReplica": 4,
        "maxNumSeqs": 64, "maxNumBatchedTokens": 16384, "gpuMemoryUtilization": 0.9}},
         base="gb300-disagg-wide-ep", cache="ca3aa12086a7:shared (1 file)"),
    # Per-rank files (vLLM >= 0.32.0): decode's TP2 x DP8 needs dp0-7 rank0-15, the cache has TP4's.
    Case("SP205", "error", "spec.autotune.cache", VLLM_033, {**VLLM_033, D: {
        "replicas": 4, "tensorParallel": 4, "expertParallel": True, "maxNumSeqs": 64,
        "maxNumBatchedTokens": 16384}}, base="gb300-disagg-wide-ep", cache="a1a1a1a1a1a1:dp0 rank0-3 (4 files)",
         label="per-rank"),
    # engineArgs / dynamoArgs
    Case("SP221", "error", f"{W}.engineArgs.--max-logprob", {f"{W}.engineArgs": {"--max-logprob": 20}},
         {f"{W}.engineArgs": {"--max-logprobs": 20}}),
    # A Dynamo option passed as a vLLM one (the hint says where it belongs).
    Case("SP221", "error", f"{W}.dynamoArgs.--max-logprobs", {f"{W}.dynamoArgs": {"--max-logprobs": 20}},
         {f"{W}.dynamoArgs": {"--use-vllm-tokenizer": True}}, label="wrong-half"),
    Case("SP222", "error", f"{W}.engineArgs.--mamba-cache-mode", {f"{W}.engineArgs": {"--mamba-cache-mode": "fancy"}},
         {f"{W}.engineArgs": {"--mamba-cache-mode": "align"}}),
    Case("SP223", "error", f"{W}.engineArgs.--enable-log-requests",
         {f"{W}.engineArgs": {"--enable-log-requests": False}},
         {f"{W}.engineArgs": {"--no-enable-log-requests": True}}),
    Case("SP223", "error", f"{W}.engineArgs.--max-logprobs", {f"{W}.engineArgs": {"--max-logprobs": True}},
         {f"{W}.engineArgs": {"--max-logprobs": 0}}, label="value-flag"),
    Case("SP224", "error", f"{W}.engineArgs.--attention-config",
         {f"{W}.engineArgs": {"--attention-config": {"bogus": 1}}},
         {f"{W}.engineArgs": {"--attention-config": {"flash_attn_version": 3}}}),
    Case("SP224", "error", f"{W}.engineArgs.--reasoning-config",  # a field(init=False) the class sets itself
         {f"{W}.engineArgs": {"--reasoning-config": {"_enabled": True}}},
         {f"{W}.engineArgs": {"--reasoning-config": {}}}, label="init-false"),
    Case("SP224", "error", f"{W}.engineArgs.--structured-outputs-config",
         {f"{W}.engineArgs": {"--structured-outputs-config": "xgrammar"}},
         {f"{W}.engineArgs": {"--structured-outputs-config": '{"backend": "xgrammar"}'}}, label="not-an-object"),
    Case("SP225", "error", f"{W}.engineArgs.--tensor-parallel-size",
         {f"{W}.engineArgs": {"--tensor-parallel-size": 8}}, {f"{W}.engineArgs": {"--max-logprobs": 8}}),
    # A switch set the way its boolean field renders it repeats it (warning); the other way fights it.
    Case("SP225", "warning", f"{W}.engineArgs.--no-enable-prefix-caching",
         {"spec.kvCache.prefixCaching": False, f"{W}.engineArgs": {"--no-enable-prefix-caching": True}},
         {"spec.kvCache.prefixCaching": False, f"{W}.engineArgs": {"--enable-log-requests": True}}, label="agrees"),
    Case("SP225", "error", f"{W}.engineArgs.--no-enable-prefix-caching",
         {f"{W}.engineArgs": {"--no-enable-prefix-caching": True}},
         {f"{W}.engineArgs": {"--no-enable-log-requests": True}}, label="contradicts"),
    Case("SP225", "error", f"{W}.engineArgs.--kernel-config", {f"{W}.engineArgs": {"--kernel-config": {
        "moe_backend": "cutlass"}}}, {f"{W}.engineArgs": {"--kernel-config": {"enable_jit_warmup": False}}},
         label="json-key"),
    Case("SP225", "error", f"{W}.dynamoArgs.--disaggregation-mode",
         {f"{W}.dynamoArgs": {"--disaggregation-mode": "agg"}},
         {f"{W}.dynamoArgs": {"--use-vllm-tokenizer": True}}, label="dynamo"),
    # Routing is the frontend's: --router-mode (or DYN_ROUTER_MODE) on a worker replaces it wholesale.
    Case("SP231", "error", f"{D}.dynamoArgs.--router-mode", {f"{D}.dynamoArgs": {"--router-mode": "round-robin"}},
         {f"{D}.dynamoArgs": {"--use-vllm-tokenizer": True}}, base="gb300-disagg-wide-ep"),
    Case("SP231", "error", "spec.kernels.env.DYN_ROUTER_MODE", {"spec.kernels.env.DYN_ROUTER_MODE": "kv"},
         {"spec.kernels.env.DYN_LOG": "info"}, label="env"),
    Case("SP231", "error", f"{W}.dynamoArgs.--router-temperature", {f"{W}.dynamoArgs": {"--router-temperature": 0.5}},
         {}, label="other-router-flag"),
    Case("SP226", "warning", f"{W}.dynamoArgs.--router-queue-policy",
         {f"{W}.dynamoArgs": {"--router-queue-policy": "fcfs"}},
         {f"{W}.dynamoArgs": {"--use-vllm-tokenizer": True}}),
    # validate --upgrade-to: no Dynamo ships vLLM 0.33.0 (quiet when the profile is on it already) ...
    Case("SP241", "error", "spec.versions.dynamo", {}, VLLM_033, upgrade="0.33.0"),
    # ... and 0.31.0 ships in Dynamo 1.6.1, whose pins the hint lists (quiet from a profile already on it).
    Case("SP241", "warning", "spec.versions.dynamo", PINS_1_5, {}, upgrade="0.31.0", label="ships"),
    # vLLM 0.31.0 picks --dcp-comm-backend itself; 0.28.0 defaulted to ag_rs.
    Case("SP242", "warning", "spec.versions.vllm", PINS_1_5,
         {**PINS_1_5, f"{W}.engineArgs": {"--dcp-comm-backend": "ag_rs", "--cp-kv-cache-interleave-size": 1}},
         upgrade="0.31.0"),  # every default 0.31.0 changes, passed: nothing is left to the default
    Case("SP243", "error", "spec.autotune.cache", {}, {"spec.autotune": {"mode": "off"}}, upgrade="0.33.0"),
    # kernels
    Case("SP211", "error", "spec.kernels.attention", {"spec.kernels.attention": "FLASHINFER_MLA_SPARSE"},
         {"spec.kernels.attention": "FLASHINFER_MLA_SPARSE_DSV41"}),
    Case("SP212", "warning", "spec.kernels.attention", {"spec.kernels.attention": "TRITON_MLA"},
         {"spec.kernels.attention": "FLASHMLA_SPARSE_DSV41"}),
    Case("SP213", "error", "spec.kernels.moe", {"spec.kernels.moe": "fancy"}, {"spec.kernels.moe": "cutlass"}),
    Case("SP213", "error", "spec.kernels.linear", {"spec.kernels.linear": "marlin2"}, {"spec.kernels.linear": "auto"},
         label="linear"),
    Case("SP213", "error", "spec.kernels.all2all", {"spec.kernels.all2all": "nccl"}, {"spec.kernels.all2all": "naive"},
         label="all2all"),
    Case("SP213", "error", "spec.kernels.attention", {"spec.kernels.attention": "NOPE_ATTN"},
         {"spec.kernels.attention": "TRITON_MLA"}, label="attention"),
    Case("SP213", "error", "spec.kernels.moe", {"spec.versions.vllm": "0.33.0", "spec.kernels.moe": "fancy"},
         {"spec.versions.vllm": "0.26.0", "spec.kernels.moe": "fancy"}, label="no-flag-catalog"),
    Case("SP214", "warning", "spec.kernels.moe", {"spec.kernels.moe": "marlin"}, {"spec.kernels.moe": "cutlass"}),
    # what the pinned vLLM does once the model is built (catalog/engines/vllm-0.31.0.startup.yaml)
    Case("SP215", "error", "spec.kvCache.dtype", {"spec.kernels.attention": "FLASHINFER_MLA_SPARSE_DSV41"},
         {"spec.kernels.attention": "FLASHINFER_MLA_SPARSE_DSV41", "spec.kvCache.dtype": "fp8"}),
    Case("SP216", "error", "spec.kvCache.blockSize", {"spec.kvCache.blockSize": 64}, {"spec.kvCache.blockSize": 256}),
    Case("SP217", "error", "spec.target.platform", {"spec.target.platform": "a100"},
         {"spec.target.platform": "b200"}, base="a100-8x-selfhost", label="no-kernel-for-sm80"),
    Case("SP217", "error", "spec.kernels.attention",
         {"spec.target.platform": "h200", "spec.kernels.attention": "FLASHINFER_MLA_SPARSE_DSV41",
          "spec.kvCache.dtype": "auto"},
         {"spec.target.platform": "h200", "spec.kernels.attention": "FLASHMLA_SPARSE_DSV41",
          "spec.kvCache.dtype": "auto"}, label="backend-not-for-sm90"),
    Case("SP218", "warning", "spec.kvCache.dtype", {"spec.kvCache.dtype": "fp8"},
         {"spec.kvCache.dtype": "nvfp4_ds_mla"}),
    Case("SP219", "warning", "spec.versions.vllm", PINS_1_5, {}),
    # The mega kernel at TP 16: 64 heads leave 4 a rank, and the layer's constructor needs a multiple of 8.
    Case("SP220", "error", f"{W}.tensorParallel", {f"{W}.tensorParallel": 16}, {f"{W}.tensorParallel": 8}),
    # The model's parsers (profile/serving.py): a name the pinned Dynamo lacks stops every worker ...
    Case("SP227", "error", "spec.model.toolCallParser", {"spec.model.toolCallParser": "deepseek_v5"},
         {"spec.model.toolCallParser": "hermes"}),
    Case("SP227", "error", f"{W}.dynamoArgs.--dyn-reasoning-parser",
         {f"{W}.dynamoArgs": {"--dyn-reasoning-parser": "deepseek_v5"}},
         {f"{W}.dynamoArgs": {"--dyn-reasoning-parser": "deepseek_v4"}}, label="pool"),
    # ... Dynamo 1.5.1 has no deepseek_v41 parsers: render leaves them out (tool calls come back as text) ...
    Case("SP228", "warning", "spec.versions.dynamo", PINS_1_5, {}),
    # ... and a Dynamo whose parser lists stackpin lacks is unchecked.
    Case("SP229", "warning", "spec.versions.dynamo", OLD_PINS, {}),
    # Extra --compilation-config keys (Dynamo's recipes set custom_ops): only CompilationConfig's own.
    # Frontend pass-through flags: checked against the pinned Dynamo frontend, never one render writes.
    Case("SP232", "error", "spec.placement.frontendArgs.--router-reset-states",
         {"spec.placement.frontendArgs": {"--router-reset-states": True}},  # upstream's B200 recipe (Dynamo 1.3)
         {"spec.placement.frontendArgs": {"--trust-remote-code": True}}),
    Case("SP232", "error", "spec.placement.frontendArgs.--migration-limit",
         {"spec.placement.frontendArgs": {"--migration-limit": "5"}}, {"spec.placement.migrationLimit": 5},
         label="modelled"),
    Case("SP230", "error", "spec.cudaGraphs.compilation", {"spec.cudaGraphs.compilation": {"custom_opz": ["all"]}},
         {"spec.cudaGraphs.compilation": {"custom_ops": ["all"], "pass_config": {"fuse_allreduce_rms": True}}}),
    Case("SP230", "error", f"{W}.compilation", {f"{W}.compilation": {"custom_opz": ["all"]}},
         {f"{W}.compilation": {"custom_ops": ["all"]}}, label="pool"),
    Case("SP214", "warning", "spec.kernels.linear", {"spec.kernels.linear": "triton"}, {}, base="gb300-tuned",
         label="linear"),
    # Site facts (issue 35): a site overlay on the profile's own catalog path (tests/data/site/overlay).
    Case("SP261", "info", "spec.target.platform", {"spec.catalogPath": [SITE_OVERLAY]}, {},
         base="vera-rubin-tuned"),
    Case("SP262", "warning", "spec.target.platform", {"spec.catalogPath": [SITE_OVERLAY]},
         {"spec.catalogPath": [SITE_OVERLAY], "spec.target.platform": "gb200-nvl72"}),
    Case("SP263", "warning", "spec.target.platform", {"spec.catalogPath": [SITE_OVERLAY]}, {},
         base="vera-rubin-tuned"),
    # A pass-through pod patch is named per component (a shared-memory size is modelled, not a patch).
    Case("SP271", "info", "spec.placement.podOverrides.worker",
         {"spec.placement.podOverrides": {"worker": {"spec": {"containers": [
             {"name": "main", "resources": {"limits": {"rdma/ib": "1"}}}]}}}},
         {"spec.placement.sharedMemory": {"worker": "100Gi"}}),
    # Another engine's modelled values against its own parser (issue 38): vLLM's fp8_ds_mla is no SGLang dtype.
    Case("SP272", "error", "spec.kvCache.dtype", SGLANG, {**SGLANG, "spec.kvCache.dtype": "fp8_e4m3"}),
]


def _id(case: Case) -> str:
    return f"{case.code}-{case.label}" if case.label else case.code


def _findings(tmp_path: Path, case: Case, mutations: dict[str, Any]) -> tuple[list[Finding], Path, str]:
    doc = apply(base_doc(case.base), mutations)
    loaded = load_doc(tmp_path, doc)
    cache = parse_ranks_summary(case.cache) if case.cache is not None else None
    if case.upgrade is not None:
        return upgrade_findings(loaded, case.upgrade), loaded.path, dump(doc)
    return run_rules(loaded, autotune_cache=cache), loaded.path, dump(doc)


def test_every_rule_has_cases() -> None:
    # SP251 reads the other rules' findings (a stale spec.acknowledge entry): tests/test_acknowledge.py.
    registered = {r.code for r in all_rules()} - {"SP251"}
    tested = {c.code for c in CASES}
    assert registered - tested == set(), "rules without a trigger/ok case in tests/test_rules.py"
    assert tested - registered == set(), "cases for rules that are not registered"
    assert len(registered) >= 60


def test_default_severities_match_registry() -> None:
    """A row that expects the rule's own severity documents it; overrides are the labelled rows."""
    rules = {r.code: r for r in all_rules()}
    for case in CASES:
        if rules[case.code].warning_when and case.severity == "warning":
            continue  # lowered per hit, where the rule says (NVL72, declared emulation, ...)
        assert str(rules[case.code].severity) == case.severity, _id(case)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_rule_triggers(tmp_path: Path, case: Case) -> None:
    findings, file, text = _findings(tmp_path, case, case.trigger)
    hits = [f for f in findings if f.code == case.code]
    assert hits, f"{case.code} did not fire; got {[str(f) for f in findings]}"
    matching = [f for f in hits if f.path == case.path]
    assert matching, f"{case.code} fired at {[f.path for f in hits]}, expected {case.path}"
    finding = matching[0]
    assert finding.severity == case.severity
    assert finding.message
    line, col = line_of(text, case.path)
    assert finding.location == f"{file}:{line}:{col}"
    # The located line really holds the field the path ends in.
    key = case.path.rsplit(".", 1)[-1]
    assert text.splitlines()[line - 1].strip().startswith(f"{key}:")


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_rule_quiet_on_close_variant(tmp_path: Path, case: Case) -> None:
    findings, _, _ = _findings(tmp_path, case, case.ok)
    assert [str(f) for f in findings if f.code == case.code] == []


def test_findings_sorted_errors_first(tmp_path: Path) -> None:
    doc = apply(base_doc(), {"spec.versions.nixl": "1.3.2", "spec.service.agents": 5000, f"{W}.replicas": 17})
    findings = run_rules(load_doc(tmp_path, doc))
    order = {"error": 0, "warning": 1, "info": 2}
    assert [order[f.severity] for f in findings] == sorted(order[f.severity] for f in findings)
    assert {"SP163", "SP157", "SP126"} <= {f.code for f in findings}


def test_finding_in_base_file_points_at_base(tmp_path: Path) -> None:
    """A rule hit on a field the overlay inherits is located in the base file."""
    base = apply(base_doc(), {"spec.kernels.moe": "fancy"})
    (tmp_path / "base.yaml").write_text(dump(base), encoding="utf-8")
    overlay = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile", "extends": "base.yaml",
               "metadata": {"name": "child"}}
    (tmp_path / "child.yaml").write_text(dump(overlay), encoding="utf-8")
    result = check_profiles([tmp_path / "child.yaml"])
    (finding,) = [f for f in result.reports[0].findings if f.code == "SP213"]
    line, col = line_of(dump(base), "spec.kernels.moe")
    assert finding.location == f"{tmp_path / 'base.yaml'}:{line}:{col}"


def _graph_codes(tmp_path: Path, doc: dict[str, Any]) -> list[Finding]:
    return [f for f in run_rules(load_doc(tmp_path, doc)) if f.code in ("SP102", "SP103", "SP104", "SP105")]


@pytest.mark.parametrize("changes", [
    # 1+k=5: rounding 384 up gives 385, above maxNumBatchedTokens=384 (SP102) and maxCaptureSize=384.
    {"spec.speculative.numSpeculativeTokens": 4, f"{W}.maxNumBatchedTokens": 384},
    # maxCaptureSize alone bounds the rounded sizes.
    {"spec.speculative.numSpeculativeTokens": 4},
    # Without maxCaptureSize the largest listed size (within maxNumBatchedTokens) is the max.
    {"spec.speculative.numSpeculativeTokens": 4, "spec.cudaGraphs.maxCaptureSize": None},
    # Sizes above maxNumBatchedTokens are SP102's: the hint leaves them out rather than rounding them.
    {"spec.speculative.numSpeculativeTokens": 4, f"{W}.maxNumBatchedTokens": 200,
     "spec.cudaGraphs.maxCaptureSize": None},
], ids=["batched-384", "max-384", "no-max", "batched-200"])
def test_sp104_hint_proposes_only_sizes_the_other_rules_accept(tmp_path: Path, changes: dict[str, Any]) -> None:
    doc = apply(base_doc(), changes)
    pool = doc["spec"]["placement"]["pools"]["worker"]
    graphs = doc["spec"]["cudaGraphs"]
    ceiling = min(pool["maxNumBatchedTokens"], graphs.get("maxCaptureSize") or max(
        s for s in graphs["captureSizes"] if s <= pool["maxNumBatchedTokens"]))
    [hint] = [f.hint for f in _graph_codes(tmp_path, doc) if f.code == "SP104"]
    assert hint is not None
    proposed = [int(n) for group in re.findall(r"\[([0-9, ]*)\]", hint) for n in group.split(",") if n.strip()]
    assert proposed and all(s % 5 == 0 and s <= ceiling for s in proposed), hint
    # Applied as written, the hint leaves nothing for SP102-SP105 to say.
    sizes = re.search(r"captureSizes: \[([0-9, ]*)\]", hint)
    assert sizes is not None, hint
    graphs["captureSizes"] = [int(n) for n in sizes.group(1).split(",")]
    if (largest := re.search(r"maxCaptureSize: ([0-9]+)", hint)) is not None:
        graphs["maxCaptureSize"] = int(largest.group(1))
    assert [str(f) for f in _graph_codes(tmp_path, doc)] == []


def test_empty_capture_list_is_an_error_not_a_way_to_turn_graphs_off(tmp_path: Path) -> None:
    doc = apply(base_doc(), {"spec.cudaGraphs.captureSizes": [], "spec.cudaGraphs.maxCaptureSize": 384})
    findings = run_rules(load_doc(tmp_path, doc))
    [empty] = [f for f in findings if f.code == "SP105"]
    assert empty.severity == "error" and "at least one" in empty.message
    assert "cudaGraphs.mode: NONE" in (empty.hint or "")


@pytest.mark.parametrize("profile", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profiles_have_no_errors(profile: Path) -> None:
    result = check_profiles([profile])
    assert result.input_errors == ()
    assert [str(f) for f in result.reports[0].findings if f.severity == "error"] == []
