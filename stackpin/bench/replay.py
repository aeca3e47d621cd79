"""`stackpin bench run`: replay a trace against an endpoint at each agent count, then search the
largest count that holds the SLO, and bind the result to the stack.

Each point runs its agents in `workers` forked processes (agents dealt round robin), each with its
own event loop; they start together at one monotonic instant (CLOCK_MONOTONIC is one clock for the
whole host) and send back their requests when done. Each process watches its own event-loop lag and
CPU busy fraction: a client that cannot keep up says so in the result instead of passing its own
limit off as the server's. Ctrl-C (SIGINT) stops every process: requests in flight are dropped, what
finished is kept, and the result is marked interrupted.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from multiprocessing.connection import Connection as Pipe
from typing import Any

import stackpin.jsonio as jsonio
from stackpin.bench.acceptance import Acceptance
from stackpin.bench.binding import controls as make_controls
from stackpin.bench.binding import drafting, speculative_method, stack_ref
from stackpin.bench.gaps import rescaled
from stackpin.bench.result import BenchResult, ClientInfo, Point, Request, Shard, Simulation, Slo, controls_fingerprint
from stackpin.bench.sessions import Context, Trace, agent_sessions, default_sessions_per_agent
from stackpin.bench.specmetrics import Reading, difference
from stackpin.bench.specmetrics import read as read_metrics
from stackpin.bench.stats import HOST_SHARE_LIMIT, build_point, measured, next_search, score
from stackpin.bench.stream import Connection, Endpoint
from stackpin.bench.words import Vocabulary
from stackpin.deploy.source import StackSource
from stackpin.errors import StackpinError


@dataclass(frozen=True)
class RunOptions:
    endpoint: str
    trace: Trace
    agents: tuple[int, ...]
    slo: Slo | None = None
    model: str | None = None
    workers: int = 1
    duration_s: float | None = None  # per point: no new turn starts after it
    sessions: int | None = None  # per agent
    delay_scale: float = 1.0
    timeout_s: float = 300.0
    headers: dict[str, str] = field(default_factory=dict)
    pod_index: int = 0
    pods: int = 1
    cache_salt: str = ""  # put in every prompt word: a run does not hit the cache an earlier run filled
    vocabulary: Vocabulary | None = None  # the served tokenizer's single-token words (bench/words.py)
    target: str | None = None  # where requests go when not `endpoint` (the Dynamo bed's frontend)
    lag_limit_s: float = 0.01  # a point whose client loop lag p99 (stack time) reaches it is invalid
    busy_limit: float = 0.9  # ... or whose busiest client process is this busy
    search_resolution: float = 0.0  # the SLO search stops when its bracket is this fraction of the count met
    retries: int = 1  # an invalid point is measured again up to this many times; the last one is kept
    host_share_limit: float = HOST_SHARE_LIMIT  # simulator lateness per step / median TTFT making a point invalid
    metrics: tuple[str, ...] = ()  # Prometheus pages whose spec-decode counters are summed (default: the serving
    # endpoint's /metrics; Dynamo's workers serve theirs on their system ports, not the frontend)


# One finished request as a worker sends it back: agent, session, turn, start, first token, last
# token, end, prompt, cached, output tokens, usage seen, error, prompt tokens as the trace sizes them,
# gaps between token events (bucket -> count, wall time).
Record = tuple[int, str, int, float, float | None, float | None, float, int, int, int, bool, str | None, int,
               dict[int, int]]


@dataclass
class ShareResult:
    records: list[Record]
    cpu_s: float
    wall_s: float
    finished: float
    lags: list[float]


@dataclass
class Progress:
    """What the terminal shows; `update(point agents, requests, errors, tokens)`."""

    update: Callable[[int, int, int, int], None] = lambda *_: None
    retry: Callable[[Point], None] = lambda _: None  # an invalid point is about to be measured again


# --- one worker process ----------------------------------------------------------------------------

async def _agent(options: RunOptions, model: str, agent: int, agents: int, point: int, speed: float,
                 deadline: float | None, stop: asyncio.Event, out: list[Record], counters: Any, slot: int) -> None:
    connection = Connection(Endpoint.parse(options.target or options.endpoint), options.headers)
    per_agent = options.sessions if options.sessions is not None else (
        None if options.duration_s is not None else default_sessions_per_agent(options.trace, agents))
    try:
        for round_, session in agent_sessions(options.trace, agent, agents, per_agent):
            # Another run, point or round replays a session with other words: it must not hit the
            # cache an earlier replay filled (sessions still share the blocks they share in the trace).
            context = Context(salt=f"{options.cache_salt}p{point}r{round_}-", session=session.id,
                              vocabulary=options.vocabulary)
            for number, turn in enumerate(session.turns):
                wait = turn.delay / 1000 * options.delay_scale / speed
                if wait > 0:
                    try:
                        await asyncio.wait_for(stop.wait(), wait)
                    except TimeoutError:
                        pass
                if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    return
                body = {"model": model, "messages": context.next_messages(turn), "stream": True,
                        "stream_options": {"include_usage": True}, "max_tokens": turn.output_length,
                        "ignore_eos": True}
                o = await connection.chat(body, options.timeout_s)
                tokens = o.output_tokens if o.usage else o.events
                out.append((agent, session.id, number, o.start, o.first_token, o.last_token, o.end or o.start,
                            o.prompt_tokens, o.cached_tokens, tokens, o.usage, o.error, context.tokens, o.gaps))
                counters[slot * 3] += 1
                counters[slot * 3 + 1] += 1 if o.error else 0
                counters[slot * 3 + 2] += tokens
                if o.error and not o.usage:
                    break  # the answer is lost: the session cannot go on, the agent takes its next one
                context.add_answer(o.answer, o.output_tokens if o.usage else None)
    finally:
        connection.close()


async def _lag_monitor(lags: list[float]) -> None:
    while True:
        before = time.monotonic()
        await asyncio.sleep(0.005)
        lags.append(max(0.0, time.monotonic() - before - 0.005))


async def _share(options: RunOptions, model: str, agent_ids: list[int], agents: int, point: int, speed: float,
                 start_at: float, counters: Any, slot: int) -> ShareResult:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def wake() -> None:
        # A Ctrl-C can land after this share's loop has closed (a terminal's, then the parent's, reach
        # every worker): there is nothing left to wake then, and raising in the handler would turn the
        # share's kept result into a failed worker.
        if not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)

    _on_sigint.append(wake)
    if _early_stop:
        stop.set()
    records: list[Record] = []
    lags: list[float] = []
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    cpu0, wall0 = time.process_time(), time.monotonic()
    deadline = start_at + options.duration_s / speed if options.duration_s is not None else None
    monitor = asyncio.create_task(_lag_monitor(lags))
    agents_done = asyncio.gather(*(_agent(options, model, a, agents, point, speed, deadline, stop, records,
                                          counters, slot) for a in agent_ids))
    stopped: asyncio.Future[Any] = asyncio.create_task(stop.wait())
    waiting: list[asyncio.Future[Any]] = [agents_done, stopped]
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if not agents_done.done():
        agents_done.cancel()
        await asyncio.gather(agents_done, return_exceptions=True)
    stopped.cancel()
    monitor.cancel()
    finished = time.monotonic()
    return ShareResult(records, time.process_time() - cpu0, finished - wall0, finished, lags)


_early_stop: list[bool] = []
_on_sigint: list[Callable[[], None]] = []


def _sigint(*_: object) -> None:
    _early_stop.append(True)
    for hook in _on_sigint:
        hook()


def _worker(pipe: Pipe, *args: Any) -> None:
    # A Python-level handler for the worker's whole life, not the loop's add_signal_handler: asyncio
    # puts the default (KeyboardInterrupt) back when the loop closes, and a second Ctrl-C arriving
    # then would lose the share's requests.
    signal.signal(signal.SIGINT, _sigint)
    from stackpin.children import die_with_parent_now

    die_with_parent_now()  # a bench killed (SIGTERM, kill -9) takes its workers along, mid-point or not
    try:
        result = asyncio.run(_share(*args))
        pipe.send(result)
    except BaseException as exc:  # noqa: BLE001 - a worker's failure goes back to the parent, one line
        pipe.send(f"{type(exc).__name__}: {exc}")
    finally:
        pipe.close()


# --- the run -----------------------------------------------------------------------------------------

@dataclass
class _Run:
    options: RunOptions
    model: str
    speed: float
    gpus: int
    started: float = field(default_factory=time.monotonic)
    interrupted: bool = False
    children: list[int] = field(default_factory=list)
    cpu_s: float = 0.0
    busy: float = 0.0
    lag_p99: float = 0.0
    points_run: int = 0
    server_late: float = 0.0  # the largest of the kept points' simulator lateness (stack time)
    simulator: bool = False  # stackpin's own simulator, which says how late its host let it run
    method: str | None = None  # the lock's speculative method: what a measured acceptance is of
    drafting: str | None = None  # ... and its settings that move acceptance (binding.drafting)
    acceptance_from: str | None = None  # where acceptance was read, or why not (BenchResult.acceptance_from)

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        return self.options.metrics or ((self.options.target or _base(self.options.endpoint)) + "/metrics",)

    def read_acceptance(self) -> Reading | None:
        """The endpoint's spec-decode counters now; None (and why, kept for the result) where not exposed."""
        got = read_metrics(self.metrics_urls)
        if isinstance(got, str):
            if self.acceptance_from is None or self.acceptance_from.startswith("not"):
                self.acceptance_from = got
            return None
        if got.engine:
            self.acceptance_from = f"{got.engine}'s spec-decode counters at {', '.join(self.metrics_urls)}"
        elif self.acceptance_from is None or self.acceptance_from.startswith("not"):
            self.acceptance_from = f"not exposed: {', '.join(self.metrics_urls)} has no speculative-decoding " \
                                   "counter (a stack without drafts, or a frontend whose engines serve theirs on " \
                                   "their own ports: bench run --metrics URL)"
        return got

    def accepted_between(self, before: Reading | None, after: Reading | None) -> Acceptance | None:
        if before is None or after is None:
            return None
        return difference(before, after, self.method, self.drafting)

    def on_sigint(self, *_: object) -> None:
        self.interrupted = True
        for pid in self.children:  # a terminal's Ctrl-C reaches them too; `kill -INT` reaches only us
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def measure(self, agents: int, searched: bool, progress: Progress) -> Point | None:
        """One point; an invalid one (the host or client could not keep up, often a passing load) is
        measured again, up to --retries times, under a fresh cache salt. The run's own busy and lag
        figures are those of the kept measurements."""
        kept = self.busy, self.lag_p99, self.server_late
        point = self._measure(agents, searched, progress)
        for attempt in range(2, self.options.retries + 2):
            if point is None or point.invalid is None or self.interrupted:
                break
            progress.retry(point)
            self.busy, self.lag_p99, self.server_late = kept
            again = self._measure(agents, searched, progress)
            point = again.model_copy(update={"attempts": attempt}) if again is not None else point
        return point

    def _measure(self, agents: int, searched: bool, progress: Progress) -> Point | None:
        options = self.options
        mine = [a for a in range(agents) if a % options.pods == options.pod_index]
        if not mine:
            return None
        shares = [mine[i::options.workers] for i in range(min(options.workers, len(mine)))]
        context = multiprocessing.get_context("fork")
        counters = context.Array("d", 3 * len(shares), lock=False)
        before = server_lateness(options.endpoint) if self.simulator else None
        counted = self.read_acceptance()
        start_at = time.monotonic() + 0.05 + 0.01 * len(shares)
        processes, pipes = [], []
        for slot, share in enumerate(shares):
            parent, child = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=(child, options, self.model, share, agents,
                                                            self.points_run, self.speed, start_at, counters, slot),
                                      daemon=True)
            process.start()
            child.close()
            processes.append(process)
            pipes.append(parent)
            self.children.append(process.pid or 0)
        results: list[ShareResult | str | None] = [None] * len(shares)
        while any(r is None for r in results):
            for i, pipe in enumerate(pipes):
                if results[i] is None and pipe.poll(0.1 / len(pipes)):
                    try:
                        results[i] = pipe.recv()
                    except EOFError:
                        results[i] = "the worker process died"
            progress.update(agents, *(int(sum(counters[k::3])) for k in range(3)))
        for process in processes:
            process.join()
        self.children.clear()
        self.points_run += 1
        failed = [r for r in results if isinstance(r, str)]
        if failed:
            raise StackpinError(f"a client worker failed: {failed[0]}")
        done = [r for r in results if isinstance(r, ShareResult)]
        after = server_lateness(options.endpoint) if before is not None else None
        accepted = self.accepted_between(counted, self.read_acceptance())
        # A server that went backwards (restarted) says nothing about this point.
        late = (after[0] - before[0]) / (after[1] - before[1]) \
            if before and after and after[1] > before[1] and after[0] >= before[0] else None
        point = self._point(agents, searched, start_at, done, late)
        return point.model_copy(update={"acceptance": accepted}) if accepted is not None else point

    def _point(self, agents: int, searched: bool, start_at: float, shares: list[ShareResult],
               server_late: float | None) -> Point:
        speed = self.speed
        requests = []
        for agent, session, turn, start, first, last, end, prompt, cached, output, _, error, sent, gaps in sorted(
                (r for s in shares for r in s.records), key=lambda r: (r[3], r[0])):
            itl = (last - first) / (output - 1) * speed if first is not None and last is not None and output > 1 \
                else None
            requests.append(Request(
                agent=agent, session=session, turn=turn, start_s=round((start - self.started) * speed, 6),
                ttft_s=round((first - start) * speed, 6) if first is not None else None,
                end_s=round((end - self.started) * speed, 6), prompt_tokens=prompt, cached_tokens=cached,
                output_tokens=output, itl_mean_s=itl, error=error, sent_tokens=sent,
                token_gaps=rescaled(gaps, speed)))
        duration = (max(s.finished for s in shares) - start_at) * speed
        self.cpu_s += sum(s.cpu_s for s in shares)
        busy = max([0.0, *(s.cpu_s / s.wall_s for s in shares if s.wall_s > 0)])
        lags = sorted(lag for s in shares for lag in s.lags)
        lag = lags[int(0.99 * (len(lags) - 1))] if lags else 0.0
        self.busy, self.lag_p99 = max(self.busy, busy), max(self.lag_p99, lag)
        self.server_late = max(self.server_late, server_late or 0.0)
        return build_point(agents, duration, requests, self.gpus, self.options.slo, searched,
                           busy=round(busy, 3), lag_s=round(lag * speed, 6), lag_limit_s=self.options.lag_limit_s,
                           busy_limit=self.options.busy_limit,
                           server_late_s=round(server_late, 6) if server_late is not None else None,
                           host_share_limit=self.options.host_share_limit)


