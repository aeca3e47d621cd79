"""The Dynamo bed's plan: which of NVIDIA Dynamo's own processes serve a locked stack, with which
options, and the step-time tables that make its mocker follow stackpin's step model.

One mocker process per pool (`--num-workers` = the pool's replicas, `--data-parallel-size` its DP
ranks), shaped like the lock: max-num-seqs, the batched-token budget, block size, KV blocks from the
stack's KV budget, prefix caching, and `--disaggregation-mode prefill|decode` on a disaggregated
stack. The frontend gets the lock's own frontend flags (router mode, migration limit, the profile's
frontendArgs). Timing is the mocker's `--planner-profile-data` table, filled from the step model:
prefill milliseconds over a step's new tokens, and decode milliseconds per token over (active KV
tokens x context length); a speculative stack's steps are charged per accepted token, since the
mocker emits one token a step. The mocker floors a decode step at 1 ms (dynamo.yaml): a stack that
decodes faster is served slower than its lock, and the plan says by how much (`Floored`). Pure: nothing
here starts a process (stackpin.sim.dynamo_bed does).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.lock.lockfile import StackLock
from stackpin.sim.models import StepTimes, step_model
from stackpin.sim.roofline import accepted_tokens
from stackpin.sim.stack import SimPool, SimStack, share_of, sim_stack
from stackpin.yamlio import load_data

FACTS = Path(__file__).with_name("dynamo.yaml")


@cache
def facts() -> dict[str, Any]:
    data: dict[str, Any] = load_data(FACTS.read_text(encoding="utf-8"))
    return data


@dataclass(frozen=True)
class Table:
    """The mocker's --planner-profile-data (an .npz with these five keys); times in milliseconds."""

    prefill_isl: tuple[float, ...]
    prefill_ttft_ms: tuple[float, ...]
    decode_active_kv_tokens: tuple[float, ...]
    decode_context_length: tuple[float, ...]
    decode_itl: tuple[tuple[float, ...], ...]  # [active KV index][context index]

    def as_json(self) -> dict[str, Any]:
        return {"prefill_isl": list(self.prefill_isl), "prefill_ttft_ms": list(self.prefill_ttft_ms),
                "decode_active_kv_tokens": list(self.decode_active_kv_tokens),
                "decode_context_length": list(self.decode_context_length),
                "decode_itl": [list(row) for row in self.decode_itl]}


@dataclass(frozen=True)
class Mocker:
    """One `python -m dynamo.mocker` process: a pool's replicas."""

    role: str  # worker (colocated), prefill or decode
    workers: int  # the pool's replicas: --num-workers
    args: tuple[str, ...]  # without --model-path, --planner-profile-data and --discovery-backend
    table: Table


@dataclass(frozen=True)
class Floored:
    """A pool whose step model decodes faster than the mocker's floor on some of its grid: the bed serves
    those steps at the floor, so its per-token speed there is the stack's times fastest_ms / floor_ms."""

    role: str
    fastest_ms: float  # the step model's fastest decode step on the grid, per token
    floor_ms: float
    slower: tuple[tuple[int, float], ...]  # (batch, per-token speed lost on the bed) where a step is under the floor

    def describe(self, version: str) -> str:
        batch = max(self.slower, key=lambda item: item[1])[0]
        each = ", ".join(f"batch {b} ~{loss:.0%}" for b, loss in self.slower if round(loss, 2))
        lost = 1 - self.fastest_ms / self.floor_ms
        return (f"Dynamo {version}'s mocker floors a decode step at {self.floor_ms:g} ms "
                f"(lib/mocker/src/common/perf_model.rs): the step model's fastest for the {self.role} pool is "
                f"{self.fastest_ms:.3f} ms per token (batch {batch}), so the bed decodes up to ~{lost:.0%} slower "
                f"per token than the stack ({each})")


