"""Continuous batching in virtual time: engines, their prefix caches, the router and KV transfer.

Each engine (one data-parallel rank of a replica) runs vLLM's scheduling shape: up to max-num-seqs
running sequences; each step decodes every running sequence (1 + k speculative tokens verified, the
accepted ones drawn per sequence per step, counted as vLLM's spec-decode counters count them) and
spends what is left of the batched-token budget on chunked prefill of admitted sequences. On a
disaggregated stack prefill engines only prefill, then the KV travels to the decode engine the
router chose (time from the fabric's bandwidth) and the sequence joins that engine's batch. The
router is Dynamo's KV router: colocated, prefix hits against load; disaggregated, prefix hits on the
prefill engines and load alone on the decode engines. The data-parallel ranks of one replica step
together (Replica: a step takes its slowest rank's time, as vLLM's DP ranks meet in the expert all-to-all).
Each replica keeps a virtual clock advanced by the step model and sleeps until wall time catches up with
virtual time / speed, so timing holds on average even where the event loop cannot sleep for less than a
millisecond.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stackpin.profile.topology import Role
from stackpin.sim.models import StepTimes, step_model
from stackpin.sim.roofline import StepModel, accepted_tokens
from stackpin.sim.stack import SimPool, SimStack

BLOCK = 512  # words a prefix-cache block holds (the trace's hash_ids blocks)

# emit(tokens, finished): the engine gives a sequence `tokens` new tokens; `finished` on the last.
Emit = Callable[[int, bool], None]


def block_keys(words: Sequence[str]) -> list[int]:
    """Keys of the prompt's full 512-word blocks, each chained to the ones before it (as vLLM hashes
    blocks with their prefix): the same key means the same prefix up to and including that block."""
    keys: list[int] = []
    previous = 0
    for start in range(0, len(words) - BLOCK + 1, BLOCK):
        previous = hash((previous, tuple(words[start:start + BLOCK])))
        keys.append(previous)
    return keys


class PrefixCache:
    """LRU of block keys, as many as the engine's KV memory holds."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = max(capacity_blocks, 1)
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def match(self, keys: Sequence[int]) -> int:
        """Leading blocks of `keys` the cache holds."""
        n = 0
        for key in keys:
            if key not in self.blocks:
                break
            n += 1
        return n

    def touch(self, keys: Sequence[int]) -> None:
        blocks = self.blocks
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


@dataclass(eq=False)
class Seq:
    """One request inside the simulator."""

    prompt: int
    keys: list[int]
    max_tokens: int
    emit: Emit
    cached: int = 0
    to_prefill: int = 0
    generated: int = 0
    phase: float = 0.0  # the sequence's draws of draft acceptance (accepted_length)
    cancelled: bool = False
    finished: bool = False
    decode_engine: Engine | None = field(default=None, repr=False)

    @property
    def active(self) -> bool:
        return not (self.cancelled or self.finished)


class Clock:
    """Virtual seconds = wall seconds since start x speed."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.start = asyncio.get_running_loop().time()

    def now(self) -> float:
        return (asyncio.get_running_loop().time() - self.start) * self.speed

    async def until(self, virtual: float) -> None:
        delay = self.start + virtual / self.speed - asyncio.get_running_loop().time()
        await asyncio.sleep(delay if delay > 0 else 0)


# Draft acceptance is drawn per sequence per step from a low-discrepancy sequence: a sequence's phase
# steps by the golden ratio's fraction, so the share of its steps accepting position i is the model's
# probability to within a few steps, without a random generator's runs (which would make one request's
# speed vary where the model has none). Each sequence starts at its own phase.
_STEP = 0.6180339887498949  # (sqrt 5 - 1) / 2
_START = 0.41421356237309515  # sqrt 2 - 1: sequence n starts at frac(n x this)


def reach_probabilities(alpha: float | tuple[float, ...], k: int) -> tuple[float, ...]:
    """P(drafts 1..i all accepted) for i = 1..k, from the step model's expected tokens: the i-th term of
    accepted_tokens is that probability, so the draws and the model's expectation are one."""
    return tuple(max(accepted_tokens(alpha, i) - accepted_tokens(alpha, i - 1), 0.0) for i in range(1, k + 1))


def accepted_length(u: float, reach: Sequence[float], k: int) -> int:
    """Leading drafts accepted when the draw is `u` in [0, 1): position i is accepted when u < P(1..i
    accepted); the probabilities fall with i, so the accepted positions are always a prefix."""
    n = 0
    while n < k and n < len(reach) and u < reach[n]:
        n += 1
    return n