@dataclass(frozen=True)
class Probed:
    """What an endpoint says of itself before a run."""

    simulation: Simulation | None = None
    digest: str | None = None  # the simulated stack's
    model: str | None = None  # the first model GET /v1/models lists
    serving: str | None = None  # where requests go (the Dynamo bed's frontend), when not the endpoint
    tokenizer: bytes | None = None  # the bed's tokenizer.json


MAX_PROBE_BYTES = 64 << 20


def _base(endpoint: str) -> str:
    """The endpoint's base URL (before /v1)."""
    base = f"{'https' if Endpoint.parse(endpoint).tls else 'http'}://" + endpoint.split("://", 1)[1].rstrip("/")
    return base.removesuffix("/v1")


def _get(endpoint: str, url: str, timeout_s: float, raw: bool = False) -> Any:
    """GET url: its JSON (its bytes when raw), None on an HTTP error status; bounded, one-line errors."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http(s) only
            data = response.read(MAX_PROBE_BYTES + 1)
            if len(data) > MAX_PROBE_BYTES:
                raise StackpinError(f"--endpoint {endpoint}: {url} answered over {MAX_PROBE_BYTES >> 20} MiB")
            return data if raw else jsonio.loads(data)
    except urllib.error.HTTPError:
        return None
    except jsonio.NestingError as exc:
        raise StackpinError(f"--endpoint {endpoint}: {url}: {exc}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise StackpinError(f"--endpoint {endpoint}: cannot reach it: {getattr(exc, 'reason', exc)}") from None


def server_lateness(endpoint: str, timeout_s: float = 10.0) -> tuple[float, int] | None:
    """(seconds late, summed over steps; steps) of stackpin's simulator since it started: how far its
    host let wall time run past each step's end, in the stack's time (GET /stackpin/sim/stats). None
    where the server does not say, or cannot be asked (a server gone mid-run fails its requests, which
    the point records; the run goes on)."""
    try:
        stats = _get(endpoint, _base(endpoint) + "/stackpin/sim/stats", timeout_s)
    except StackpinError:
        return None
    engines = stats.get("engines") if isinstance(stats, dict) else None
    if not isinstance(engines, list) or not all(
            isinstance(e, dict) and isinstance(e.get("late_s"), int | float) and math.isfinite(e["late_s"])
            and e["late_s"] >= 0 and isinstance(e.get("steps"), int) and e["steps"] >= 0 for e in engines):
        return None  # not a stackpin simulator's figures: nothing is claimed from them
    return sum(float(e["late_s"]) for e in engines), sum(int(e["steps"]) for e in engines)


def probe(endpoint: str, timeout_s: float = 10.0) -> Probed:
    """Ask the endpoint whether it is simulated (GET /stackpin/sim; 404 on a real one: stackpin's simulator
    or its Dynamo bed, which also names its frontend and serves its tokenizer), and which model it
    serves (GET /v1/models)."""
    base = _base(endpoint)

    def get(url: str, raw: bool = False) -> Any:
        return _get(endpoint, url, timeout_s, raw)

    sim = get(base + "/stackpin/sim")
    simulation, digest, serving, tokenizer = None, None, None, None
    if isinstance(sim, dict) and sim.get("simulated") is True:
        simulation = Simulation(model=str(sim.get("model", "")),
                                substitutions=tuple(str(s) for s in sim.get("substitutions") or ()),
                                speed=float(sim.get("speed") or 1.0),
                                gpus=int(sim["gpus"]) if isinstance(sim.get("gpus"), int) else None,
                                backend=str(sim.get("backend") or "stackpin"))
        digest = str(sim["stack_digest"]) if sim.get("stack_digest") else None
        if isinstance(sim.get("serving"), str):
            serving = sim["serving"].rstrip("/")
            Endpoint.parse(serving)  # a URL the client can send to, or a one-line refusal
            # The bed names its frontend on its own host; an endpoint naming another host would send the
            # run's requests (and $STACKPIN_BENCH_API_KEY) somewhere the user did not name.
            if urllib.parse.urlsplit(serving).hostname != urllib.parse.urlsplit(base).hostname:
                raise StackpinError(f"--endpoint {endpoint}: its /stackpin/sim names a frontend on another host "
                                    f"({serving}); refused")
            tokenizer = get(base + "/stackpin/sim/tokenizer.json", raw=True)
    models = get((serving or base) + "/v1/models")
    model = None
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        first = models["data"][0]
        model = str(first.get("id")) if isinstance(first, dict) and first.get("id") else None
    return Probed(simulation, digest, model, serving, tokenizer)


def _bed_said(acceptance_from: str | None, simulation: Simulation | None) -> str | None:
    """Behind the Dynamo bed's frontend no acceptance is counted anywhere: its mocker draws none (the bed charges
    a speculative stack's decode steps per accepted token; stackpin/bench/acceptance.yaml, dynamo.mocker)."""
    if simulation is None or simulation.backend == "stackpin" or not (acceptance_from or "").startswith("not"):
        return acceptance_from
    return f"not exposed: {simulation.backend}'s mocker counts no draft acceptance (the bed charges decode steps " \
           f"per accepted token); {acceptance_from}"