@dataclass(frozen=True)
class BedPlan:
    stack: SimStack  # the share served
    stack_gpus: int  # the whole stack's
    model_id: str
    max_model_len: int
    frontend_args: tuple[str, ...]  # without --http-host, --http-port and --discovery-backend
    mockers: tuple[Mocker, ...]
    substitutions: tuple[str, ...]
    floored: tuple[Floored, ...] = ()  # pools the mocker's decode floor slows (also among the substitutions)


def _geometric(low: float, high: float, points: int) -> tuple[float, ...]:
    """`points` values from low to high, evenly spaced in log, as whole numbers, ascending and distinct."""
    if high <= low:
        return (float(low),)
    ratio = (high / low) ** (1 / (points - 1))
    values = sorted({float(round(low * ratio ** i)) for i in range(points)} | {float(low), float(high)})
    return tuple(values)


def _batch(active: float, length: float, pool: SimPool) -> int:
    """The batch a decode step of `active` KV tokens at mean context `length` stands for."""
    return int(min(max(1, round(active / length)), pool.max_num_seqs))


def table(model: StepTimes, pool: SimPool, max_model_len: int) -> Table:
    """The step model's times on the grid the mocker interpolates."""
    isl = _geometric(1, max(pool.max_batched_tokens, 2), 40)
    prefill = tuple(round(model.step_time(0, 0, 0, int(t)) * 1000, 6) for t in isl)
    kv = _geometric(1, max(pool.kv_tokens, 2), 28)
    context = _geometric(1, max(max_model_len, 2), 24)
    rows: list[tuple[float, ...]] = []
    for active in kv:
        row: list[float] = []
        for length in context:
            batch = _batch(active, length, pool)
            k = model.best_k(batch, int(active))
            per_token = model.step_time(batch, k, int(active)) / accepted_tokens(model.alpha, k)
            row.append(round(per_token * 1000, 6))
        rows.append(tuple(row))
    return Table(isl, prefill, kv, context, tuple(rows))


def floored(role: str, grid: Table, pool: SimPool, floor_ms: float) -> Floored | None:
    """Where the table's decode steps fall under the mocker's floor. The mocker interpolates bilinearly
    between grid points, so no step it takes is faster than the grid's fastest, and the grid's batches
    are the ones it serves those times at."""
    fastest: dict[int, float] = {}
    for active, row in zip(grid.decode_active_kv_tokens, grid.decode_itl, strict=True):
        for length, ms in zip(grid.decode_context_length, row, strict=True):
            batch = _batch(active, length, pool)
            fastest[batch] = min(ms, fastest.get(batch, ms))
    under = tuple((batch, 1 - ms / floor_ms) for batch, ms in sorted(fastest.items()) if ms < floor_ms)
    return Floored(role, min(fastest.values()), floor_ms, under) if under else None


def kv_transfer_gbps(model: StepTimes, kv_bytes_per_token: int) -> float:
    """The step model's prefill -> decode KV bandwidth in GB/s, as --kv-transfer-bandwidth takes it."""
    tokens = 1_000_000
    return round(tokens * kv_bytes_per_token / model.kv_transfer_time(tokens) / 1e9, 3)


