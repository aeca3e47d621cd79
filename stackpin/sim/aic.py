"""The `aiconfigurator` step model: NVIDIA aiconfigurator-core's per-step latencies from measured kernel
data, behind the same interface as roofline's StepModel (alpha, step_time, best_k, kv_transfer_time).

aiconfigurator-core is the optional `sim` extra, imported only here and only when this model is asked
for. What it cannot stand for is refused (`refusal`); what it stands in with is stated
(`substitutions`), from stackpin/sim/aiconfigurator.yaml and from the model it compiled.
Speculative acceptance and the disaggregated KV transfer stay stackpin's (roofline.yaml): aiconfigurator
times a step verifying 1 + k tokens per sequence as k MTP layers; which tokens are accepted is ours.
"""

from __future__ import annotations

import csv
import importlib.metadata
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.errors import StackpinError
from stackpin.sim.roofline import StepModel, best_k
from stackpin.sim.stack import SimPool, SimStack

MAPPING_FILE = Path(__file__).with_name("aiconfigurator.yaml")


@cache
def mapping() -> dict[str, Any]:
    from stackpin.yamlio import load_data

    data: dict[str, Any] = load_data(MAPPING_FILE.read_text(encoding="utf-8"))
    return data


def installed_version() -> str | None:
    """aiconfigurator-core's installed version, None when the `sim` extra is not installed (or cannot be imported:
    its metadata alone does not make it usable)."""
    from stackpin.extras import have

    if not have("sim"):
        return None
    try:
        return importlib.metadata.version(mapping()["package"])
    except importlib.metadata.PackageNotFoundError:
        return None


def _support(system: str, model: str, backend: str, version: str) -> tuple[str, str] | None:
    """(status, reason) of aiconfigurator's own support matrix for this model on this system and backend."""
    import aiconfigurator_core

    path = Path(aiconfigurator_core.__file__).parent / "systems" / "support_matrix" / f"{system}.csv"
    if not path.exists():
        return None
    with path.open(encoding="utf-8", newline="") as fh:
        rows = [r for r in list(csv.reader(fh))[1:] if len(r) > 7 and r[0] == model and r[3] == backend]
    # This version's row; failing that, a row saying the hardware cannot run the model at all.
    for row in [r for r in rows if r[4] == version] + [r for r in rows if r[6] == "HW_INCOMPATIBLE"]:
        return row[6], row[7].splitlines()[0] if row[7] else ""
    return None


def refusal(stack: SimStack) -> str | None:
    """Why aiconfigurator cannot model `stack`, or None when it can."""
    m = mapping()
    have = installed_version()
    if have is None:
        return (f"{m['package']} is not installed: it is the optional `sim` extra "
                f"(pip install 'stackpin[sim]', which pins {m['package']}=={m['version']})")
    if have != m["version"]:
        return (f"{m['package']} {have} is installed; this build maps stacks onto {m['version']} "
                "(stackpin/sim/aiconfigurator.yaml)")
    if stack.gpu_key in m["refused_systems"]:
        return f"{stack.name}: {m['refused_systems'][stack.gpu_key]}"
    where = "stackpin/sim/aiconfigurator.yaml"
    if stack.gpu_key not in m["systems"]:
        return f"{stack.name}: GPU {stack.gpu_key} has no aiconfigurator system in {where}"
    if stack.model_id not in m["models"]:
        return f"{stack.name}: model {stack.model_id} has no aiconfigurator stand-in in {where}"
    system, model = m["systems"][stack.gpu_key], m["models"][stack.model_id]["use"]
    backend = m["backend"]
    status = _support(system, model, backend["name"], str(backend["version"]))
    if status is None:
        return f"{stack.name}: aiconfigurator's support matrix has no {model} on {system} with {backend['name']}"
    if status[0] != "PASS":
        return f"{stack.name}: aiconfigurator cannot run {model} on {system}: {status[0]} ({status[1]})"
    return None


def check(stack: SimStack) -> None:
    reason = refusal(stack)
    if reason is not None:
        raise StackpinError(f"--model aiconfigurator: {reason}")


