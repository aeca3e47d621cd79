"""The roofline step-time model: how long one engine step of a locked stack takes.

A step runs `decode` sequences, each verifying 1 + k tokens (k speculative), plus `prefill` new
prompt tokens (chunked prefill, colocated stacks). Its time is a fixed cost that depends on whether a
CUDA graph covers the step, plus the kernels' time: the larger of compute (2 x active parameters per
token, plus the sparse-attention indexer's scoring) and memory traffic (the weights the step's tokens
route to, plus the KV the running sequences read: with DeepSeek's sparse attention the indexer keys, the
top-k entries and the window, at the bytes the KV-cache dtype stores, sim/kvcache.py), each divided by the
efficiency of the kernels and autotuning the stack chose. Draft acceptance is per position: measured
(`acceptance=`), else published for the model (roofline.yaml `published_acceptance`), else a fitted rate
falling with position. Parameters: roofline.yaml; hardware from the catalog.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.sim.kvcache import KvLayout, layout
from stackpin.sim.stack import SimPool, SimStack

PARAMS_FILE = Path(__file__).with_name("roofline.yaml")
GIB = 1024**3


@cache
def load_params(path: Path = PARAMS_FILE) -> dict[str, Any]:
    from stackpin.yamlio import load_data

    data: dict[str, Any] = load_data(path.read_text(encoding="utf-8"))
    return data


def _lookup(table: dict[str, float], key: str) -> float:
    return float(table[key] if key in table else table["default"])


Rates = tuple[float, ...]  # conditional acceptance per draft position: P(i accepted | 1..i-1 accepted)


def _bonus(fitted: dict[str, Any], rejection: str | None, draft_sample: str | None) -> float:
    bonus = float(fitted["rejection_bonus"].get(rejection or "standard", 0.0))
    return bonus + (float(fitted["probabilistic_bonus"]) if draft_sample == "probabilistic" else 0.0)


def acceptance_rate(pool: SimPool, fitted: dict[str, Any]) -> float:
    """First-position acceptance of the pool's speculative settings from the fitted table (no published figure)."""
    if not pool.spec_method:
        return 0.0
    alpha = _lookup(fitted["acceptance"], pool.spec_method) + _bonus(fitted, pool.rejection, pool.draft_sample)
    return min(alpha, 0.99)


@cache
def acceptance_decay() -> float:
    """How a draft's acceptance falls with its position (roofline.yaml `acceptance_decay`, with its source)."""
    return float(load_params()["acceptance_decay"]["value"])


def decayed(alpha: float, k: int) -> Rates:
    """Per-position rates of a drafter whose first draft is accepted with `alpha`, each later one with the rate
    before it x acceptance_decay()."""
    return tuple(alpha * acceptance_decay() ** i for i in range(k)) if alpha > 0 else ()


def accepted_tokens(acceptance: float | Rates, k: int) -> float:
    """Expected tokens a step gives a sequence: the bonus token, plus draft i (1..k) when it and every draft
    before it are accepted. `acceptance` is the per-position rates (positions past the last take its rate x
    acceptance_decay() each), or a first-position rate for decayed()."""
    rates = decayed(acceptance, k) if isinstance(acceptance, (int, float)) else tuple(acceptance)
    if k == 0 or not rates or rates[0] <= 0:
        return 1.0
    total = reached = 1.0
    rate = rates[0]
    for i in range(k):
        rate = rates[i] if i < len(rates) else rate * acceptance_decay()
        reached *= rate
        total += reached
    return total


def _solve_alpha(mean_length: float, k: int) -> float:
    """The first-position rate whose decayed() rates give `mean_length` tokens a step at `k` drafts."""
    low, high = 0.0, 0.999
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if accepted_tokens(mid, k) < mean_length else (low, mid)
    return (low + high) / 2


def published(stack: SimStack, method: str | None) -> dict[str, Any] | None:
    """roofline.yaml's published acceptance for the stack's model and speculative method, if any."""
    from stackpin.catalog import load_catalog

    if not method:
        return None
    found = load_catalog().model_for(stack.model_id)
    table = load_params().get("published_acceptance") or {}
    entry: dict[str, Any] | None = table.get(found[0], {}).get(method) if found else None
    return entry