def plan(lock: StackLock, share: int = 1, speed: float = 1.0, model_name: str = "roofline") -> BedPlan:
    from stackpin.render.args import flatten, frontend_flags

    whole = sim_stack(lock)
    stack = share_of(whole, share)
    profile = lock.stack_profile
    spec = profile.spec
    bed = facts()["mocker"]
    block = spec.kv_cache.block_size or int(bed["default_block_size"])
    max_model_len = spec.model.max_model_len
    mockers: list[Mocker] = []
    slowed: list[Floored] = []
    for pool in stack.pools:
        model = step_model(model_name, stack, pool)
        dp = pool.engines // pool.replicas
        args = ["--model-name", stack.model_id, "--engine-type", str(bed["engine_type"]),
                "--num-workers", str(pool.replicas), "--data-parallel-size", str(dp),
                "--max-num-seqs", str(pool.max_num_seqs), "--max-num-batched-tokens", str(pool.max_batched_tokens),
                "--block-size", str(block), "--num-gpu-blocks-override", str(max(pool.kv_tokens // block, 1)),
                "--max-model-len", str(max_model_len), "--kv-bytes-per-token", str(stack.model.kv_bytes_per_token),
                "--speedup-ratio", repr(float(speed)),
                "--enable-prefix-caching" if spec.kv_cache.prefix_caching else "--no-enable-prefix-caching"]
        if not stack.colocated:
            args += ["--disaggregation-mode", str(pool.role),
                     "--kv-transfer-bandwidth", repr(kv_transfer_gbps(model, stack.model.kv_bytes_per_token))]
        grid = table(model, pool, max_model_len)
        mockers.append(Mocker(str(pool.role), pool.replicas, tuple(args), grid))
        # A disaggregated stack's prefill pool hands each request on after its first token: no decode step.
        under = floored(str(pool.role), grid, pool, float(bed["decode_floor_ms"])) if pool.role != "prefill" else None
        if under:
            slowed.append(under)
    frontend = [flag for option, value in frontend_flags(profile) if option != "--http-port"
                for flag in flatten([(option, value)])]
    said = substitutions(stack, whole.gpus, model_name, speed, block_defaulted=spec.kv_cache.block_size is None)
    said += [f.describe(str(facts()["version"])) for f in slowed]
    return BedPlan(stack, whole.gpus, stack.model_id, max_model_len, tuple(frontend), tuple(mockers), tuple(said),
                   tuple(slowed))


def substitutions(stack: SimStack, stack_gpus: int, model_name: str, speed: float, *,
                  block_defaulted: bool) -> list[str]:
    """What the bed stands in with, as GET /stackpin/sim states it (and so the bench result)."""
    version = facts()["version"]
    said = [f"NVIDIA Dynamo {version}'s frontend and router in front of its mocker engine (vLLM-like scheduling, "
            f"no model): step times from stackpin's {model_name} step model through --planner-profile-data",
            f"tokenizer: a {facts()['vocabulary']}-word stand-in; prompt tokens are the trace's"]
    said += list(stack.unmodelled)
    spec = [p for p in stack.pools if p.spec_method and p.spec_k]
    if spec:
        p = spec[0]
        said.append(f"speculative decoding ({p.spec_method}, k={p.spec_k}): one token per mocker step, at the step "
                    "model's time per accepted token")
    if block_defaulted:
        said.append("block size: the lock leaves it to vLLM; the mocker's default "
                    f"{facts()['mocker']['default_block_size']}")
    if speed != 1:
        said.append(f"--speed {speed:g} shortens the mocker's steps only: the frontend's own time per request "
                    f"(tokenizing, routing, streaming) counts {speed:g} times in the scaled-back times")
    if stack_gpus != stack.gpus:
        said.append(f"serves {stack.gpus} of the stack's {stack_gpus} GPUs (every pool's replicas in proportion); "
                    "per-GPU figures are per served GPU")
    return said


def tokenizer_json(words: int) -> dict[str, Any]:
    """A word-level tokenizer (the `tokenizers` library's tokenizer.json): w0..w{words-1}, one token each,
    split on whitespace; anything else one <unk>. The bed's mocker reads it; bench run builds prompts
    from its words."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{i}": i + 3 for i in range(words)})
    special = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for t, i in list(vocab.items())[:3]]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
            "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}


def model_files(model_id: str, max_model_len: int) -> dict[str, Any]:
    """The bed's model directory, file name -> JSON: what the mocker reads (a tokenizer, its config with a
    chat template that adds nothing to the messages' words, and the model config), never weights."""
    words = int(facts()["vocabulary"])
    return {
        "tokenizer.json": tokenizer_json(words),
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>", "model_max_length": max_model_len,
            "chat_template": "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"},
        "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2},
        # Shape only for what the mocker derives from it; --kv-bytes-per-token sets the KV size itself.
        "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": model_id,
                        "hidden_size": 64, "num_attention_heads": 1, "num_key_value_heads": 1,
                        "num_hidden_layers": 1,
                        "vocab_size": words + 3, "max_position_embeddings": max_model_len,
                        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    }
