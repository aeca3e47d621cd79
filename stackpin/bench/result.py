"""A bench result: what one `stackpin bench run` (or the simulator behind it) measured, bound to a stack.

The contract between the replay client (writes), compare/gate, plot, report and plan (read). One JSON
file a run. `stack.digest` is the lock's stack digest; `controls` are what must match for two results
to be compared side by side, and `fingerprint` is the sha256 of their canonical JSON, so a reader can
tell at a glance whether two results are comparable and name the field that differs when not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from stackpin.lock.canonical import canonical_json

RESULT_KIND = "BenchResult"
RESULT_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Slo(_Model):
    """The AgentPerf-style service target: each agent's output speed and its time to first token."""

    tps: float = Field(gt=0, description="Per-agent output tokens/s every agent must hold.")
    ttft_s: float = Field(gt=0, description="TTFT limit in seconds.")
    percentile: Literal["p50", "p90", "p99"] = Field("p90", description="Which TTFT percentile must hold.")


class Dist(_Model):
    """A distribution summary; values in the unit its field name says."""

    count: NonNegativeInt
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


class Controls(_Model):
    """What must be equal for two results to be compared side by side."""

    model: str = Field(description="Model id and revision: id@revision.")
    precision: str = Field(description="Weights precision as served (fp8, fp4, ...).")
    engines: dict[str, str] = Field(description="Distribution -> version (vllm, flashinfer-python, ai-dynamo).")
    trace_digest: str = Field(description="sha256 of the trace file's bytes.")
    agents: tuple[PositiveInt, ...] = Field(description="The agent counts asked for (search points excluded).")
    slo: Slo | None = None


class StackRef(_Model):
    digest: str = Field(description="The lock's stack digest.")
    name: str = Field(description="The lock's metadata.name.")
    deployment: str | None = Field(None, description="namespace/name@platform when benched from history.")
    revision: PositiveInt | None = None
    platform: str = Field(description="Catalog platform key (gb300-nvl72, vera-rubin-nvl72, ...).")
    gpus: PositiveInt = Field(description="GPUs the stack occupies (from the lock's topology).")


class ClientInfo(_Model):
    workers: PositiveInt
    cpu_seconds: NonNegativeFloat
    saturated: bool = Field(description="True when the client could not keep up; the numbers are then a floor.")
    note: str = ""
    busy_fraction: float | None = Field(None, description="Largest CPU time / wall time of one client process.")
    loop_lag_p99_s: float | None = Field(None, description="p99 event-loop lag: how late the client's timestamps "
                                         "can be.")


class Simulation(_Model):
    """Present when the endpoint was `stackpin sim serve`: answers are simulated, not measured hardware."""

    model: str = Field(description="Step-time model: roofline or aiconfigurator.")
    substitutions: tuple[str, ...] = ()
    speed: float = Field(1.0, gt=0, description="The simulator's time scale; the result's times are scaled back "
                         "by it (they are the simulated stack's).")


class Request(_Model):
    """One request as the client saw it; times in seconds from the run's start."""

    agent: NonNegativeInt
    session: str
    turn: NonNegativeInt
    start_s: float
    ttft_s: float | None = None
    end_s: float | None = None
    prompt_tokens: NonNegativeInt = 0
    cached_tokens: NonNegativeInt = 0
    output_tokens: NonNegativeInt = 0
    itl_mean_s: float | None = None
    error: str | None = Field(None, description="One line: what failed (http 500, stalled, dropped, bad SSE).")


class Point(_Model):
    """One concurrency level: `agents` agents replaying sessions at once."""

    agents: PositiveInt
    duration_s: float
    requests: NonNegativeInt
    errors: NonNegativeInt
    ttft_s: Dist
    itl_s: Dist
    agent_tps: Dist = Field(description="Per-agent output tokens/s while generating (TTFT excluded).")
    agent_tps_samples: tuple[float, ...] = Field(description="One per agent, for bootstrap intervals.")
    output_tps: float = Field(description="All agents' output tokens per second of wall time.")
    output_tps_per_gpu: float
    cache_hit_rate: float | None = Field(None, description="Cached prompt tokens / prompt tokens.")
    slo_met: bool | None = None
    searched: bool = Field(False, description="Added by the SLO search, not one of the asked agent counts.")
    request_log: tuple[Request, ...] = ()


class Score(_Model):
    """AgentPerf-style headline under the SLO."""

    max_agents: NonNegativeInt = Field(description="Largest agent count for which the SLO held.")
    single_agent_tps: float
    output_tps_per_gpu_at_slo: float | None = None


class Shard(_Model):
    """One pod's part of a run: agents whose number modulo `count` is `index`."""

    index: NonNegativeInt
    count: PositiveInt


class BenchResult(_Model):
    kind: Literal["BenchResult"] = "BenchResult"
    version: Literal[1] = 1
    stack: StackRef
    controls: Controls
    fingerprint: str = Field(description="sha256 of the canonical JSON of controls.")
    endpoint: str
    started: str = Field(description="RFC 3339 UTC.")
    finished: str
    interrupted: bool = False
    client: ClientInfo
    simulation: Simulation | None = None
    points: tuple[Point, ...]
    score: Score | None = None
    shard: Shard | None = Field(None, description="Set when one pod of `stackpin bench job` wrote it; "
                                "`stackpin bench merge` combines the shards.")


def controls_fingerprint(controls: Controls) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(canonical_json(controls.model_dump(mode="json"))).hexdigest()


def read_result(path: Path) -> BenchResult:
    """Read a result file; a malformed one is one located problem (exit 2) naming the file and field."""
    import json

    from pydantic import ValidationError

    from stackpin.errors import InputError, Location, Problem, StackpinError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise StackpinError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError([Problem(Location(str(path), exc.lineno, exc.colno), "", f"not JSON: {exc.msg}")]) from None
    try:
        return BenchResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError([Problem(Location(str(path)), where, first["msg"])]) from None


def result_json(result: BenchResult) -> str:
    """The file's text: sorted keys, 2-space indent, trailing newline."""
    import json

    return json.dumps(result.model_dump(mode="json"), sort_keys=True, indent=2) + "\n"
