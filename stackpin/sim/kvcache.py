"""What a stack's KV cache holds per token and what an engine step reads of it (stackpin/sim/attention.yaml).

The KV-cache dtype sets the bytes of every stored entry (vLLM 0.31.0 resolves `auto` and `fp8` to the packed
fp8_ds_mla record on FlashMLA backends and to plain rows on FlashInfer's); with DeepSeek's compressed sparse
attention a decode token does not read its whole context: it scores the indexer keys (over the context, or a
candidate set), reads the top-k entries they pick and its sliding window in every layer. A model without an
entry in attention.yaml is read whole, at the catalog's kv_bytes_per_token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.sim.stack import SimPool, SimStack

FACTS_FILE = Path(__file__).with_name("attention.yaml")
SM100 = 10  # compute capability major of the SM100 family (B200, GB200, GB300, Rubin): vLLM's V4.1 record


@cache
def _facts() -> dict[str, Any]:
    from stackpin.yamlio import load_data

    data: dict[str, Any] = load_data(FACTS_FILE.read_text(encoding="utf-8"))["models"]
    return data


def _model_key(stack: SimStack) -> str | None:
    from stackpin.catalog import load_catalog

    found = load_catalog().model_for(stack.model_id)
    return found[0] if found and found[0] in _facts() else None


def resolved_dtype(stack: SimStack) -> str:
    """The KV-cache dtype vLLM stores: `auto`/`fp8` become the packed fp8_ds_mla record on FlashMLA backends
    (the default on SM100), plain rows (bf16 / per-tensor fp8) on FlashInfer's sparse backend."""
    key = _model_key(stack)
    dtype = stack.kv_cache_dtype
    if key is None:
        return dtype
    plain = stack.attention in _facts()[key]["plain_row_backends"]
    if dtype in ("auto", "bfloat16", "bf16"):
        return "bf16" if plain else "fp8_ds_mla"
    if dtype == "fp8":
        return "fp8" if plain else "fp8_ds_mla"
    return dtype


@dataclass(frozen=True)
class KvLayout:
    """Per-token and per-sequence bytes of one stack's KV cache, and what a step reads of it."""

    sparse: bool
    dtype: str
    stored_per_token: float  # bytes the cache holds per context token (all layers, indexer keys included)
    window_per_seq: float  # the sliding windows' bytes per running sequence (all layers)
    facts: dict[str, Any] | None = None
    record: float = 0.0
    window_token: float = 0.0

    def decode_read(self, context: float, queries: int = 1) -> float:
        """Bytes one sequence's decode step reads at `context` tokens, verifying `queries` tokens (1 + k): the
        whole cache once for a dense model; with sparse attention the indexer keys and the window once, the
        top-k entries each query token selects, and the dense layers' entries once."""
        if not self.sparse or self.facts is None:
            return context * self.stored_per_token
        f = self.facts
        return float(self.indexer_entries(context) * f["indexer_key_bytes"]
                + queries * self.record * sum(n * min(f["topk"], context / r) for r, n in f["selecting"].items())
                + self.record * sum(n * context / r for r, n in f["dense"].items())
                + self.window_token * f["layers"] * min(f["window"], context))

    def indexer_entries(self, context: float) -> float:
        """Indexer keys one token scores at `context` tokens (0 for a dense model)."""
        if not self.sparse or self.facts is None:
            return 0.0
        f = self.facts
        return float(sum(n * context / r for r, n in f["indexer"].items())
                + f["candidate_layers"] * min(f["candidate_entries"], context))

    def indexer_flops(self, context: float) -> float:
        """Indexer FLOPs of one token at `context`: every scored key against every indexer head."""
        if self.facts is None:
            return 0.0
        return float(2.0 * self.facts["index_heads"] * self.facts["index_head_dim"] * self.indexer_entries(context))

    def sequences(self, capacity_bytes: float, context: float) -> int:
        """Sequences of `context` tokens a GPU's KV capacity holds (each with its sliding windows)."""
        return int(capacity_bytes // (context * self.stored_per_token + self.window_per_seq))


def layout(stack: SimStack) -> KvLayout:
    key = _model_key(stack)
    dtype = resolved_dtype(stack)
    if key is None:
        return KvLayout(False, dtype, float(stack.model.kv_bytes_per_token), 0.0)
    f = _facts()[key]
    old = stack.gpu.compute_capability[0] < SM100
    records = {**f["record_bytes"], **(f["record_bytes_before_sm100"] if old else {})}
    windows = {**f["window_bytes"], **(f["window_bytes_before_sm100"] if old else {})}
    if dtype not in records:
        # A dtype vLLM 0.31.0 does not store for this model: the catalog's figure, said so (kv_note).
        return KvLayout(False, dtype, float(stack.model.kv_bytes_per_token), 0.0)
    record, window = float(records[dtype]), float(windows[dtype])
    stored = sum(n / r * record for r, n in f["stored"].items()) + sum(
        n / r * f["indexer_key_bytes"] for r, n in f["indexed"].items())
    return KvLayout(True, dtype, stored, window * f["layers"] * f["window"], f, record, window)


def capacity_bytes(stack: SimStack, pool: SimPool) -> float:
    """One GPU's KV cache in bytes: what its memory leaves after weights and reserve (the catalog's sizing,
    stackpin/profile/sizing.py, which counts it in tokens of the catalog's kv_bytes_per_token)."""
    return float(pool.kv_tokens) * stack.model.kv_bytes_per_token


def max_sequences(stack: SimStack, pool: SimPool, context: float) -> int:
    """Running sequences of `context` tokens one engine's KV cache holds (MLA: every TP rank holds whole
    tokens, so one GPU's capacity is the engine's)."""
    return layout(stack).sequences(capacity_bytes(stack, pool), max(context, 1.0))
