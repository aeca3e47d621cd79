"""A bench result: what one `stackpin bench run` (or the simulator behind it) measured, bound to a stack.

The contract between the replay client (writes), compare/gate, plot, report and plan (read). One JSON
file a run. `stack.digest` is the lock's stack digest; `controls` are what must match for two results
to be compared side by side, and `fingerprint` is the sha256 of their canonical JSON, so a reader can
tell at a glance whether two results are comparable and name the field that differs when not.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from stackpin.jsonio import canonical_json
from stackpin.models import Model
from stackpin.records import Invalid

# Every number a result holds is finite (JSON's NaN and Infinity are refused when read) and, where it is a
# time, a rate, a count or a share, within its physical range (issue 18: a hand-edited NaN must never
# decide a rollback).
Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class Slo(Model):
    """The AgentPerf-style service target: each agent's output speed and its time to first token."""

    tps: float = Field(gt=0, description="Per-agent output tokens/s every agent must hold.")
    ttft_s: float = Field(gt=0, description="TTFT limit in seconds.")
    percentile: Literal["p50", "p90", "p99"] = Field("p90", description="Which TTFT percentile must hold.")


class Dist(Model):
    """A distribution summary; values in the unit its field name says."""

    count: NonNegativeInt
    mean: NonNegative
    p50: NonNegative
    p90: NonNegative
    p99: NonNegative
    max: NonNegative

    @model_validator(mode="after")
    def _ordered(self) -> Dist:
        # The mean of equal values can come out an ulp above them: rounding, not an edit.
        if not self.p50 <= self.p90 <= self.p99 <= self.max or self.mean > self.max * (1 + 1e-12) + 1e-15:
            raise ValueError("percentiles must rise p50 <= p90 <= p99 <= max, and the mean not exceed the max")
        return self


class Controls(Model):
    """What must be equal for two results to be compared side by side."""

    model: str = Field(description="Model id and revision: id@revision.")
    precision: str = Field(description="Weights precision as served (fp8, fp4, ...).")
    engines: dict[str, str] = Field(description="Distribution -> version (vllm, flashinfer-python, ai-dynamo).")
    trace_digest: str = Field(description="sha256 of the trace file's bytes.")
    agents: tuple[PositiveInt, ...] = Field(description="The agent counts asked for (search points excluded).")
    slo: Slo | None = None


class StackRef(Model):
    digest: str = Field(description="The lock's stack digest.")
    name: str = Field(description="The lock's metadata.name.")
    deployment: str | None = Field(None, description="namespace/name@platform when benched from history.")
    revision: PositiveInt | None = None
    platform: str = Field(description="Catalog platform key (gb300-nvl72, vera-rubin-nvl72, ...).")
    gpus: PositiveInt = Field(description="GPUs the stack occupies (from the lock's topology).")


class ClientInfo(Model):
    workers: PositiveInt
    cpu_seconds: NonNegativeFloat
    saturated: bool = Field(description="True when the client could not keep up; the numbers are then a floor.")
    note: str = ""
    busy_fraction: float | None = Field(None, description="Largest CPU time / wall time of one client process.")
    loop_lag_p99_s: float | None = Field(None, description="p99 event-loop lag: how late the client's timestamps "
                                         "can be.")
    busy_limit: float = Field(0.9, gt=0, description="CPU busy fraction of the busiest client process at which a "
                              "point is invalid: the client is then the bottleneck (--busy-limit).")
    lag_limit_s: NonNegativeFloat = Field(0.01, description="Event-loop lag p99 (stack time) past which a point is "
                                          "invalid: the timestamp precision the result claims (--lag-limit).")
    host_share_limit: float | None = Field(None, gt=0, description="stackpin's simulator's lateness per step, as a "
                                           "share of the point's median TTFT, at which a point is invalid: the host, "
                                           "not the stack, then sets the TTFTs measured (none: a run before the rule).")
    tokenizer: str | None = Field(None, description="Whose tokens the prompts were sized in (bench run "
                                  "--tokenizer, or the bed's); none: stackpin's words, one token each to its "
                                  "simulator only.")


class Simulation(Model):
    """Present when the endpoint was `stackpin sim serve`: answers are simulated, not measured hardware."""

    model: str = Field(description="Step-time model: roofline or aiconfigurator.")
    substitutions: tuple[str, ...] = ()
    speed: float = Field(1.0, gt=0, description="The simulator's time scale; the result's times are scaled back "
                         "by it (they are the simulated stack's).")
    gpus: int | None = Field(None, description="GPUs the simulator served (a share of the stack's, --share); "
                             "stack.gpus then counts these.")
    backend: str = Field("stackpin", description="Who served: stackpin's simulator, or `dynamo X.Y.Z` (NVIDIA "
                         "Dynamo's frontend and mocker, stackpin sim serve --backend dynamo).")


