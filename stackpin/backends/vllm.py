"""vLLM under Dynamo (`python3 -m dynamo.vllm`): its flag table, catalogs, facts and environment names.

The worker accepts Dynamo's own options and every vLLM engine option (AsyncEngineArgs.add_cli_args of the
vLLM it runs with); the catalogs hold both, read from the published wheels (`stackpin engines add`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import msgspec

from stackpin.backends.base import Capture, Flag, json_arg, kv_events_enabled, passed_flags
from stackpin.profile.engine_args import POOL
from stackpin.profile.model import AutotuneMode, Placement, Pool, Speculative, StackProfile

if TYPE_CHECKING:
    from stackpin.catalog.engine_data import Release
    from stackpin.catalog.flags import DynamoEntry, FlagCatalog
    from stackpin.catalog.startup import StartupFacts
    from stackpin.profile.topology import Role
    from stackpin.rules import Hit

# Options stackpin renders from modelled fields (worker_flags below), -> the field to use.
MODELLED: dict[str, str] = {
    "--model": "spec.model.id",
    "--revision": "spec.model.revision",
    "--tokenizer-mode": "spec.model.tokenizerMode",
    "--tensor-parallel-size": f"{POOL}.tensorParallel",
    "--pipeline-parallel-size": f"{POOL}.pipelineParallel",
    "--data-parallel-size": f"{POOL}.dataParallel",
    "--enable-expert-parallel": f"{POOL}.expertParallel",
    "--max-model-len": "spec.model.maxModelLen",
    "--max-num-seqs": f"{POOL}.maxNumSeqs",
    "--max-num-batched-tokens": f"{POOL}.maxNumBatchedTokens",
    "--gpu-memory-utilization": f"{POOL}.gpuMemoryUtilization",
    "--cpu-offload-gb": "spec.fallbacks.cpuOffloadGib",
    "--kv-cache-dtype": "spec.kvCache.dtype",
    "--block-size": "spec.kvCache.blockSize",
    "--enable-prefix-caching": "spec.kvCache.prefixCaching",
    "--attention-backend": "spec.kernels.attention",
    "--moe-backend": "spec.kernels.moe",
    "--linear-backend": "spec.kernels.linear",
    "--all2all-backend": "spec.kernels.all2all",
    "--compilation-config": "spec.cudaGraphs",
    "--speculative-config": "spec.speculative",
    "--enable-flashinfer-autotune": "spec.autotune.mode",
    "--kv-transfer-config": "spec.placement.kvConnector",
    "--kv-events-config": "spec.kvCache.events",
}
# Dynamo's own worker options render writes.
MODELLED_DYNAMO: dict[str, str] = {"--disaggregation-mode": "spec.placement.mode"}
# Boolean fields whose switch stackpin renders as `--x` when true and `--no-x` (or nothing: vLLM's
# default is off) when false: the same switch passed through agrees or contradicts, and SP225 says which.
MODELLED_SWITCHES = frozenset({"--enable-prefix-caching", "--enable-expert-parallel"})
# Keys of a JSON-config option that stackpin sets through another flag: --kernel-config's
# enable_flashinfer_autotune is what autotune "off" renders when the release lacks the switch.
MODELLED_KEYS: dict[str, dict[str, str]] = {
    "--kernel-config": {"enable_flashinfer_autotune": "spec.autotune.mode", "moe_backend": "spec.kernels.moe",
                        "linear_backend": "spec.kernels.linear"},
}
# The keys of vLLM's JSON options that stackpin builds from a section's fields (render: compilation_config,
# speculative_config below; import reads each key back to its field). The draft's `revision` is what the lock
# pins (speculative_config), so import leaves draftRevision to the lock.
MODELLED_JSON: dict[str, dict[str, str]] = {
    "--compilation-config": {"cudagraph_mode": "spec.cudaGraphs.mode",
                             "cudagraph_capture_sizes": "spec.cudaGraphs.captureSizes",
                             "max_cudagraph_capture_size": "spec.cudaGraphs.maxCaptureSize"},
    "--speculative-config": {"method": "spec.speculative.method",
                             "num_speculative_tokens": "spec.speculative.numSpeculativeTokens",
                             "model": "spec.speculative.draftModel", "revision": "spec.speculative.draftRevision",
                             "draft_tensor_parallel_size": "spec.speculative.draftTensorParallelSize",
                             "draft_sample_method": "spec.speculative.draftSampleMethod",
                             "rejection_sample_method": "spec.speculative.rejectionSampleMethod",
                             "enable_adaptive_verification": "spec.speculative.adaptiveVerification"},
}
# vLLM's BooleanOptionalAction "off" spellings render writes when the pinned release's catalog names none (the
# upstream GB200 recipes' spelling), with the field's value they stand for.
MODELLED_OFF: dict[str, tuple[str, Any]] = {
    "--enable-prefix-caching": ("--no-enable-prefix-caching", False),
    "--enable-flashinfer-autotune": ("--no-enable-flashinfer-autotune", AutotuneMode.off.value),
}
# vLLM's --max-cudagraph-capture-size sets CompilationConfig.max_cudagraph_capture_size (vllm/engine/arg_utils.py).
MODELLED_ALIASES: dict[str, tuple[str, str]] = {
    "--max-cudagraph-capture-size": ("--compilation-config", "max_cudagraph_capture_size")}
# KV-event publisher the KV router subscribes to; the values of the upstream agg_router example.
KV_EVENTS = {"enable_kv_cache_events": True, "endpoint": "tcp://*:20080", "publisher": "zmq", "topic": "kv-events"}
DEFAULT_KV_CONNECTOR = "NixlConnector"
# Methods whose draft vLLM reads from the target's own checkpoint, when the catalog has no start-up facts
# for the pinned release (catalog/engines/vllm-<v>.startup.yaml `speculative.draft_from_target`).
DRAFT_FROM_TARGET = ("dspark", "mtp")
_DISAGGREGATION_MODE: dict[str, str] = {"worker": "agg", "prefill": "prefill", "decode": "decode"}
# The autotune capture (stackpin.render.capture): `vllm serve` until the API answers /health (the cache is
# written during warm-up, before that), then stop. Every node of a multi-node replica serves its own ranks (hybrid
# load balancing, as served; render/capture.py gives the data-parallel environment) and stops when rank 0 is done.
# Engine arguments arrive as "$@": nothing from the profile is spliced in.
CAPTURE_SCRIPT = r"""set -euo pipefail
extra=()
index="${JOB_COMPLETION_INDEX:-0}"
if [ "$STACKPIN_NODES" -gt 1 ]; then
  extra+=(--data-parallel-hybrid-lb --data-parallel-size-local "$STACKPIN_DP_LOCAL"
          --data-parallel-start-rank "$((index * STACKPIN_DP_LOCAL))"
          --data-parallel-address "$STACKPIN_LEADER" --data-parallel-rpc-port "$STACKPIN_DP_RPC_PORT")
