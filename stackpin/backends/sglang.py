"""SGLang under Dynamo (`python3 -m dynamo.sglang`): its flag table, catalogs, facts and environment names.

Every spelling below is SGLang 0.5.21's own (the release Dynamo 1.6.1's `sglang` extra pins), read in its
wheel: options are derived from ServerArgs' dataclass fields by `add_cli_args_from_dataclass`
(sglang/srt/arg_groups/arg_utils.py:290, `--` + the field name with dashes; a bool is a store_true switch,
arg_utils.py:393-395), with the aliases the fields declare.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from stackpin.backends.base import Capture, Flag, json_arg, kv_events_enabled, passed_flags
from stackpin.profile.engine_args import POOL
from stackpin.profile.model import POOL_NAMES, AutotuneMode, Placement, Pool, StackProfile

if TYPE_CHECKING:
    from stackpin.catalog.engine_data import Release
    from stackpin.catalog.flags import DynamoEntry, FlagCatalog
    from stackpin.catalog.startup import StartupFacts
    from stackpin.profile.topology import Role
    from stackpin.rules import Hit

# Options stackpin renders from modelled fields (worker_flags below), -> the field to use.
MODELLED: dict[str, str] = {
    "--model-path": "spec.model.id",
    "--revision": "spec.model.revision",
    "--tokenizer-mode": "spec.model.tokenizerMode",
    "--tp-size": f"{POOL}.tensorParallel",
    "--pp-size": f"{POOL}.pipelineParallel",
    "--dp-size": f"{POOL}.dataParallel",
    "--enable-dp-attention": f"{POOL}.expertParallel",
    "--ep-size": f"{POOL}.expertParallel",
    "--context-length": "spec.model.maxModelLen",
    "--max-running-requests": f"{POOL}.maxNumSeqs",
    "--chunked-prefill-size": f"{POOL}.maxNumBatchedTokens",
    "--mem-fraction-static": f"{POOL}.gpuMemoryUtilization",
    "--cpu-offload-gb": "spec.fallbacks.cpuOffloadGib",
    "--kv-cache-dtype": "spec.kvCache.dtype",
    "--page-size": "spec.kvCache.blockSize",
    "--disable-radix-cache": "spec.kvCache.prefixCaching",
    "--attention-backend": "spec.kernels.attention",
    "--moe-runner-backend": "spec.kernels.moe",
    "--moe-a2a-backend": "spec.kernels.all2all",
    "--cuda-graph-backend-decode": "spec.cudaGraphs.mode",
    "--cuda-graph-backend-prefill": "spec.cudaGraphs.mode",
    "--cuda-graph-max-bs-decode": "spec.cudaGraphs.maxCaptureSize",
    "--speculative-algorithm": "spec.speculative",
    "--speculative-num-steps": "spec.speculative.numSpeculativeTokens",
    "--speculative-eagle-topk": "spec.speculative",
    "--speculative-dspark-block-size": "spec.speculative.numSpeculativeTokens",
    "--enable-dp-lm-head": "spec.speculative",
    "--speculative-num-draft-tokens": "spec.speculative.numSpeculativeTokens",
    "--speculative-draft-model-path": "spec.speculative.draftModel",
    "--speculative-draft-model-revision": "spec.speculative.draftRevision",
    "--disable-flashinfer-autotune": "spec.autotune.mode",
    "--disaggregation-mode": "spec.placement.mode",
    "--disaggregation-transfer-backend": "spec.placement.kvConnector",
    "--kv-events-config": "spec.kvCache.events",
}
MODELLED_DYNAMO: dict[str, str] = {}
# store_true switches (arg_utils.py:393-395): SGLang has no --no-x form, so passing one through only agrees.
MODELLED_SWITCHES = frozenset({"--enable-dp-attention", "--disable-radix-cache", "--disable-flashinfer-autotune"})
MODELLED_KEYS: dict[str, dict[str, str]] = {}
# spec.placement.kvConnector -> --disaggregation-transfer-backend (DISAGG_TRANSFER_BACKEND_CHOICES,
# sglang/srt/arg_groups/choices.py:120-127; SGLang's default is mooncake, fields/disagg.py:59-65). Dynamo's
# disaggregated SGLang recipes move the KV cache over NIXL, as its vLLM ones do.
TRANSFER_BACKENDS = {"NixlConnector": "nixl", "MooncakeConnector": "mooncake"}
DEFAULT_TRANSFER_BACKEND = "nixl"
# KV-event publisher for the KV router, as --kv-events-config JSON (the same ZMQ publisher Dynamo's router reads).
KV_EVENTS = {"endpoint": "tcp://*:20080", "publisher": "zmq", "topic": "kv-events"}
# spec.cudaGraphs.mode -> (decode backend, prefill backend) of --cuda-graph-backend-* (Backend.ALL: full,
# breakable, tc_piecewise, disabled; fields/exec_.py:486-499). None: SGLang's own default is kept.
GRAPH_BACKENDS: dict[str, tuple[str | None, str | None]] = {
    "NONE": ("disabled", "disabled"),
    "FULL_DECODE_ONLY": ("full", "disabled"),
    "FULL_AND_PIECEWISE": (None, None),
}


def attention_dp_size(pool: Pool) -> int:
    """The DP-attention ranks one replica's options are shared among: dp_size with --enable-dp-attention (which
    render writes for a wide-EP pool, worker_flags), else 1 (SGLang's attn_dp_size, arg_groups/moe_hook.py:584)."""
    return pool.data_parallel if pool.expert_parallel and pool.data_parallel > 1 else 1


# stackpin's name for an SGLang --speculative-algorithm (SpeculativeAlgorithm, speculative/spec_info.py:32-47;
# from_string upper-cases, :55): the step models name methods as vLLM does. NEXTN (the checkpoint's own MTP
# layers, run as EAGLE: speculative/spec_registry.py:181-183) is vLLM's mtp; an algorithm not listed keeps its
# name, lower-cased.
SPECULATIVE_KINDS = {"STANDALONE": "draft_model", "NEXTN": "mtp"}


class Sglang:
    name: str = "sglang"
    label: str = "SGLang"
    distribution: str = "sglang"
    worker_command: tuple[str, ...] = ("python3", "-m", "dynamo.sglang")
    backend_framework: str = "sglang"
    default_kv_connector: str = "NixlConnector"  # spec.placement.kvConnector when unset
    dynamo_worker: DynamoEntry = "worker_sglang"
    modelled: Mapping[str, str] = MODELLED
    modelled_dynamo: Mapping[str, str] = MODELLED_DYNAMO
    modelled_switches: frozenset[str] = MODELLED_SWITCHES
    modelled_keys: Mapping[str, Mapping[str, str]] = MODELLED_KEYS
    # No JSON option is built from a section's fields: SGLang takes each as an option of its own.
    modelled_json: Mapping[str, Mapping[str, str]] = MappingProxyType({})
    # SGLang's switches are store_true only; its "off" settings are options of their own (--disable-radix-cache).
    modelled_off: Mapping[str, tuple[str, Any]] = MappingProxyType({})
    modelled_aliases: Mapping[str, tuple[str, str]] = MappingProxyType({})
    ready_timeout_env: str | None = None  # SGLang has no engine-core handshake timeout to stretch
    # SGLang keeps tuned tactics below $SGLANG_CACHE_DIR/flashinfer/autotune/<fi>/<arch>/<key>/
    # (model_executor/runner/flashinfer_autotune.py:137-175), not the directory vLLM reads: a pinned cache
    # cannot be replayed into it yet (problems() says so).
    autotune_dir_env: str | None = None
    dynamo_extra: str = "sglang"  # ai-dynamo[sglang]: sglang[diffusion]==X, nixl[cu13]==Y
    cache_root_env: str | None = "SGLANG_CACHE_DIR"  # Envs.SGLANG_CACHE_DIR, srt/environ.py:1208
    managed_env: Mapping[str, str] = MappingProxyType({})  # render seeds no SGLang cache (problems())
    # SGLang reads most SGLANG_ variables through its Envs registry (srt/environ.py), but some through helpers of
    # its own (observability/metrics_collector.py, mem_cache/storage/umbp/) that the catalog's scan does not
    # follow: a name missing from the catalog may still be read, so none is called ignored.
    env_registry: tuple[str, str] | None = None
    removed_env: str | None = None  # stackpin records no SGLang env var removals
    lock_check: str = "stackpin.enginecheck.sglang_check:check_sglang_lock"
    runtime_image: str = "nvcr.io/nvidia/ai-dynamo/sglang-runtime"
    flag_import: str = "options"
    kv_transfer_names: Mapping[str, str] = MappingProxyType(TRANSFER_BACKENDS)  # --disaggregation-transfer-backend
    capture: Capture | None = None  # no pinned cache is captured for SGLang (autotune_dir_env)
    rule_modules: tuple[str, ...] = ()  # what SGLang decides at start-up its own engine check reads (enginecheck)
    stated_defaults: Mapping[str, str] = MappingProxyType({
        "--dp-size": "SGLang's default 1, stated",
        "--pp-size": "SGLang's default 1, stated",
        "--tp-size": "SGLang's default 1, stated",
        "--mem-fraction-static": "stackpin's pool gpuMemoryUtilization default 0.9, stated (SGLang sizes its static "
                                 "memory itself when the flag is unset)",
    })

    def release(self, version: str) -> Release | None:
        from stackpin.catalog.flags import engine_release

        return engine_release(self.name, version)

    def flag_catalog(self, version: str) -> FlagCatalog | None:
        from stackpin.catalog.flags import engine_catalog

        return engine_catalog(self.name, version)

    def startup(self, version: str) -> StartupFacts | None:  # noqa: ARG002 (the protocol's signature)
        return None  # SGLang's start-up facts are read by its own engine check (enginecheck), not a catalog file

    def speculative_kind(self, method: str) -> str:
        return SPECULATIVE_KINDS.get(method.upper(), method.lower())

    def autotune_flags(self, profile: StackProfile, catalog: FlagCatalog | None) -> list[Flag]:  # noqa: ARG002
        off = profile.spec.autotune.mode == AutotuneMode.off
        return [("--disable-flashinfer-autotune", None)] if off else []  # fields/exec_.py:287-290

    def render_refusals(self, profile: StackProfile) -> list[tuple[str, Hit]]:  # noqa: ARG002 (the protocol's)
        return []  # a capture list is refused for SGLang altogether (problems())

    def problems(self, profile: StackProfile) -> list[str]:
        """What the profile asks that stackpin cannot yet render for SGLang, each with where to go instead."""
        spec = profile.spec
        pools = [getattr(spec.placement.pools, name) for name in POOL_NAMES]
        pools = [pool for pool in pools if pool is not None]
        out = []
        if any(pool.kv_connector_extra_config for pool in pools):
            out.append("kvConnectorExtraConfig: vLLM's --kv-transfer-config key; SGLang's transfer backends take "
                       "their settings as options (engineArgs)")
        if spec.kernels.linear is not None:
            out.append("spec.kernels.linear: SGLang 0.5.21 has no linear-kernel backend option; pass its "
                       "--fp4-gemm-backend or --fp8-gemm-backend through engineArgs")
        if spec.cuda_graphs.mode.value not in GRAPH_BACKENDS:
            out.append(f"spec.cudaGraphs.mode {spec.cuda_graphs.mode.value} has no SGLang counterpart stackpin "
                       "renders; use FULL_AND_PIECEWISE, FULL_DECODE_ONLY or NONE, or engineArgs "
                       "--cuda-graph-backend-decode / --cuda-graph-backend-prefill")
        if spec.cuda_graphs.capture_sizes is not None:
            out.append("spec.cudaGraphs.captureSizes: SGLang takes the list as separate arguments "
                       "(--cuda-graph-bs-decode N N ..., nargs='+'), which stackpin does not render yet; set "
                       "maxCaptureSize (--cuda-graph-max-bs-decode)")
        if spec.cuda_graphs.compilation or any(pool.compilation for pool in pools):
            out.append("spec.cudaGraphs.compilation: vLLM's --compilation-config keys; SGLang has no such option")
        if spec.autotune.cache is not None:
            out.append("spec.autotune.cache: a pinned cache is replayed into vLLM's autotune directory; SGLang "
                       "reads its own ($SGLANG_CACHE_DIR/flashinfer/autotune/...), which stackpin does not "
                       "seed yet: leave spec.autotune.cache unset")
        if spec.speculative.enabled and spec.speculative.draft_tensor_parallel_size is not None:
            out.append("spec.speculative.draftTensorParallelSize: SGLang runs the draft at the target's TP")
        return out

    def worker_flags(self, profile: StackProfile, role: Role, pool: Pool, *, model_revision: str,
                     catalog: FlagCatalog | None = None, serving: tuple[Flag, ...] = ()) -> list[Flag]:
        """The flags of `python3 -m dynamo.sglang` for one pool, in a fixed order: the modelled ones, the model's
        serving flags unless the pool's dynamoArgs set them, then engineArgs and dynamoArgs (each sorted)."""
        spec = profile.spec
        flags: list[Flag] = [("--model-path", spec.model.id), ("--revision", model_revision)]
        if spec.model.tokenizer_mode != "auto":
            flags.append(("--tokenizer-mode", spec.model.tokenizer_mode))
        tp, dp = pool.tensor_parallel, pool.data_parallel
        if attention_dp_size(pool) > 1:
            # Wide EP: SGLang's data-parallel attention runs inside one TP group of tp*dp ranks (the GPU count
            # vLLM's TP x DP gives), with the experts sharded over all of them: ep_size * moe_dp_size must equal
            # tp_size (arg_groups/parallel_hook.py:129-131).
            flags += [("--tp-size", str(tp * dp)), ("--pp-size", str(pool.pipeline_parallel)),
                      ("--dp-size", str(dp)), ("--enable-dp-attention", None), ("--ep-size", str(tp * dp))]
        else:
            # Without DP attention SGLang's data-parallel controller runs dp engines of tp ranks each.
            flags += [("--tp-size", str(tp)), ("--pp-size", str(pool.pipeline_parallel)), ("--dp-size", str(dp))]
            if pool.expert_parallel:
                flags.append(("--ep-size", str(tp)))
        flags.append(("--context-length", str(spec.model.max_model_len)))
        # maxNumSeqs and maxNumBatchedTokens are per scheduler (per DP rank, as vLLM reads them); under DP
        # attention SGLang divides both options among its dp_size ranks (kv_cache_configurator.py:2299-2302,
        # moe_hook.py:584-585; parallel_hook.py:255-266), so the options carry the replica's total.
        per_rank = attention_dp_size(pool)
        if pool.max_num_seqs is not None:
            flags.append(("--max-running-requests", str(pool.max_num_seqs * per_rank)))
        if pool.max_num_batched_tokens is not None:
            flags.append(("--chunked-prefill-size", str(pool.max_num_batched_tokens * per_rank)))
        flags.append(("--mem-fraction-static", repr(pool.gpu_memory_utilization)))
        if spec.fallbacks.cpu_offload_gib:
            flags.append(("--cpu-offload-gb", f"{spec.fallbacks.cpu_offload_gib:g}"))
        flags.append(("--kv-cache-dtype", spec.kv_cache.dtype))
        if spec.kv_cache.block_size is not None:
            flags.append(("--page-size", str(spec.kv_cache.block_size)))
        if not spec.kv_cache.prefix_caching:
            flags.append(("--disable-radix-cache", None))
        for option, value in (("--attention-backend", spec.kernels.attention),
                              ("--moe-runner-backend", spec.kernels.moe),
                              ("--moe-a2a-backend", spec.kernels.all2all)):
            if value is not None:
                flags.append((option, value))
        graphs = spec.cuda_graphs
        decode, prefill = GRAPH_BACKENDS.get(graphs.mode.value, (None, None))
        if decode is not None:
            flags.append(("--cuda-graph-backend-decode", decode))
        if prefill is not None:
            flags.append(("--cuda-graph-backend-prefill", prefill))
        if graphs.max_capture_size is not None:
            flags.append(("--cuda-graph-max-bs-decode", str(graphs.max_capture_size)))
        speculative = profile.speculative_for(pool)
        if speculative.enabled and speculative.method is not None:
            steps = speculative.num_speculative_tokens or 1
            flags.append(("--speculative-algorithm", speculative.method))
            if speculative.method.upper() == "DSPARK":
                # DSpark drafts a block of gamma tokens and verifies gamma + 1 (speculative_hook.py:700-742);
                # with DP attention it needs the DP LM head (speculative_hook.py:589-593).
                flags += [("--speculative-dspark-block-size", str(steps)),
                          ("--speculative-num-draft-tokens", str(steps + 1))]
                if ("--enable-dp-attention", None) in flags:
                    flags.append(("--enable-dp-lm-head", None))
            else:
                # Chain drafting (top-k 1): SGLang sets num_draft_tokens to num_steps + 1 itself
                # (arg_groups/speculative_hook.py:1143-1154); stating it keeps the argv what runs.
                flags += [("--speculative-num-steps", str(steps)), ("--speculative-eagle-topk", "1"),
                          ("--speculative-num-draft-tokens", str(steps + 1))]
            if speculative.draft_model:
                flags.append(("--speculative-draft-model-path", speculative.draft_model))
                if speculative.draft_revision:
                    flags.append(("--speculative-draft-model-revision", speculative.draft_revision))
        flags += self.autotune_flags(profile, catalog)
        if spec.placement.mode == Placement.disaggregated:
            connector = spec.placement.kv_connector
            backend = TRANSFER_BACKENDS.get(connector, connector) if connector else DEFAULT_TRANSFER_BACKEND
            flags += [("--disaggregation-mode", role.value), ("--disaggregation-transfer-backend", backend)]
        if kv_events_enabled(profile):
            flags.append(("--kv-events-config", json_arg(KV_EVENTS)))
        flags += [(option, value) for option, value in serving if option not in pool.dynamo_args]
        return flags + passed_flags(pool.engine_args) + passed_flags(pool.dynamo_args)


SGLANG = Sglang()