def acceptance_rates(stack: SimStack, pool: SimPool, fitted: dict[str, Any]) -> Rates:
    """Per-position rates for the pool's drafts: the model's published acceptance (its rates, or the decayed
    rates that give its published mean length), moved by the fitted bonuses where the pool samples or rejects
    unlike the published measurement; else the fitted table's first rate, decayed."""
    k = pool.spec_k if pool.spec_method else 0
    if not k:
        return ()
    entry = published(stack, pool.spec_method)
    if entry is None:
        return decayed(acceptance_rate(pool, fitted), k)
    rates: Rates = tuple(float(r) for r in entry["rates"]) if entry.get("rates") else decayed(
        _solve_alpha(float(entry["mean_length"]), int(entry["num_tokens"])), int(entry["num_tokens"]))
    shift = _bonus(fitted, pool.rejection, pool.draft_sample) - _bonus(fitted, entry.get("rejection"),
                                                                        entry.get("draft_sample"))
    return tuple(min(max(r + shift, 0.0), 0.99) for r in rates)


@dataclass(frozen=True)
class _Rates:
    """A model's parameters resolved for one stack and pool: what step_time reads every step."""

    graph_s: float
    piecewise_s: float
    eager_s: float
    weights_bw: float  # bytes/s one GPU reads weights at (bandwidth x efficiency x MoE kernel factor)
    kv_bw: float  # bytes/s one GPU reads KV at (x attention kernel factor)
    always_gib: float  # always-active weights one GPU reads per step
    experts_gib: float  # routed experts one GPU holds
    picked: float  # share of experts one token picks
    compute_flops: float  # FLOP/s one engine's GPUs reach, all together
    comm_s_per_token: float
    autotune: float
    draft_s: float
    seq_s: float


