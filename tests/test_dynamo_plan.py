"""The Dynamo bed's plan (stackpin/sim/dynamo.py): which mocker and frontend options serve a locked
stack, and the timing table the mocker follows. Pure: no Dynamo process runs here (test_dynamo_bed.py
runs them)."""

from __future__ import annotations

import json

import pytest

from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.sim.dynamo import plan, tokenizer_json
from stackpin.sim.models import step_model
from stackpin.sim.roofline import accepted_tokens
from stackpin.sim.stack import sim_stack
from tests.lockkit import shipped_locks

LOCKS = shipped_locks()


def _opt(args: tuple[str, ...], option: str) -> str:
    return args[args.index(option) + 1]


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_pool_is_one_mocker_shaped_like_the_lock(name: str) -> None:
    lock: StackLock = LOCKS[name]
    stack = sim_stack(lock)
    bed = plan(lock)
    assert [m.role for m in bed.mockers] == [str(p.role) for p in stack.pools]
    kv = lock.stack_profile.spec.kv_cache
    for mocker, pool in zip(bed.mockers, stack.pools, strict=True):
        args = mocker.args
        assert _opt(args, "--model-name") == lock.resolved.model.id
        assert int(_opt(args, "--num-workers")) == pool.replicas
        assert int(_opt(args, "--data-parallel-size")) * pool.replicas == pool.engines
        assert int(_opt(args, "--max-num-seqs")) == pool.max_num_seqs
        assert int(_opt(args, "--max-num-batched-tokens")) == pool.max_batched_tokens
        block = int(_opt(args, "--block-size"))
        assert block == (kv.block_size or 64)
        assert int(_opt(args, "--num-gpu-blocks-override")) == pool.kv_tokens // block
        assert int(_opt(args, "--max-model-len")) == lock.stack_profile.spec.model.max_model_len
        assert ("--enable-prefix-caching" if kv.prefix_caching else "--no-enable-prefix-caching") in args
        if stack.colocated:
            assert "--disaggregation-mode" not in args
        else:
            assert _opt(args, "--disaggregation-mode") == str(pool.role)
            assert float(_opt(args, "--kv-transfer-bandwidth")) > 0
    placement = lock.stack_profile.spec.placement
    assert _opt(bed.frontend_args, "--router-mode") == placement.router.value
    assert int(_opt(bed.frontend_args, "--migration-limit")) == placement.migration_limit
    assert "--http-port" not in bed.frontend_args  # the bed picks its own loopback port


def test_a_share_serves_that_part_of_every_pool_and_says_so() -> None:
    lock = LOCKS["gb300-disagg-wide-ep"]
    whole, third = plan(lock), None
    for share in (2, 3, 4, 6):
        try:
            third = plan(lock, share=share)
            break
        except StackpinError:
            continue
    assert third is not None
    for a, b in zip(whole.mockers, third.mockers, strict=True):
        assert int(_opt(a.args, "--num-workers")) == share * int(_opt(b.args, "--num-workers"))
    assert third.stack_gpus == whole.stack.gpus and third.stack.gpus * share == whole.stack.gpus
    assert any("per served GPU" in s for s in third.substitutions)
    with pytest.raises(StackpinError, match="--share 7: must divide"):
        plan(lock, share=7)


def test_the_table_is_the_step_models_time_per_token() -> None:
    """Decode: time per accepted token for the batch active KV / context gives; prefill: one step's time."""
    lock = LOCKS["gb300-tuned"]
    stack = sim_stack(lock)
    pool = stack.pools[0]
    model = step_model("roofline", stack, pool)
    table = plan(lock).mockers[0].table
    for i, active in enumerate(table.decode_active_kv_tokens):
        for j, context in enumerate(table.decode_context_length):
            batch = min(max(1, round(active / context)), pool.max_num_seqs)
            k = model.best_k(batch, int(active))
            want = model.step_time(batch, k, int(active)) / accepted_tokens(model.alpha, k) * 1000
            assert table.decode_itl[i][j] == pytest.approx(want, rel=1e-6)
    assert list(table.prefill_isl) == sorted(set(table.prefill_isl))
    assert table.prefill_isl[-1] == pool.max_batched_tokens
    assert table.prefill_ttft_ms[-1] == pytest.approx(model.step_time(0, 0, 0, pool.max_batched_tokens) * 1000)
    # A longer prefill step takes longer; a speculative stack's single sequence beats its plain step time.
    assert list(table.prefill_ttft_ms) == sorted(table.prefill_ttft_ms)
    assert table.decode_itl[0][0] < model.step_time(1, 0, 1) * 1000


def test_speed_is_stated_where_it_distorts() -> None:
    bed = plan(LOCKS["gb300-tuned"], speed=4)
    assert _opt(bed.mockers[0].args, "--speedup-ratio") == "4.0"
    assert any("frontend's own time" in s for s in bed.substitutions)
    assert not any("frontend's own time" in s for s in plan(LOCKS["gb300-tuned"]).substitutions)


def test_the_stand_in_tokenizer_counts_one_token_a_word() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(json.dumps(tokenizer_json(1000)))
    text = " ".join(f"w{i}" for i in range(0, 1000, 7))
    assert len(tokenizer.encode(text, add_special_tokens=False).ids) == len(range(0, 1000, 7))
    assert tokenizer.encode("w5 w5 w6", add_special_tokens=False).ids == [8, 8, 9]
    assert len(tokenizer.encode("b17_3 unknown", add_special_tokens=False).ids) == 2  # <unk> each


def test_what_no_step_model_times_is_said_in_every_answer() -> None:
    """The A100 self-host profile emulates FP8/FP4 and keeps 8 GiB of weights in CPU memory: neither step
    model times that, so the simulator, its curve and the bed say so instead of answering as if."""
    from pathlib import Path

    from stackpin.profile.loader import load_profile
    from stackpin.sim.models import substitutions
    from stackpin.sim.stack import profile_stack

    profile = load_profile(Path(__file__).parent / "data" / "profiles" / "a100-8x-selfhost.yaml").profile
    stack = profile_stack(profile, "a100-8x-selfhost")
    said = substitutions("roofline", stack)
    assert any("precision emulation (fp8, fp4 on A100 SXM 80GB) is not modelled" in s for s in said)
    assert any("CPU offload of 8 GiB of weights is not modelled" in s for s in said)
    assert substitutions("roofline", sim_stack(LOCKS["gb300-tuned"])) == []  # a stack it times whole
