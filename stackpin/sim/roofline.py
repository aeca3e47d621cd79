"""The roofline step-time model: how long one engine step of a locked stack takes.

A step runs `decode` sequences, each verifying 1 + k tokens (k speculative), plus `prefill` new
prompt tokens (chunked prefill, colocated stacks). Its time is a fixed cost that depends on whether a
CUDA graph covers the step, plus the kernels' time: the larger of compute (2 x active parameters per
token, prefill-bound) and memory traffic (the weights the step's tokens route to, plus every running
sequence's KV, decode-bound), each divided by the efficiency of the kernels and autotuning the stack
chose. Parameters: roofline.yaml; hardware from the catalog.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.sim.stack import SimPool, SimStack

PARAMS_FILE = Path(__file__).with_name("roofline.yaml")
GIB = 1024**3


@cache
def load_params(path: Path = PARAMS_FILE) -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def _lookup(table: dict[str, float], key: str) -> float:
    return float(table[key] if key in table else table["default"])


def acceptance_rate(pool: SimPool, fitted: dict[str, Any]) -> float:
    """Per-draft-token acceptance of the pool's speculative settings."""
    if not pool.spec_method:
        return 0.0
    alpha = _lookup(fitted["acceptance"], pool.spec_method)
    alpha += float(fitted["rejection_bonus"].get(pool.rejection, 0.0))
    if pool.draft_sample == "probabilistic":
        alpha += float(fitted["probabilistic_bonus"])
    return min(alpha, 0.99)


def accepted_tokens(alpha: float, k: int) -> float:
    """Expected tokens a step gives a sequence: accepted drafts plus the bonus token."""
    if k == 0 or alpha <= 0:
        return 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass(frozen=True)
class StepModel:
    """Step times for one pool of one stack (an engine: one data-parallel rank of a replica)."""

    stack: SimStack
    pool: SimPool
    params: dict[str, Any]

    @classmethod
    def of(cls, stack: SimStack, pool: SimPool, params: dict[str, Any] | None = None) -> StepModel:
        return cls(stack, pool, params or load_params())

    # Derived constants, computed once per model (dataclass is frozen: cache through properties).
    @property
    def fitted(self) -> dict[str, Any]:
        fitted: dict[str, Any] = self.params["fitted"]
        return fitted

    @property
    def alpha(self) -> float:
        return acceptance_rate(self.pool, self.fitted)

    def _flops_per_gpu(self) -> float:
        table = self.params["compute_tflops"][self.stack.gpu_key]
        precisions = [p for p in ("fp4", "fp8", "bf16") if p in table]
        served = "fp8" if "fp8" in self.stack.precision else ("fp4" if "fp4" in self.stack.precision else "bf16")
        rate = table.get(served, table[precisions[-1]]) if served in table else table[precisions[-1]]
        return float(rate) * 1e12

    def weights_read_gib(self, tokens: int) -> float:
        """Weight GiB one GPU reads in a step of `tokens` tokens: the always-active weights (the decode
        active parameters less the routed experts one token picks), plus every routed expert at least
        one of the tokens picks: 1 - (1 - top_k / experts)^tokens of them, for independent routing."""
        model, pool = self.stack.model, self.pool
        routing = self.params["experts"]
        experts_gib = model.checkpoint_gib * model.routed_expert_share
        gib_per_param_b = model.checkpoint_gib / model.params_b
        picked = float(routing["top_k"]) / float(routing["routed"])
        always_gib = max(model.active_params_b.decode * gib_per_param_b - experts_gib * picked, 0.0)
        touched = 1 - (1 - picked) ** tokens
        return always_gib / pool.model_parallel + experts_gib / pool.expert_shards * touched

    def step_time(self, decode: int, k: int, kv_tokens: int, prefill: int = 0) -> float:
        """Seconds for one step: `decode` sequences verifying 1 + k tokens each over `kv_tokens` of
        context in all, plus `prefill` new prompt tokens."""
        f = self.fitted
        stack, model = self.stack, self.stack.model
        tokens = decode * (1 + k) + prefill
        if tokens == 0:
            return 0.0
        sizes = stack.capture_sizes
        if prefill == 0 and stack.full_decode_graphs and sizes and tokens <= sizes[-1]:
            overhead = float(f["graph_step_s"])
            tokens = sizes[bisect.bisect_left(sizes, tokens)]  # padded to the captured size
        elif stack.piecewise_graphs and sizes:
            overhead = float(f["piecewise_step_s"])
        else:
            overhead = float(f["eager_step_s"])
        gpu_bw = stack.gpu.hbm_tbps * 1e12 * float(f["bw_efficiency"])
        weights_s = self.weights_read_gib(tokens) * GIB / gpu_bw / _lookup(f["moe"], stack.moe)
        # MLA keeps one latent KV head replicated on every TP rank: each GPU reads its engine's whole KV.
        kv_s = (kv_tokens + prefill) * model.kv_bytes_per_token / gpu_bw / _lookup(f["attention"], stack.attention)
        active = model.active_params_b.prefill if prefill else model.active_params_b.decode
        compute_s = 2 * active * 1e9 * tokens / self.pool.gpus_per_engine / (self._flops_per_gpu() * float(f["mfu"]))
        # Expert-parallel dispatch/combine and tensor-parallel reductions move every token's hidden
        # states over the scale-up fabric each layer: bytes per token, at the fabric's bandwidth.
        comm_s = tokens * float(f["comm_bytes_per_token"]) / (stack.gpu.scaleup_gbps * 1e9) \
            if self.pool.gpus_per_engine > 1 else 0.0
        kernels = (max(compute_s, weights_s + kv_s) + comm_s) / _lookup(f["autotune"], stack.autotune)
        draft = k * float(f["draft_token_s"]) if decode else 0.0
        # Per running sequence: scheduling, sampling and rejection sampling, host-side and unchanged by a
        # faster GPU.
        host = decode * float(f["seq_step_s"])
        return overhead + kernels + draft + host

    def best_k(self, decode: int, kv_tokens: int, prefill: int = 0) -> int:
        """Speculative tokens a step verifies: the configured k, or with adaptive verification the k
        that gives the most tokens per second at this batch."""
        k = self.pool.spec_k
        if not self.pool.adaptive or k == 0 or decode == 0:
            return k
        return max(range(1, k + 1), key=lambda j: accepted_tokens(self.alpha, j) / self.step_time(
            decode, j, kv_tokens, prefill))

    def kv_transfer_time(self, tokens: int) -> float:
        """Prefill -> decode KV transfer of `tokens` over the scale-up fabric (disaggregated stacks)."""
        f = self.fitted
        bw = self.stack.gpu.scaleup_gbps * 1e9 * float(f["kv_transfer_efficiency"])
        return float(f["kv_transfer_latency_s"]) + tokens * self.stack.model.kv_bytes_per_token / bw
