"""Engine and frontend command lines: pure, typed functions from a profile to argv.

Every value reaches the container as its own argv element (never through a shell or a template),
JSON arguments are compact with sorted keys, and flags come out in one fixed order, so the same
profile always gives the same bytes. `check_flags` compares an argv with the flag catalog that was
extracted from the pinned vLLM / Dynamo packages (stackpin/catalog/engines/).
"""

from __future__ import annotations

from typing import Any

# vllm_catalog and dynamo_catalog are re-exported for the render plan, which reads them as argmod.*.
from stackpin.catalog.flags import FlagCatalog
from stackpin.catalog.flags import dynamo_catalog as dynamo_catalog
from stackpin.catalog.flags import vllm_catalog as vllm_catalog
from stackpin.catalog.startup import startup_facts
from stackpin.lock.canonical import canonical_json
from stackpin.profile.engine_args import MODELLED_FRONTEND as MODELLED_FRONTEND
from stackpin.profile.engine_args import EngineArgValue, scalar_text
from stackpin.profile.model import AutotuneMode, Placement, Pool, RouterMode, Speculative, StackProfile
from stackpin.profile.topology import Role as WorkerRole

Flag = tuple[str, str | None]  # (option, value); None for a bare switch

# Dynamo's own worker / frontend entry points (docs/facts.md#dynamo-command-lines, upstream DGD examples).
WORKER_COMMAND = ("python3", "-m", "dynamo.vllm")
FRONTEND_COMMAND = ("python3", "-m", "dynamo.frontend")
FRONTEND_HTTP_PORT = 8000  # dynamo.frontend's default --http-port, stated so probes can point at it
# KV-event publisher the KV router subscribes to; the values of the upstream agg_router example.
KV_EVENTS = {"enable_kv_cache_events": True, "endpoint": "tcp://*:20080", "publisher": "zmq", "topic": "kv-events"}
DEFAULT_KV_CONNECTOR = "NixlConnector"

_DISAGGREGATION_MODE: dict[str, str] = {"worker": "agg", "prefill": "prefill", "decode": "decode"}


def json_arg(value: Any) -> str:
    """A JSON argument: stackpin's canonical JSON (sorted keys, no spaces), as argv text."""
    return canonical_json(value).decode("utf-8")


def flatten(flags: list[Flag]) -> list[str]:
    return [part for flag, value in flags for part in ((flag,) if value is None else (flag, value))]


# --- flag checks (catalogs: stackpin.catalog.flags) ---------------------------------------------

def check_flags(flags: list[Flag], catalogs: list[FlagCatalog]) -> list[str]:
    """Problems that make the pinned engine refuse to start: an unknown option, or a value outside
    the choices argparse enforces. `catalogs` together form the entry point (dynamo.vllm accepts
    Dynamo's options and every vLLM option)."""
    problems = []
    names = " + ".join(c.name for c in catalogs)
    for option, value in flags:
        owners = [c for c in catalogs if c.accepts(option)]
        if not owners:
            problems.append(f"{option} is not an option of {names}")
            continue
        for owner in owners:
            choices = owner.enforced.get(option)
            if value is not None and choices is not None and value not in choices:
                problems.append(f"{option} {value} is not one of {owner.name}'s choices: {', '.join(choices)}")
    return problems


def unknown_values(flags: list[Flag], catalogs: list[FlagCatalog]) -> list[str]:
    """Values argparse lets through but the pinned engine does not know (e.g. an attention backend
    it does not have): the engine fails at start-up, later than with an unknown option."""
    out = []
    for option, value in flags:
        for catalog in catalogs:
            known = catalog.known.get(option)
            if value is not None and known and value not in known:
                out.append(f"{option} {value} is not known to {catalog.name}")
    return out


# --- command lines -------------------------------------------------------------------------------

# Methods whose draft vLLM reads from the target's own checkpoint, when the catalog has no start-up facts
# for the pinned release (catalog/engines/vllm-<v>.startup.yaml `speculative.draft_from_target`).
DRAFT_FROM_TARGET = ("dspark", "mtp")