def run_bench(options: RunOptions, source: StackSource, progress: Progress | None = None) -> BenchResult:
    """Measure every asked agent count, then bisect for the SLO's largest count (a lone pod of a job
    does not search: the pods could not agree; `bench merge` scores the swept points).

    Returns with Ctrl-C ignored: what was measured is only safe once the caller has written it (a
    terminal repeats Ctrl-C, users press it twice), so the caller puts its own handler back after."""
    progress = progress or Progress()
    found = probe(options.endpoint)
    simulation, served = found.simulation, found.model
    if found.digest and found.digest != source.lock.stack_digest:
        raise StackpinError(f"--endpoint {options.endpoint} simulates stack {found.digest}, but the lock "
                            f"{source.origin} is {source.lock.stack_digest}: bench the simulator of this lock")
    locked_model = source.lock.resolved.model.id
    if served and served != locked_model and not options.model:
        raise StackpinError(f"--endpoint {options.endpoint} serves {served}, but the lock {source.origin} serves "
                            f"{locked_model}: bench an endpoint of this stack, or pass --model {served} to measure "
                            "it anyway (the result records what was served)")
    if found.serving:
        options = replace(options, target=found.serving)
    if options.vocabulary is None and found.tokenizer is not None:
        from stackpin.bench.words import from_tokenizer

        options = replace(options, vocabulary=from_tokenizer(found.tokenizer, f"{options.endpoint} tokenizer.json"))
    stack = stack_ref(source)
    if simulation and simulation.gpus and simulation.gpus != stack.gpus:
        stack = stack.model_copy(update={"gpus": simulation.gpus})  # a share of the stack was served
    controls = make_controls(source.lock, options.trace.digest, options.agents, options.slo)
    run = _Run(options, options.model or served or locked_model,
               simulation.speed if simulation else 1.0, stack.gpus,
               simulator=simulation is not None and simulation.backend == "stackpin",
               method=speculative_method(source.lock), drafting=drafting(source.lock))
    started = datetime.now(UTC)
    points: list[Point] = []
    signal.signal(signal.SIGINT, run.on_sigint)
    try:
        wanted = list(options.agents)
        if options.slo and 1 not in wanted:
            wanted.insert(0, 1)  # the score's single-agent speed
        for agents in wanted:
            if run.interrupted:
                break
            point = run.measure(agents, searched=agents not in options.agents, progress=progress)
            if point is not None:
                points.append(point)
        while options.slo and options.pods == 1 and not run.interrupted:
            middle = next_search(points, options.slo, options.search_resolution)
            if middle is None or any(p.agents == middle for p in points):
                break
            point = run.measure(middle, searched=True, progress=progress)
            if point is not None:
                points.append(point)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    points.sort(key=lambda p: p.agents)
    # The whole run is marked as its points are judged (stats.invalid_reason): busy, or late by the limit.
    late = run.lag_p99 * run.speed >= options.lag_limit_s
    saturated = run.busy >= options.busy_limit or late
    note = ""
    if run.busy >= options.busy_limit:
        note = (f"client saturated: its busiest process used {run.busy:.0%} of a CPU; the numbers are a floor "
                "(rerun with more --workers, or fewer agents)")
    elif late:
        scaled = f" ({run.lag_p99 * run.speed * 1000:.0f} ms of simulated time)" if run.speed != 1 else ""
        note = (f"client timestamps late: event-loop lag p99 {run.lag_p99 * 1000:.1f} ms{scaled} with the client "
                f"at {run.busy:.0%} CPU (a busy host?), past --lag-limit {options.lag_limit_s * 1000:g} ms (rerun "
                "on a quieter host, with more --workers, or against a simulator at a lower --speed)")
    elif run.server_late >= options.lag_limit_s:
        note = (f"simulator behind its clock: up to {run.server_late * 1000:.1f} ms per step of the stack's time, "
                f"past --lag-limit {options.lag_limit_s * 1000:g} ms (a busy host: serve it at a lower --speed, "
                "or measure fewer agents)")
    elif invalid := [p for p in points if p.invalid is not None]:
        note = "; ".join(f"{p.agents} agents invalid: {p.invalid}" for p in invalid)
    return BenchResult(
        stack=stack, controls=controls, fingerprint=controls_fingerprint(controls), endpoint=options.endpoint,
        started=started.strftime("%Y-%m-%dT%H:%M:%SZ"), finished=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        interrupted=run.interrupted, served_model=options.model or served,
        client=ClientInfo(workers=options.workers, cpu_seconds=round(run.cpu_s, 3), saturated=saturated, note=note,
                          busy_fraction=round(run.busy, 3), loop_lag_p99_s=round(run.lag_p99, 6),
                          tokenizer=options.vocabulary.source if options.vocabulary else None,
                          lag_limit_s=options.lag_limit_s, busy_limit=options.busy_limit,
                          host_share_limit=options.host_share_limit),
        simulation=simulation, points=tuple(points),
        # No valid point, no score: a score of nothing measured would read as a measured zero.
        score=score(points, options.slo) if options.slo and options.pods == 1 and measured(points) else None,
        shard=Shard(index=options.pod_index, count=options.pods) if options.pods > 1 else None,
        acceptance_from=_bed_said(run.acceptance_from, simulation))