fi
done_marker="$VLLM_CACHE_ROOT/.stackpin-captured-$STACKPIN_POOL"
vllm serve "$@" "${extra[@]}" &
pid=$!
if [ "$index" -eq 0 ]; then
  until python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/health")' 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit 1; }
    sleep 10
  done
  touch "$done_marker"
else
  until [ -e "$done_marker" ]; do kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit 1; }; sleep 10; done
fi
kill -TERM "$pid"
wait "$pid" || true
if [ "$index" -eq 0 ]; then
  # The environment FlashInfer records in each file's _metadata, from the same image on the same GPUs:
  # `stackpin autotune verify --runtime-metadata` compares every cache file with it.
  python3 -c 'import json, sys; from flashinfer.autotuner.autotuner import _collect_metadata as meta
json.dump(meta(), sys.stdout, sort_keys=True)' > "$VLLM_CACHE_ROOT/runtime-metadata-$STACKPIN_POOL.json"
fi
find "$VLLM_CACHE_ROOT/flashinfer_autotune_cache" -type f -name '*.json' | sort
"""


def serve_args(args: tuple[str, ...], dynamo_only: frozenset[str] = frozenset({"--disaggregation-mode"})) -> list[str]:
    """A dynamo.vllm argv as `vllm serve` argv: the model goes first, Dynamo's own flags go (with their
    value: the next token when it is not an option)."""
    out, model, i = [], None, 0
    while i < len(args):
        if args[i] == "--model":
            model, i = args[i + 1], i + 2
        elif args[i] in dynamo_only:
            i += 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
        else:
            out.append(args[i])
            i += 1
    if model is None:
        raise ValueError("engine arguments carry no --model")
    return [model, *out]


def speculative_config(spec: Speculative, target_revision: str, facts: StartupFacts | None = None
                       ) -> dict[str, Any] | None:
    """vLLM's --speculative-config for these settings; None when speculation is off. Every model vLLM loads
    is pinned: vLLM gives the draft the config's own `revision`, never the target's --revision, so a draft
    read from the target's checkpoint gets the locked model revision and a separate draft its draftRevision."""
    if not spec.enabled:
        return None
    from_target = facts.speculative.draft_from_target if facts else DRAFT_FROM_TARGET
    revision = spec.draft_revision if spec.draft_model else (target_revision if spec.method in from_target else None)
    attribute = {f.encode_name: f.name for f in msgspec.structs.fields(Speculative)}
    fields: dict[str, Any] = {key: getattr(spec, attribute[path.rsplit(".", 1)[1]])
                              for key, path in MODELLED_JSON["--speculative-config"].items()}
    fields["revision"] = revision
    return {k: v for k, v in fields.items() if v is not None}