def speculative_config(spec: Speculative, target_revision: str,
                       vllm_version: str | None = None) -> dict[str, Any] | None:
    """vLLM's --speculative-config for these settings; None when speculation is off. Every model vLLM loads
    is pinned: vLLM gives the draft the config's own `revision`, never the target's --revision, so a draft
    read from the target's checkpoint gets the locked model revision and a separate draft its draftRevision."""
    if not spec.enabled:
        return None
    facts = startup_facts(vllm_version) if vllm_version else None
    from_target = facts.speculative.draft_from_target if facts else DRAFT_FROM_TARGET
    revision = spec.draft_revision if spec.draft_model else (target_revision if spec.method in from_target else None)
    fields: dict[str, Any] = {
        "method": spec.method,
        "num_speculative_tokens": spec.num_speculative_tokens,
        "model": spec.draft_model,
        "revision": revision,
        "draft_tensor_parallel_size": spec.draft_tensor_parallel_size,
        "draft_sample_method": spec.draft_sample_method,
        "rejection_sample_method": spec.rejection_sample_method,
        "enable_adaptive_verification": spec.adaptive_verification,
    }
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
        return [("--no-enable-flashinfer-autotune", None)]
    if off := vllm.negative("--enable-flashinfer-autotune"):
        return [(off, None)]  # the spelling the pinned vLLM neither hides nor deprecates
    if vllm.accepts("--kernel-config"):
        return [("--kernel-config", json_arg({"enable_flashinfer_autotune": False}))]
    return []  # a vLLM without either has no FlashInfer autotuning to turn off


def kv_events_enabled(profile: StackProfile) -> bool:
    kv = profile.spec.kv_cache
    return kv.events and kv.prefix_caching and profile.spec.placement.router == RouterMode.kv


def engine_flags(profile: StackProfile, role: WorkerRole, pool: Pool, *, model_revision: str,
                 vllm: FlagCatalog | None = None, serving: tuple[Flag, ...] = ()) -> list[Flag]:
    """The flags of `python3 -m dynamo.vllm` for one pool, in a fixed order: the modelled ones, the model's
    serving flags (`serving`: its parsers, profile/serving.py) unless the pool's dynamoArgs set them, then
    the pool's engineArgs and dynamoArgs (each sorted by option)."""
    spec = profile.spec
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
    off = (vllm.negative("--enable-prefix-caching") if vllm else None) or "--no-enable-prefix-caching"
    flags.append(("--enable-prefix-caching" if spec.kv_cache.prefix_caching else off, None))
    for option, value in (("--attention-backend", spec.kernels.attention), ("--moe-backend", spec.kernels.moe),
                          ("--linear-backend", spec.kernels.linear), ("--all2all-backend", spec.kernels.all2all)):
        if value is not None:
            flags.append((option, value))
    flags.append(("--compilation-config", json_arg(compilation_config(profile, pool))))
    speculative = speculative_config(profile.speculative_for(pool), model_revision, spec.versions.vllm)
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


def passed_flags(args: dict[str, EngineArgValue]) -> list[Flag]:
    """A pool's engineArgs or dynamoArgs as flags, sorted by option: `true` a bare switch, a mapping
    canonical JSON, anything else its text (validation refuses `false` and other misfits first)."""
    return [(option, json_arg(value) if isinstance(value, dict) else scalar_text(value))
            for option, value in sorted(args.items())]


def engine_args(profile: StackProfile, role: WorkerRole, pool: Pool, *, model_revision: str,
                vllm: FlagCatalog | None = None, serving: tuple[Flag, ...] = ()) -> list[str]:
    """argv after `python3 -m dynamo.vllm` for one pool."""
    return flatten(engine_flags(profile, role, pool, model_revision=model_revision, vllm=vllm, serving=serving))


def frontend_flags(profile: StackProfile) -> list[Flag]:
    router = profile.spec.placement.router
    flags: list[Flag] = [("--http-port", str(FRONTEND_HTTP_PORT)), ("--router-mode", router.value),
                         ("--migration-limit", str(profile.spec.placement.migration_limit))]
    if router == RouterMode.kv and not kv_events_enabled(profile):
        # Workers publish no KV events: the KV router must predict cache contents itself.
        flags.append(("--no-router-kv-events", None))
    return flags + passed_flags(profile.spec.placement.frontend_args)



def frontend_args(profile: StackProfile) -> list[str]:
    """argv after `python3 -m dynamo.frontend`."""
    return flatten(frontend_flags(profile))