def _parallel(pool: SimPool) -> dict[str, int]:
    """aiconfigurator's parallel mapping for one engine of `pool`: attention over the engine's TP GPUs
    (data-parallel ranks beside it when the experts spread wider), experts split over expert_shards."""
    tp = pool.gpus_per_engine
    return {"tp_size": tp, "attention_dp_size": max(pool.expert_shards // tp, 1),
            "moe_tp_size": 1, "moe_ep_size": pool.expert_shards}


@cache
def _handle(system: str, model: str, backend: str, version: str, parallel: tuple[tuple[str, int], ...],
            nextn: int) -> Any:
    from aiconfigurator_core.sdk.engine import EngineHandle

    try:
        return EngineHandle.compile(model, system, backend, backend_version=version, nextn=nextn, **dict(parallel))
    except Exception as exc:  # noqa: BLE001 - aiconfigurator's errors are many; one line names them
        raise StackpinError(f"--model aiconfigurator: cannot compile {model} on {system} "
                            f"({backend} {version}, {dict(parallel)}): {str(exc).splitlines()[0]}") from None


def _quant(model: str, backend: str, parallel: tuple[tuple[str, int], ...]) -> dict[str, str]:
    """The precisions aiconfigurator infers for the model's checkpoint."""
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    p = dict(parallel)
    built = build_model_config(tp_size=p["tp_size"], pp_size=1, attention_dp_size=p["attention_dp_size"],
                               moe_tp_size=p["moe_tp_size"], moe_ep_size=p["moe_ep_size"])
    config = get_model(model, built, backend).config
    return {name: getattr(config, f"{name}_quant_mode").name for name in ("gemm", "moe", "kvcache")}


def substitutions(stack: SimStack) -> list[str]:
    """Every way aiconfigurator's answer is not the stack itself, one sentence each."""
    check(stack)
    m = mapping()
    model = m["models"][stack.model_id]
    backend = m["backend"]
    system = m["systems"][stack.gpu_key]
    pool = stack.decode
    quant = _quant(model["use"], backend["name"], tuple(_parallel(pool).items()))
    out = [f"model: {model['use']}{_size(model['use'])} stands for {stack.model_id}{_size(stack.model_id)}: "
           f"{model['why']}",
           f"engine: {backend['why'].format(engine=stack.engine)}",
           f"system: aiconfigurator {m['version']} system {system} for {stack.platform}",
           (f"precision: dense GEMMs {quant['gemm']}, routed experts {quant['moe']}, KV cache {quant['kvcache']} "
            f"as aiconfigurator infers from the {model['use']} checkpoint; the lock serves {stack.precision}"),
           ("not modelled: the lock's CUDA graph capture, autotune, kernel choices "
            f"(attention {stack.attention}, MoE {stack.moe}) and host cost per sequence; a step is "
            "aiconfigurator's sum of collected kernel times")]
    if any(p.spec_k for p in stack.pools):
        out.append(f"speculative decoding: {pool.spec_method} verifying k tokens is timed as k MTP (nextn) layers; "
                   "accepted tokens per step from stackpin/sim/roofline.yaml")
    if not stack.colocated:
        out.append("prefill -> decode KV transfer: stackpin's roofline model (stackpin/sim/roofline.yaml)")
    return out


def _size(model_id: str) -> str:
    """' (N B total, P/D B active prefill/decode, K B KV per token)' from the catalog, or ''."""
    from stackpin.catalog import load_catalog

    for facts in load_catalog().models.values():
        if model_id in facts.hf_ids:
            active = facts.active_params_b
            return (f" ({facts.params_b:g}B total, {active.prefill:g}B/{active.decode:g}B active in prefill/decode, "
                    f"{facts.kv_bytes_per_token:,} B KV per token)")
    return ""


@dataclass(frozen=True)
class AicStepModel:
    """Step times for one pool of one stack from aiconfigurator-core; acceptance and KV transfer from
    roofline's StepModel for the same pool."""

    stack: SimStack
    pool: SimPool
    roofline: StepModel
    alpha: tuple[float, ...] = field(init=False)  # per-position draft acceptance (roofline's)
    key: tuple[str, str, str, str, tuple[tuple[str, int], ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check(self.stack)
        m = mapping()
        object.__setattr__(self, "alpha", self.roofline.alpha)
        object.__setattr__(self, "key", (m["systems"][self.stack.gpu_key], m["models"][self.stack.model_id]["use"],
                                         m["backend"]["name"], str(m["backend"]["version"]),
                                         tuple(_parallel(self.pool).items())))
        # Compile every k's engine and load the perf tables now (about a second), not inside the server's
        # first step, where it would stall the first request's stream.
        for k in range(self.pool.spec_k + 1):
            _handle(*self.key, k).decode_step_latency(1, 1, 2)

    @classmethod
    def of(cls, stack: SimStack, pool: SimPool, params: dict[str, Any] | None = None,
           acceptance: tuple[float, ...] | None = None) -> AicStepModel:
        return cls(stack, pool, StepModel.of(stack, pool, params, acceptance))

    def step_time(self, decode: int, k: int, kv_tokens: int, prefill: int = 0) -> float:
        """Seconds for one step: `decode` sequences verifying 1 + k tokens each over `kv_tokens` of context
        in all, plus `prefill` new prompt tokens. With no decoders the chunk attends to `kv_tokens` of
        earlier context (a prefill engine's chunk after the cached prefix); beside decoders it is a prompt
        of its own (the engine does not pass the chunk's earlier context)."""
        if decode == 0 and prefill == 0:
            return 0.0
        handle = _handle(*self.key, k if decode else 0)
        context = max(kv_tokens // decode, 1) if decode else 0
        if prefill == 0:
            # aiconfigurator's decode step: gen_tokens sequences (x (nextn + 1) query tokens) at context
            # isl + osl // 2 + 1.
            return float(handle.decode_step_latency(decode, context, 2)) / 1000.0
        prefix = kv_tokens if decode == 0 else 0
        isl = prefix + prefill
        # mixed_step_breakdown: (total, non-attention ops over all the step's tokens, context attention of
        # an isl-token prompt with `prefix` cached divided by its ceil(isl / ctx_tokens) chunks, decode
        # attention at context isl). This step's chunk is one whole chunk of attention, and the decoders
        # attend over their own context, not the chunk's.
        _, shared, chunk_attention, _ = handle.mixed_step_breakdown(prefill, decode, isl, 2, prefix)
        ms = shared + chunk_attention * math.ceil(isl / prefill)
        if decode:
            ms += sum(op[1] for op in handle.decode_step_per_op(decode, context, 2) if op[0] == "generation_attention")
        return float(ms) / 1000.0

    def best_k(self, decode: int, kv_tokens: int, prefill: int = 0) -> int:
        return best_k(self.pool, self.alpha, self.step_time, decode, kv_tokens, prefill)

    def kv_transfer_time(self, tokens: int) -> float:
        return self.roofline.kv_transfer_time(tokens)