def compilation_config(profile: StackProfile, pool: Pool | None = None) -> dict[str, Any]:
    return profile.spec.cuda_graphs.compilation_config(pool.compilation if pool else None)


def autotune_flags(profile: StackProfile, vllm: FlagCatalog | None) -> list[Flag]:
    """Turn FlashInfer autotuning off the way the pinned vLLM spells it; nothing when it is on
    (tune, or replay of a pinned cache: an "off" flag would contradict the cache)."""
    if profile.spec.autotune.mode != AutotuneMode.off:
        return []
    if vllm is None:
        # Without a catalog, the switch the upstream GB200 recipes use.
        return [(MODELLED_OFF["--enable-flashinfer-autotune"][0], None)]
    if off := vllm.negative("--enable-flashinfer-autotune"):
        return [(off, None)]  # the spelling the pinned vLLM neither hides nor deprecates
    if vllm.accepts("--kernel-config"):
        return [("--kernel-config", json_arg({"enable_flashinfer_autotune": False}))]
    return []  # a vLLM without either has no FlashInfer autotuning to turn off


class Vllm:
    name: str = "vllm"
    label: str = "vLLM"
    distribution: str = "vllm"
    worker_command: tuple[str, ...] = ("python3", "-m", "dynamo.vllm")
    backend_framework: str = "vllm"
    default_kv_connector: str = DEFAULT_KV_CONNECTOR  # spec.placement.kvConnector when unset
    dynamo_worker: DynamoEntry = "worker_vllm"
    modelled: Mapping[str, str] = MODELLED
    modelled_dynamo: Mapping[str, str] = MODELLED_DYNAMO
    modelled_switches: frozenset[str] = MODELLED_SWITCHES
    modelled_keys: Mapping[str, Mapping[str, str]] = MODELLED_KEYS
    modelled_json: Mapping[str, Mapping[str, str]] = MODELLED_JSON
    modelled_off: Mapping[str, tuple[str, Any]] = MODELLED_OFF
    modelled_aliases: Mapping[str, tuple[str, str]] = MODELLED_ALIASES
    # vLLM's engine-core handshake timeout (vllm/envs.py): the start-up budget, so a slow first load is not
    # killed before the probes would be.
    ready_timeout_env: str | None = "VLLM_ENGINE_READY_TIMEOUT_S"
    autotune_dir_env: str | None = "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"
    dynamo_extra: str = "vllm"  # ai-dynamo[vllm]: vllm[flashinfer]==X, nixl[cu13]==Y
    # vLLM keeps its caches (flashinfer_autotune_cache/ among them) below VLLM_CACHE_ROOT (vllm/envs.py).
    cache_root_env: str | None = "VLLM_CACHE_ROOT"
    # Both point vLLM at the pinned autotune cache the worker unpacks (render, docs/facts.md#autotune-cache-path).
    managed_env: Mapping[str, str] = MappingProxyType({"VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": "autotune.cache",
                                                       "VLLM_CACHE_ROOT": "autotune.cache"})
    # vLLM reads its VLLM_ variables through one registry, vllm/envs.py, which its catalog's env_vars is read from.
    env_registry: tuple[str, str] | None = ("VLLM_", "vllm/envs.py")
    removed_env: str | None = "removed_env"  # versions.yaml removed_env: what vLLM stopped reading, since when
    lock_check: str = "stackpin.enginecheck.vllm_check:check_vllm_lock"
    runtime_image: str = "nvcr.io/nvidia/ai-dynamo/vllm-runtime"
    flag_import: str = "tables"
    kv_transfer_names: Mapping[str, str] = MappingProxyType({})  # --kv-transfer-config's kv_connector: the name
    capture: Capture | None = Capture(CAPTURE_SCRIPT, serve_args)
    rule_modules: tuple[str, ...] = tuple(f"stackpin.backends.vllm_rules.{family}"
                                          for family in ("kernels", "graphs", "speculative", "precision"))
    stated_defaults: Mapping[str, str] = MappingProxyType({
        "--data-parallel-size": "vLLM's default 1, stated",
        "--pipeline-parallel-size": "vLLM's default 1, stated",
        "--tensor-parallel-size": "vLLM's default 1, stated",
        "--enable-prefix-caching": "vLLM's default, stated",
        "--gpu-memory-utilization": "stackpin's default 0.9 (vLLM's own is 0.92 in 0.28.0-0.33.0), stated",
        "--kv-cache-dtype": "vLLM's default auto, stated",
        "--compilation-config.cudagraph_mode": "vLLM's default mode, stated",
    })

    def release(self, version: str) -> Release | None:
        from stackpin.catalog.flags import engine_release

        return engine_release(self.name, version)

    def flag_catalog(self, version: str) -> FlagCatalog | None:
        from stackpin.catalog.flags import engine_catalog

        return engine_catalog(self.name, version)

    def startup(self, version: str) -> StartupFacts | None:
        from stackpin.catalog.startup import startup_facts

        return startup_facts(version)

    def speculative_kind(self, method: str) -> str:
        return method  # stackpin names speculative methods as vLLM does

    def autotune_flags(self, profile: StackProfile, catalog: FlagCatalog | None) -> list[Flag]:
        return autotune_flags(profile, catalog)

    def problems(self, profile: StackProfile) -> list[str]:  # noqa: ARG002 (the protocol's signature)
        return []  # every modelled field has its vLLM flag

    def render_refusals(self, profile: StackProfile) -> list[tuple[str, Hit]]:
        from stackpin.backends.vllm_rules.graphs import empty_capture_hit

        hit = empty_capture_hit(profile)  # SP105: vLLM asserts at least one capture size with graphs on
        return [] if hit is None else [("SP105", hit)]

    def worker_flags(self, profile: StackProfile, role: Role, pool: Pool, *, model_revision: str,
                     catalog: FlagCatalog | None = None, serving: tuple[Flag, ...] = ()) -> list[Flag]:
        """The flags of `python3 -m dynamo.vllm` for one pool, in a fixed order: the modelled ones, the model's
        serving flags (`serving`: its parsers, profile/serving.py) unless the pool's dynamoArgs set them, then
        the pool's engineArgs and dynamoArgs (each sorted by option)."""
        spec = profile.spec
        vllm = catalog
        flags: list[Flag] = [("--model", spec.model.id), ("--revision", model_revision)]
        if spec.model.tokenizer_mode != "auto":
            flags.append(("--tokenizer-mode", spec.model.tokenizer_mode))
        flags += [
            ("--tensor-parallel-size", str(pool.tensor_parallel)),
            ("--pipeline-parallel-size", str(pool.pipeline_parallel)),
            ("--data-parallel-size", str(pool.data_parallel)),
        ]
        if pool.expert_parallel:
            flags.append(("--enable-expert-parallel", None))
        flags.append(("--max-model-len", str(spec.model.max_model_len)))
        if pool.max_num_seqs is not None:
            flags.append(("--max-num-seqs", str(pool.max_num_seqs)))
        if pool.max_num_batched_tokens is not None:
            flags.append(("--max-num-batched-tokens", str(pool.max_num_batched_tokens)))
        flags.append(("--gpu-memory-utilization", repr(pool.gpu_memory_utilization)))
        if spec.fallbacks.cpu_offload_gib:
            # The memory sizing (and validate's summary) counts these GiB as living in CPU memory.
            flags.append(("--cpu-offload-gb", f"{spec.fallbacks.cpu_offload_gib:g}"))
        flags.append(("--kv-cache-dtype", spec.kv_cache.dtype))
        if spec.kv_cache.block_size is not None:
            flags.append(("--block-size", str(spec.kv_cache.block_size)))
        off = (vllm.negative("--enable-prefix-caching") if vllm else None) or MODELLED_OFF["--enable-prefix-caching"][0]
        flags.append(("--enable-prefix-caching" if spec.kv_cache.prefix_caching else off, None))
        for option, value in (("--attention-backend", spec.kernels.attention), ("--moe-backend", spec.kernels.moe),
                              ("--linear-backend", spec.kernels.linear), ("--all2all-backend", spec.kernels.all2all)):
            if value is not None:
                flags.append((option, value))
        flags.append(("--compilation-config", json_arg(compilation_config(profile, pool))))
        speculative = speculative_config(profile.speculative_for(pool), model_revision,
                                         self.startup(spec.engine_version))
        if speculative is not None:
            flags.append(("--speculative-config", json_arg(speculative)))
        flags += autotune_flags(profile, vllm)
        if spec.placement.mode == Placement.disaggregated:
            # kv_both on both sides: the NIXL connector pulls either way (docs/facts.md#dynamo-command-lines).
            connector = spec.placement.kv_connector or DEFAULT_KV_CONNECTOR
            transfer: dict[str, Any] = {"kv_connector": connector, "kv_role": "kv_both"}
            if pool.kv_connector_extra_config:
                transfer["kv_connector_extra_config"] = pool.kv_connector_extra_config
            flags.append(("--kv-transfer-config", json_arg(transfer)))
        if kv_events_enabled(profile):
            flags.append(("--kv-events-config", json_arg(KV_EVENTS)))
        flags.append(("--disaggregation-mode", _DISAGGREGATION_MODE[role]))
        flags += [(option, value) for option, value in serving if option not in pool.dynamo_args]
        # What the profile passes through comes last, in a fixed order: vLLM's flags, then Dynamo's.
        return flags + passed_flags(pool.engine_args) + passed_flags(pool.dynamo_args)


VLLM = Vllm()