@dataclass
class SpecCounts:
    """One engine's speculative decoding, counted as vLLM 0.31.0 counts it (vllm/v1/spec_decode/metrics.py
    observe_draft: one draft per sequence per step, its draft tokens, the leading accepted positions), plus the
    drafts that reached each position (the adaptive k drafts fewer at large batches). GET /metrics."""

    positions: int  # the configured number of speculative tokens
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    reached_per_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.accepted_per_position = [0] * self.positions
        self.reached_per_position = [0] * self.positions

    def observe(self, k: int, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += k
        self.accepted_tokens += accepted
        for i in range(min(accepted + 1, k, self.positions)):
            self.reached_per_position[i] += 1
        for i in range(min(accepted, self.positions)):
            self.accepted_per_position[i] += 1


@dataclass
class EngineStats:
    """What one engine did, in virtual time: the measurements that tell a saturated prefill pool from
    an idle decode engine (`GET /stackpin/sim/stats`)."""

    steps: int = 0
    busy_s: float = 0.0  # virtual seconds spent in steps
    decode_seq_steps: int = 0  # sum over steps of the sequences decoding: / steps = mean batch
    prefill_tokens: int = 0
    output_tokens: int = 0
    waiting_seq_steps: int = 0  # sum over steps of the queue: / steps = mean queue
    max_waiting: int = 0
    routed: int = 0  # requests the router gave it
    late_s: float = 0.0  # sum over steps of how far wall time x speed had passed the step's end: a host
    # too busy to keep up stretches every time the client measures

    def as_dict(self, role: str, now: float) -> dict[str, float | int | str]:
        steps = max(self.steps, 1)
        return {"role": role, "steps": self.steps, "busy": round(self.busy_s / now, 4) if now > 0 else 0.0,
                "mean_batch": round(self.decode_seq_steps / steps, 3), "prefill_tokens": self.prefill_tokens,
                "output_tokens": self.output_tokens, "mean_waiting": round(self.waiting_seq_steps / steps, 3),
                "max_waiting": self.max_waiting, "routed": self.routed,
                "mean_late_s": round(self.late_s / steps, 4), "late_s": round(self.late_s, 6)}


class Engine:
    """One scheduler: a colocated worker, a prefill engine or a decode engine."""

    def __init__(self, stack: SimStack, pool: SimPool, clock: Clock, role: Role,
                 on_prefilled: Callable[[Seq], None] | None = None, model: StepTimes | None = None,
                 slow: float = 1.0) -> None:
        self.model: StepTimes = model or StepModel.of(stack, pool)
        self.slow = slow  # the injected slowdown (--fault slow=F): every step takes F times as long
        self.alpha = self.model.alpha
        self.pool = pool
        self.reach = reach_probabilities(self.alpha, pool.spec_k if pool.spec_method else 0)
        self.spec = SpecCounts(len(self.reach))
        self.role = role
        self.clock = clock
        self.cache = PrefixCache(pool.kv_tokens // BLOCK)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.wake = asyncio.Event()  # its replica's, once grouped (Replica)
        self.on_prefilled = on_prefilled
        self.stats = EngineStats()
        # Sequences routed to this engine and not finished, wherever they are now (waiting on a prefill
        # engine, their KV in flight, or here): the load the router weighs.
        self.routed: list[Seq] = []

    def active_tokens(self) -> int:
        """KV tokens of the sequences routed here and not finished (Dynamo's active blocks)."""
        self.routed = [s for s in self.routed if s.active]
        return sum(s.prompt + s.generated for s in self.routed)

    def queued_prefill(self) -> int:
        return sum(s.to_prefill for s in (*self.running, *self.waiting) if not s.cancelled)

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    def submit(self, seq: Seq) -> None:
        self.waiting.append(seq)
        self.wake.set()

    def plan(self) -> Step | None:
        """Admit what fits and choose this rank's next step (its decoders, draft count and prefill chunks), or
        None when it has nothing to compute this step."""
        pool = self.pool
        self.running = [s for s in self.running if not s.cancelled]
        while self.waiting and self.waiting[0].cancelled:
            self.waiting.popleft()
        decoders = [s for s in self.running if s.to_prefill == 0] if self.role != Role.prefill else []
        context = sum(s.prompt + s.generated for s in decoders)
        k = self.model.best_k(len(decoders), context) if decoders else 0
        budget = pool.max_batched_tokens - len(decoders) * (1 + k)
        chunks: list[tuple[Seq, int]] = []
        for seq in self.running:
            if seq.to_prefill and budget > 0:
                take = min(seq.to_prefill, budget)
                chunks.append((seq, take))
                budget -= take
        held = context + sum(s.prompt for s in self.running if s.to_prefill)
        while self.waiting and budget > 0 and len(self.running) < pool.max_num_seqs:
            seq = self.waiting[0]
            if self.running and held + seq.prompt > pool.kv_tokens:
                break  # no KV memory for it yet: it waits, as vLLM's scheduler makes it
            self.waiting.popleft()
            self.running.append(seq)
            held += seq.prompt
            if seq.to_prefill:
                take = min(seq.to_prefill, budget)
                chunks.append((seq, take))
                budget -= take
        prefill = sum(take for _, take in chunks)
        if not decoders and not prefill:
            # Only sequences that arrived decoded-ready (their KV just came from a prefill engine) were
            # admitted: they decode from the next step, at this same virtual instant.
            return None
        took = self.model.step_time(len(decoders), k, context, prefill) * self.slow
        return Step(decoders, k, chunks, prefill, took)

    def account(self, step: Step, took: float) -> None:
        """Count a step that took `took` virtual seconds (its replica's slowest rank's time)."""
        st = self.stats
        st.steps += 1
        st.busy_s += took
        st.decode_seq_steps += len(step.decoders)
        st.prefill_tokens += step.prefill
        st.waiting_seq_steps += len(self.waiting)
        st.max_waiting = max(st.max_waiting, len(self.waiting))

    def finish(self, step: Step) -> None:
        """The step's tokens, once virtual time reached its end: decoded and accepted ones, finished prefills."""
        st = self.stats
        k = step.k
        done: list[Seq] = []
        spec = self.spec
        for seq in step.decoders:
            if seq.cancelled:
                continue
            accepted = 0
            if k and self.reach:
                seq.phase = (seq.phase + _STEP) % 1.0
                accepted = accepted_length(seq.phase, self.reach, k)
                # Counted before max_tokens cuts the answer, as vLLM counts (its scheduler does not trim
                # drafts near max_tokens either).
                spec.observe(k, accepted)
            n = min(1 + accepted, seq.max_tokens - seq.generated)
            if n:
                seq.generated += n
                st.output_tokens += n
                finished = seq.generated >= seq.max_tokens
                seq.finished = finished
                seq.emit(n, finished)
                if finished:
                    done.append(seq)
        for seq, take in step.chunks:
            seq.to_prefill -= take
            if seq.to_prefill == 0 and not seq.cancelled:
                self.cache.touch(seq.keys)
                seq.generated = 1  # prefill samples the first token
                st.output_tokens += 1
                finished = seq.max_tokens == 1
                seq.finished = finished
                seq.emit(1, finished)
                if finished:
                    done.append(seq)
                elif self.role == Role.prefill:
                    done.append(seq)
                    if self.on_prefilled is not None:
                        self.on_prefilled(seq)
        if done:
            gone = set(done)
            self.running = [s for s in self.running if s not in gone]


@dataclass(eq=False)
class Step:
    """One rank's share of a step: the sequences it decodes (k drafts each), its prefill chunks, and its own time."""

    decoders: list[Seq]
    k: int
    chunks: list[tuple[Seq, int]]
    prefill: int  # tokens prefilled
    took: float  # virtual seconds this rank alone would take


class Replica:
    """The data-parallel ranks of one replica, stepped together: vLLM steps a MoE model's DP ranks in lockstep
    (every rank's forward meets in the expert all-to-all; an idle rank runs a dummy batch), so each step takes
    its slowest rank's time, and a prefill chunk on any rank stalls every rank's decode. Dynamo's mocker does
    the same (its attention-DP ranks pass a group barrier each step); the curve charges it as prefill_stall.
    A replica of one rank is one engine stepping alone."""

    def __init__(self, ranks: Sequence[Engine], clock: Clock) -> None:
        self.ranks = list(ranks)
        self.clock = clock
        self.wake = asyncio.Event()
        for rank in self.ranks:
            rank.wake = self.wake  # a request for any rank wakes the replica
        self.vtime = 0.0

    async def run(self) -> None:
        while True:
            if not any(r.running or r.waiting for r in self.ranks):
                self.wake.clear()
                await self.wake.wait()
                self.vtime = max(self.vtime, self.clock.now())
            steps = [r.plan() for r in self.ranks]
            taken = [s.took for s in steps if s is not None]
            if not taken:
                await asyncio.sleep(0)
                continue
            took = max(taken)
            self.vtime += took
            for rank, step in zip(self.ranks, steps, strict=True):
                if step is not None:
                    rank.account(step, took)
            await self.clock.until(self.vtime)
            late = max(self.clock.now() - self.vtime, 0.0)
            for rank, step in zip(self.ranks, steps, strict=True):
                if step is not None:
                    rank.stats.late_s += late
                    rank.finish(step)


class Simulator:
    """The engines of a stack and the router in front of them (Dynamo's KV-aware router)."""

    def __init__(self, stack: SimStack, speed: float, model: str = "roofline", slow: float = 1.0) -> None:
        self.stack = stack
        self.clock = Clock(speed)
        # One step model per pool, shared by its engines (the aiconfigurator one holds compiled engines).
        decode = step_model(model, stack, stack.decode)
        self.decoders = [Engine(stack, stack.decode, self.clock, Role.decode if not stack.colocated else Role.worker,
                                model=decode, slow=slow) for _ in range(stack.decode.engines)]
        self.prefillers: list[Engine] = []
        if not stack.colocated:
            pool = stack.pool(Role.prefill)
            prefill = step_model(model, stack, pool)
            self.prefillers = [Engine(stack, pool, self.clock, Role.prefill, self._transfer, model=prefill, slow=slow)
                               for _ in range(pool.engines)]
        self.transfer_model: StepTimes = decode
        self.tasks: list[asyncio.Task[None]] = []
        self.submitted = 0

    def start(self) -> None:
        replicas = [*_replicas(self.decoders, self.stack.decode, self.clock)]
        if self.prefillers:
            replicas += _replicas(self.prefillers, self.stack.pool(Role.prefill), self.clock)
        self.tasks = [asyncio.ensure_future(r.run()) for r in replicas]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def submit(self, words: Sequence[str], max_tokens: int, emit: Emit) -> Seq:
        """Route a request; returns its sequence (set `cancelled` to drop it)."""
        keys = block_keys(words)
        # As vLLM: a hit may cover at most all but the last prompt token (the step that samples the
        # first answer token must compute one), at block granularity.
        usable = keys[: max(len(words) - 1, 0) // BLOCK]
        prompt = max(len(words), 1)
        if self.prefillers:
            # Disaggregated, as Dynamo routes it: the prefill router scores the prefill engines' prefix
            # caches only (it tracks no active blocks: the prompt tokens an engine would compute; ties,
            # such as a new session whose only hit is a shared system prompt, go to the engine with the
            # least prefill queued); decode routing balances load only (overlap scoring off). The
            # prefix cache that saves compute is therefore the prefill engine's.
            prefiller = min(self.prefillers, key=lambda e: (prompt - e.cache.match(usable) * BLOCK, e.queued_prefill()))
            engine = min(self.decoders, key=lambda e: e.active_tokens())
            cache = prefiller.cache
        else:
            engine = self.route(usable, prompt)
            cache = engine.cache
        cached = cache.match(usable) * BLOCK
        seq = Seq(prompt=prompt, keys=keys, max_tokens=max_tokens, emit=emit, cached=cached,
                  to_prefill=prompt - cached, decode_engine=engine, phase=(self.submitted * _START) % 1.0)
        self.submitted += 1
        engine.routed.append(seq)
        engine.stats.routed += 1
        if cache.blocks:
            cache.touch(keys[: cached // BLOCK])
        if self.prefillers:
            prefiller.stats.routed += 1
            prefiller.submit(seq)
        else:
            engine.submit(seq)
        return seq

    def route(self, usable: Sequence[int], prompt: int) -> Engine:
        """Dynamo's KV-aware choice among colocated workers: the least cost = the prompt tokens the
        worker would have to prefill (those its prefix cache lacks) + the KV tokens of the sequences
        already routed to it (overlap weight 1, Dynamo's default). A session stays on the worker holding
        its context unless that worker is busier by more than the context is worth, and a prefix every
        session shares (a system prompt) does not pull every request to the worker that cached it
        first. Ties go to the first worker."""
        return min(self.decoders, key=lambda e: prompt - e.cache.match(usable) * BLOCK + e.active_tokens())

    def stats(self) -> dict[str, object]:
        """Per-engine measurements since the start (virtual time)."""
        now = self.clock.now()
        return {"virtual_s": round(now, 3),
                "engines": [e.stats.as_dict(e.role, now) for e in [*self.prefillers, *self.decoders]]}

    def _transfer(self, seq: Seq) -> None:
        """A prefilled sequence's KV travels to its decode engine (less the prefix that engine already
        holds), then it joins that batch."""
        engine = seq.decode_engine
        assert engine is not None
        held = engine.cache.match(seq.keys) * BLOCK
        engine.cache.touch(seq.keys)
        delay = self.transfer_model.kv_transfer_time(max(seq.prompt - held, 0)) / self.clock.speed
        asyncio.get_running_loop().call_later(delay, engine.submit, seq)


def _replicas(engines: Sequence[Engine], pool: SimPool, clock: Clock) -> list[Replica]:
    """A pool's engines as its replicas: each replica's data-parallel ranks, in order."""
    ranks = max(1, len(engines) // max(pool.replicas, 1))
    return [Replica(engines[i:i + ranks], clock) for i in range(0, len(engines), ranks)]
