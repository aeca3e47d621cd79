"""The step model's physics terms each change in the direction and by the ratio their source says
(stackpin/sim/attention.yaml, roofline.yaml published_acceptance, sim/curve.py's KV capacity and tool time)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stackpin.sim.curve import Workload, curve, single_agent_tps, workload_of
from stackpin.sim.kvcache import layout, max_sequences, resolved_dtype
from stackpin.sim.roofline import StepModel, accepted_tokens
from stackpin.sim.stack import SimStack, load_stack

ROOT = Path(__file__).resolve().parent.parent
TUNED = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"


def _tuned(**changes: object) -> SimStack:
    return dataclasses.replace(load_stack(TUNED), **changes)  # type: ignore[arg-type]


def test_deepseeks_890_bytes_a_token_is_the_fp4_record_with_an_fp4_indexer_key() -> None:
    """(288 + 68) x (3 ratio-2 sources / 2 + 1 ratio-1 source) = 890: vLLM 0.31.0's NVFP4 record and MXFP4
    indexer key over V4.1's four kv-source layers give DeepSeek's published figure."""
    facts = layout(_tuned(kv_cache_dtype="nvfp4_ds_mla")).facts
    assert facts is not None
    entries = sum(n / r for r, n in facts["stored"].items())
    assert entries == 2.5
    assert (facts["record_bytes"]["nvfp4_ds_mla"] + 68) * entries == 890


@pytest.mark.parametrize(("dtype", "attention", "resolved", "record"), [
    ("fp8_ds_mla", "FLASHMLA_MEGA_ATTN_DSV41", "fp8_ds_mla", 528),
    ("auto", "FLASHMLA_MEGA_ATTN_DSV41", "fp8_ds_mla", 528),  # packed backends resolve auto to the packed record
    ("auto", "FLASHINFER_MLA_SPARSE_DSV41", "bf16", 1024),  # FlashInfer's sparse backend stores plain bf16 rows
    ("fp8", "FLASHINFER_MLA_SPARSE_DSV41", "fp8", 512),
    ("nvfp4_ds_mla", "FLASHMLA_MEGA_ATTN_DSV41", "nvfp4_ds_mla", 288),
])
def test_kv_bytes_a_token_scale_with_the_kv_cache_dtype(dtype: str, attention: str, resolved: str, record: int) -> None:
    stack = _tuned(kv_cache_dtype=dtype, attention=attention)
    assert resolved_dtype(stack) == resolved
    # Every stored entry is one record plus one fp8 indexer key (132 B), 2.5 entries a token.
    assert layout(stack).stored_per_token == pytest.approx((record + 132) * 2.5)


def test_the_fp8_and_bf16_records_are_the_ratios_vllm_gives() -> None:
    """About 1.8x the FP4 record for fp8_ds_mla and 3.6x for bf16 rows (vLLM 0.31.0, SM100), and the KV cache
    holds correspondingly fewer sequences."""
    fp4 = layout(_tuned(kv_cache_dtype="nvfp4_ds_mla"))
    fp8 = layout(_tuned(kv_cache_dtype="fp8_ds_mla"))
    bf16 = layout(_tuned(kv_cache_dtype="auto", attention="FLASHINFER_MLA_SPARSE_DSV41"))
    assert fp8.record / fp4.record == pytest.approx(1.83, abs=0.01)
    assert bf16.record / fp4.record == pytest.approx(3.56, abs=0.01)
    capacity, context = 100 * 2**30, 1_000_000
    assert fp4.sequences(capacity, context) > fp8.sequences(capacity, context) > bf16.sequences(capacity, context)


def test_a_gpu_before_sm100_stores_the_v4_record() -> None:
    from stackpin.catalog import load_catalog

    h200 = _tuned(gpu=load_catalog().gpus["h200"], kv_cache_dtype="fp8_ds_mla")
    assert layout(h200).record == 584 and layout(_tuned(kv_cache_dtype="fp8_ds_mla")).record == 528


def test_a_sparse_decode_reads_indexer_keys_topk_and_window_not_the_whole_cache() -> None:
    kv = layout(_tuned(kv_cache_dtype="fp8_ds_mla"))
    short, long = kv.decode_read(100_000), kv.decode_read(200_000)
    # Past the top-k, the candidate set and the window, only the indexer keys grow with the context:
    # 2.5 keys a context token (3 ratio-2 indexers + 1 ratio-1) of 132 B.
    assert long - short == pytest.approx(100_000 * 2.5 * 132)
    # Mostly the indexer keys (66 MB at 200K), far from the 330 MB the whole cache holds.
    assert long < 0.3 * 200_000 * kv.stored_per_token
    # Each verified token selects its own top-k; the keys and the window are read once a sequence.
    facts = kv.facts
    assert facts is not None
    selected = kv.record * sum(n * min(facts["topk"], 100_000 / r) for r, n in facts["selecting"].items())
    assert kv.decode_read(100_000, 6) - short == pytest.approx(5 * selected)


def test_a_model_without_sparse_facts_reads_its_whole_cache() -> None:
    stack = _tuned(model_id="deepseek-ai/DeepSeek-V4-Pro")
    from stackpin.catalog import load_catalog

    found = load_catalog().model_for("deepseek-ai/DeepSeek-V4-Pro")
    assert found is not None
    stack = dataclasses.replace(stack, model=found[1])
    kv = layout(stack)
    assert not kv.sparse and kv.decode_read(10_000) == 10_000 * found[1].kv_bytes_per_token


def test_published_dspark_acceptance_gives_v41s_mean_length() -> None:
    """The V4.1 DSpark golden acceptance length 3.51 at five drafts (vLLM's recipe), measured with probabilistic
    drafts and block rejection: a stack sampling so gets exactly that, one that does not moves by the bonuses."""
    pool = dataclasses.replace(load_stack(TUNED).decode, adaptive=False)
    model = StepModel.of(load_stack(TUNED), pool)
    assert accepted_tokens(model.alpha, 5) == pytest.approx(3.51, abs=0.005)
    greedy = StepModel.of(load_stack(TUNED), dataclasses.replace(pool, draft_sample="greedy", rejection="standard"))
    assert accepted_tokens(greedy.alpha, 5) < accepted_tokens(model.alpha, 5)


def test_measured_acceptance_overrides_the_models() -> None:
    stack = load_stack(TUNED)
    own = StepModel.of(stack, stack.decode).alpha
    assert curve(stack, acceptance=own) == curve(stack)
    low = (0.4, 0.3, 0.2, 0.1, 0.05)
    assert single_agent_tps(stack, acceptance=low) < 0.7 * single_agent_tps(stack)
    assert StepModel.of(stack, stack.decode, acceptance=low).alpha == low


def test_the_curve_ends_where_the_kv_cache_fills() -> None:
    # bf16 rows (FlashInfer's sparse backend): 2,890 B a token, 2.9 GB a 1M-token sequence.
    stack = _tuned(kv_cache_dtype="auto", attention="FLASHINFER_MLA_SPARSE_DSV41")
    long = Workload(context=1_000_000, prefill=2000, output=500)
    fits = max_sequences(stack, stack.decode, long.context)
    assert 0 < fits < stack.decode.max_num_seqs
    assert len(curve(stack, long)) == fits
    # The packed fp8 record holds 1.75x as many (within 3%: the windows' bytes differ too); the default workload
    # fits all 64 either way.
    packed = max_sequences(load_stack(TUNED), stack.decode, long.context)
    assert packed == pytest.approx(fits * 2890 / 1650, rel=0.03)
    assert len(curve(stack)) == stack.decode.max_num_seqs


def test_an_agent_is_counted_through_its_tool_time() -> None:
    """AgentPerf counts an agent while its tools run; the curve's `agents` does the same by Little's law:
    running x (TTFT + decode + tool) / decode, so tool time adds running x tool / decode agents."""
    stack = load_stack(TUNED)
    busy = Workload(context=20_000, prefill=2000, output=500, tool_s=0.0)
    idle = dataclasses.replace(busy, tool_s=5.0)
    for a, b in zip(curve(stack, busy), curve(stack, idle), strict=True):
        assert a.running == b.running == a.batch * stack.decode.engines
        decode_s = busy.output / a.agent_tps
        assert b.agents - a.agents == pytest.approx(a.running * 5.0 / decode_s, abs=1)
        assert a.agents >= a.running


def test_a_traces_tool_time_is_its_mean_delay() -> None:
    from stackpin.bench.trace import TraceTurn

    turns = [TraceTurn(session_id="a", input_length=1000, output_length=100, delay=0),
             TraceTurn(session_id="a", input_length=500, output_length=100, delay=3000)]
    assert workload_of(turns).tool_s == 1.5


def test_a_replicas_dp_ranks_wait_for_each_others_prefill() -> None:
    """vLLM steps a MoE replica's DP ranks together (Dynamo's mocker too: a group barrier each step), so a
    step takes the slowest rank's time: any other rank's prefill chunk stalls every rank's decode. A rank
    alone gets no such stall (the curve's first point charges its own turn's prefill to TTFT only)."""
    from stackpin.sim.curve import prefill_stall
    from stackpin.sim.models import step_model

    one = load_stack(TUNED)
    pool = one.decode
    eight = dataclasses.replace(one, pools=(dataclasses.replace(pool, engines=pool.replicas * 8),))
    chatty = Workload(context=1200, prefill=300, output=30)  # short answers: a new turn's prefill every few steps
    alone, grouped = curve(one, chatty)[0], curve(eight, chatty)[0]
    assert alone.batch == grouped.batch == 1
    dec = step_model("roofline", eight, eight.decode, None)
    kv = int(chatty.context)
    step = dec.step_time(1, grouped.k, kv)
    extra = dec.step_time(1, grouped.k, kv, int(chatty.prefill)) - step
    a = accepted_tokens(dec.alpha, grouped.k)
    rank = a / chatty.output  # prefill chunks one rank's turns bring a step (one chunk a turn here)
    stalled = 1 - (1 - rank) ** 7  # a step in which any of the 7 other ranks prefills
    assert grouped.agent_tps == pytest.approx(a / (step + stalled * extra), rel=1e-9)
    assert grouped.agent_tps < 0.7 * alone.agent_tps
    # One rank a replica: exactly the engine's own prefills, as before.
    assert prefill_stall(0.3, 0.3, 1) == 0.3
    assert prefill_stall(0.0, 0.3, 1) == 0.0