@dataclass(frozen=True)
class StepModel:
    """Step times for one pool of one stack (an engine: one data-parallel rank of a replica). `acceptance`:
    measured per-position rates that replace the model's (a bench result's, stackpin.bench.acceptance)."""

    stack: SimStack
    pool: SimPool
    params: dict[str, Any]
    acceptance: Rates | None = None
    alpha: Rates = field(init=False)  # per-position acceptance the model uses (accepted_tokens reads it)
    rates: _Rates = field(init=False, repr=False)
    kv: KvLayout = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Resolved once: the server calls step_time several times an engine step.
        f = self.params["fitted"]
        stack, model, pool = self.stack, self.stack.model, self.pool
        assert model.experts is not None  # profile_stack refuses a model without its routing
        experts_gib = model.checkpoint_gib * model.routed_expert_share
        picked = model.experts.per_token / model.experts.routed
        # The decode active parameters less the routed experts one token picks are read every step.
        always_gib = max(model.active_params_b.decode * model.checkpoint_gib / model.params_b - experts_gib * picked, 0)
        bw = stack.gpu.hbm_tbps * 1e12 * float(f["bw_efficiency"])
        fabric = stack.gpu.scaleup_gbps * 1e9
        measured = tuple(self.acceptance) if self.acceptance is not None and pool.spec_method else None
        object.__setattr__(self, "alpha", measured if measured is not None else acceptance_rates(stack, pool, f))
        object.__setattr__(self, "kv", layout(stack))
        object.__setattr__(self, "rates", _Rates(
            graph_s=float(f["graph_step_s"]), piecewise_s=float(f["piecewise_step_s"]),
            eager_s=float(f["eager_step_s"]), weights_bw=bw * _lookup(f["moe"], stack.moe),
            kv_bw=bw * _lookup(f["attention"], stack.attention), always_gib=always_gib / pool.model_parallel,
            experts_gib=experts_gib / pool.expert_shards, picked=picked,
            compute_flops=self._flops_per_gpu() * float(f["mfu"]) * pool.gpus_per_engine,
            # Expert-parallel dispatch/combine and tensor-parallel reductions move every token's hidden
            # states over the scale-up fabric each layer.
            comm_s_per_token=float(f["comm_bytes_per_token"]) / fabric if pool.gpus_per_engine > 1 else 0.0,
            autotune=_lookup(f["autotune"], stack.autotune), draft_s=float(f["draft_token_s"]),
            seq_s=float(f["seq_step_s"])))

    @classmethod
    def of(cls, stack: SimStack, pool: SimPool, params: dict[str, Any] | None = None,
           acceptance: Rates | None = None) -> StepModel:
        return cls(stack, pool, params or load_params(), acceptance)

    @property
    def fitted(self) -> dict[str, Any]:
        fitted: dict[str, Any] = self.params["fitted"]
        return fitted

    def _flops_per_gpu(self) -> float:
        """Peak dense FLOP/s in the precision the dense weights are served in (FP8 for fp8-fp4)."""
        weights = self.stack.precision
        served = "fp8" if "fp8" in weights else ("fp4" if "fp4" in weights else "bf16")
        return self.stack.gpu.peak_tflops(served) * 1e12

    def weights_read_gib(self, tokens: int) -> float:
        """Weight GiB one GPU reads in a step of `tokens` tokens: the always-active weights, plus every
        routed expert at least one token picks: 1 - (1 - top_k / experts)^tokens of them, for
        independent routing."""
        r = self.rates
        return r.always_gib + r.experts_gib * (1 - (1 - r.picked) ** tokens)

    def step_time(self, decode: int, k: int, kv_tokens: int, prefill: int = 0) -> float:
        """Seconds for one step: `decode` sequences verifying 1 + k tokens each over `kv_tokens` of
        context in all, plus `prefill` new prompt tokens."""
        r = self.rates
        stack, model = self.stack, self.stack.model
        tokens = decode * (1 + k) + prefill
        if tokens == 0:
            return 0.0
        sizes = stack.capture_sizes
        if prefill == 0 and stack.full_decode_graphs and sizes and tokens <= sizes[-1]:
            overhead = r.graph_s
            tokens = sizes[bisect.bisect_left(sizes, tokens)]  # padded to the captured size
        elif stack.piecewise_graphs and sizes:
            overhead = r.piecewise_s
        else:
            overhead = r.eager_s
        weights_s = self.weights_read_gib(tokens) * GIB / r.weights_bw
        # MLA keeps one latent KV head replicated on every TP rank: each GPU reads its engine's whole KV (the
        # indexer keys too). A decode token reads what its context's sparse attention selects (sim/kvcache.py);
        # a prefill chunk reads its prefix once and writes its own entries.
        context = kv_tokens / decode if decode else float(kv_tokens)
        kv = self.kv
        kv_bytes = decode * kv.decode_read(context, 1 + k) if decode else 0.0
        if prefill:
            kv_bytes += (context + prefill) * kv.stored_per_token
        kv_s = kv_bytes / r.kv_bw
        active = model.active_params_b.prefill if prefill else model.active_params_b.decode
        # The indexer scores every key it reads against each of its heads, for every token of the step.
        indexer = decode * (1 + k) * kv.indexer_flops(context) + prefill * kv.indexer_flops(context + prefill / 2)
        compute_s = (2e9 * active * tokens + indexer) / r.compute_flops
        kernels = (max(compute_s, weights_s + kv_s) + tokens * r.comm_s_per_token) / r.autotune
        draft = k * r.draft_s if decode else 0.0
        # Per running sequence: scheduling, sampling and rejection sampling, on the host, unchanged by
        # a faster GPU.
        return overhead + kernels + draft + decode * r.seq_s

    def best_k(self, decode: int, kv_tokens: int, prefill: int = 0) -> int:
        return best_k(self.pool, self.alpha, self.step_time, decode, kv_tokens, prefill)

    def kv_transfer_time(self, tokens: int) -> float:
        """Prefill -> decode KV transfer of `tokens` over the scale-up fabric (disaggregated stacks)."""
        f = self.fitted
        bw = self.stack.gpu.scaleup_gbps * 1e9 * float(f["kv_transfer_efficiency"])
        return float(f["kv_transfer_latency_s"]) + (tokens * self.kv.stored_per_token + self.kv.window_per_seq) / bw


def best_k(pool: SimPool, alpha: float | Rates, step_time: Callable[[int, int, int, int], float], decode: int,
           kv_tokens: int, prefill: int = 0) -> int:
    """Speculative tokens a step verifies: the configured k, or with adaptive verification the k that
    gives the most tokens per second at this batch (every step model chooses the same way)."""
    k = pool.spec_k
    if not pool.adaptive or k == 0 or decode == 0:
        return k
    return max(range(1, k + 1), key=lambda j: accepted_tokens(alpha, j) / step_time(decode, j, kv_tokens, prefill))