class Request(Model):
    """One request as the client saw it; times in seconds from the run's start."""

    agent: NonNegativeInt
    session: str
    turn: NonNegativeInt
    start_s: NonNegative
    ttft_s: NonNegative | None = None
    end_s: NonNegative | None = None
    prompt_tokens: NonNegativeInt = 0
    cached_tokens: NonNegativeInt = 0
    output_tokens: NonNegativeInt = 0
    itl_mean_s: NonNegative | None = None
    error: str | None = Field(None, description="One line: what failed (http 500, stalled, dropped, bad SSE).")
    token_gaps: tuple[tuple[NonNegativeInt, PositiveInt], ...] = Field(
        (), description="Gaps between consecutive token events as (bucket, count) pairs: bucket b > 0 holds "
        "gaps in [1 us x 1.04^(b-1), 1 us x 1.04^b), bucket 0 those under 1 us (stackpin/bench/gaps.py).")
    sent_tokens: NonNegativeInt | None = Field(
        None, description="The prompt's tokens as the trace sizes them (its turns' inputs and the answers so "
        "far): what prompt_tokens, the server's count, should be.")


class Acceptance(Model):
    """Draft acceptance an endpoint counted over a span of time (one bench point, or a run's sum)."""

    method: str | None = Field(None, description="The speculative method the stack drafts with (the lock's, as "
                               "stackpin names it: mtp, dspark, eagle3, ...).")
    drafting: str | None = Field(None, description="The lock's settings that move acceptance besides the text "
                                 "(method, draft model, draft and rejection sampling): results drafting alike are "
                                 "held to one acceptance by compare.")
    drafts: NonNegativeInt = Field(description="Verifications: one per request per step that checked drafts.")
    draft_tokens: NonNegativeInt | None = Field(description="Draft tokens proposed (none: the engine does not "
                                                "count them).")
    accepted_per_position: tuple[NonNegativeInt, ...] = Field(
        description="Per draft position i: drafts whose positions 0..i were all accepted (the engine's per-position "
        "counter, bench/acceptance.yaml); empty where the engine counts only the total (counting: verify_calls).")
    accepted_tokens: NonNegativeInt | None = Field(None, description="Draft tokens accepted, where counted apart "
                                                   "from the positions (none: their sum).")
    reached_per_position: tuple[NonNegativeInt, ...] = Field(
        (), description="Per position i: drafts that drafted i with 0..i-1 accepted (stackpin's simulator, whose "
        "adaptive k drafts fewer positions at large batches); empty: every draft drafted every position, so the "
        "drafts for i = 0 and the accepted count of i - 1 after.")

    @property
    def accepted(self) -> int:
        return self.accepted_tokens if self.accepted_tokens is not None else sum(self.accepted_per_position)

    @property
    def rates(self) -> tuple[float, ...]:
        """Conditional acceptance per position: accepted[i] / drafts that reached i (accepted[i - 1], the
        first over drafts). Ends at the first position no draft reached."""
        out: list[float] = []
        for i, accepted in enumerate(self.accepted_per_position):
            if i < len(self.reached_per_position):
                reached = self.reached_per_position[i]
            else:
                reached = self.drafts if i == 0 else self.accepted_per_position[i - 1]
            if reached <= 0:
                break
            out.append(min(accepted / reached, 1.0))
        return tuple(out)

    @property
    def mean_length(self) -> float:
        """Tokens a verifying step gives a request: 1 + accepted / drafts (vLLM's mean acceptance length)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else 1.0

    def plus(self, other: Acceptance) -> Acceptance:
        """The two spans together (same endpoint kind; positions padded with zeros)."""
        def add(x: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, ...]:
            n = max(len(x), len(y))
            return tuple((x[i] if i < len(x) else 0) + (y[i] if i < len(y) else 0) for i in range(n))

        both_tokens = self.draft_tokens is not None and other.draft_tokens is not None
        explicit = self.accepted_tokens is not None or other.accepted_tokens is not None
        reached = add(self.reached_per_position, other.reached_per_position) \
            if self.reached_per_position and other.reached_per_position else ()
        return Acceptance(
            method=self.method if self.method == other.method else None,
            drafting=self.drafting if self.drafting == other.drafting else None, drafts=self.drafts + other.drafts,
            draft_tokens=(self.draft_tokens or 0) + (other.draft_tokens or 0) if both_tokens else None,
            accepted_per_position=add(self.accepted_per_position, other.accepted_per_position),
            accepted_tokens=self.accepted + other.accepted if explicit else None, reached_per_position=reached)

    def text(self) -> str:
        """`2.41 (mtp; per position 0.82 0.61 0.45)`."""
        rates = " ".join(f"{r:.2f}" for r in self.rates)
        parts = [p for p in (self.method, f"per position {rates}" if rates else None) if p]
        return f"{self.mean_length:.2f} ({'; '.join(parts)})" if parts else f"{self.mean_length:.2f}"


class Point(Model):
    """One concurrency level: `agents` agents replaying sessions at once."""

    agents: PositiveInt
    duration_s: NonNegative
    requests: NonNegativeInt
    errors: NonNegativeInt
    ttft_s: Dist
    itl_s: Dist = Field(description="Per-request ITL, AIPerf's: (last token - first token) / (tokens - 1), one "
                        "value a request.")
    token_gap_s: Dist | None = Field(None, description="Every gap between consecutive token events, pooled over "
                                     "the point's requests (as a server's inter-token histogram counts them).")
    agent_tps: Dist = Field(description="Per-agent output tokens/s while generating (TTFT excluded).")
    agent_tps_samples: tuple[NonNegative, ...] = Field(description="One per agent, for bootstrap intervals.")
    output_tps: NonNegative = Field(description="All agents' output tokens per second of wall time.")
    output_tps_per_gpu: NonNegative
    cache_hit_rate: Share | None = Field(None, description="Cached prompt tokens / prompt tokens.")
    slo_met: bool | None = None
    client_busy: NonNegative | None = Field(None, description="CPU time / wall time of the busiest client process "
                                            "while this point ran.")
    loop_lag_p99_s: NonNegative | None = Field(None, description="p99 event-loop lag of the client while this point "
                                               "ran, in the stack's time (wall lag x the simulator's speed).")
    server_late_s: NonNegative | None = Field(None, description="How far stackpin's simulator ran behind its clock "
                                              "while this point ran: mean lateness per engine step, in the stack's "
                                              "time (a host too busy for the server stretches every time measured).")
    invalid: str | None = Field(None, description="Why this point is not a measurement (the client or host could "
                                "not keep up): left out of the score, the SLO search, compare, plot and plan.")
    searched: bool = Field(False, description="Added by the SLO search, not one of the asked agent counts.")
    attempts: PositiveInt = Field(1, description="Times this point was measured: an invalid measurement is "
                                  "measured again (bench run --retries) and only the last one kept.")
    acceptance: Acceptance | None = Field(None, description="Draft acceptance the endpoint counted while this point "
                                          "ran (its Prometheus spec-decode counters, after less before); none where "
                                          "it exposed none (BenchResult.acceptance_from says why).")
    request_log: tuple[Request, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Point:
        if self.errors > self.requests:
            raise Invalid("errors", f"errors ({self.errors}) exceed requests ({self.requests})")
        if self.request_log:
            logged_errors = sum(1 for r in self.request_log if r.error is not None)
            if (self.requests, self.errors) != (len(self.request_log), logged_errors):
                raise Invalid("requests", f"requests/errors ({self.requests}/{self.errors}) are not what the "
                              f"request log holds ({len(self.request_log)}/{logged_errors})")
        return self


class Score(Model):
    """AgentPerf-style headline under the SLO."""

    max_agents: NonNegativeInt = Field(description="Largest agent count for which the SLO held.")
    single_agent_tps: NonNegative
    output_tps_per_gpu_at_slo: NonNegative | None = None


class Shard(Model):
    """One pod's part of a run: agents whose number modulo `count` is `index`."""

    index: NonNegativeInt
    count: PositiveInt


class BenchResult(Model):
    kind: Literal["BenchResult"] = "BenchResult"
    version: Literal[1] = 1
    stack: StackRef
    controls: Controls
    fingerprint: str = Field(description="sha256 of the canonical JSON of controls.")
    endpoint: str
    started: str = Field(description="RFC 3339 UTC.")
    finished: str
    interrupted: bool = False
    served_model: str | None = Field(None, description="The model the endpoint served (GET /v1/models), when "
                                     "it said.")
    client: ClientInfo
    simulation: Simulation | None = None
    points: tuple[Point, ...]
    score: Score | None = None
    shard: Shard | None = Field(None, description="Set when one pod of `stackpin bench job` wrote it; "
                                "`stackpin bench merge` combines the shards.")
    acceptance_from: str | None = Field(None, description="Where the points' draft acceptance was read (the "
                                        "endpoint's /metrics), or why there is none (`not exposed: ...`); none: a "
                                        "result from before bench run read it.")

    @model_validator(mode="after")
    def _fingerprinted(self) -> BenchResult:
        if self.fingerprint != controls_fingerprint(self.controls):
            raise Invalid("fingerprint", "fingerprint is not the sha256 of the controls (edited by hand?)")
        return self


def controls_fingerprint(controls: Controls) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(canonical_json(controls.model_dump(mode="json"))).hexdigest()


def result_json(result: BenchResult) -> str:
    """The file's text: sorted keys, 2-space indent, trailing newline."""
    import json

    return json.dumps(result.model_dump(mode="json"), sort_keys=True, indent=2) + "\n"
