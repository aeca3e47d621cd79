"""What binds a result to a stack: the lock's stack digest and GPU count, and the controls (model
build, precision, engine versions, trace digest, agent counts, SLO) with their fingerprint."""

from __future__ import annotations

import re

from stackpin.backends import engine_of
from stackpin.bench.result import Controls, Slo, StackRef
from stackpin.deploy.source import StackSource
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock


def stack_ref(source: StackSource) -> StackRef:
    from stackpin.profile.topology import topology_of

    lock = source.lock
    profile = lock.stack_profile
    deployment = source.origin.rpartition("@")[0] if source.revision is not None else None
    return StackRef(digest=lock.stack_digest, name=lock.metadata.name, deployment=deployment,
                    revision=source.revision, platform=str(profile.spec.target.platform),
                    gpus=topology_of(profile).gpus)


def speculative_method(lock: StackLock) -> str | None:
    """The speculative method the stack's decoding pool drafts with, as stackpin names it (the simulator's and
    the model catalog's names); None when it drafts nothing. A measured acceptance is of this method."""
    from stackpin.profile.topology import topology_of

    profile = lock.stack_profile
    topology = topology_of(profile)
    pool = topology.by_role.get(topology.decode_role)
    spec = profile.speculative_for(pool.spec) if pool is not None else profile.spec.speculative
    return engine_of(profile).speculative_kind(spec.method) if spec.method and spec.k else None


def drafting(lock: StackLock) -> str | None:
    """What of the decoding pool's speculative settings moves draft acceptance besides the text: the method, the
    draft model, draft and rejection sampling (not how many tokens a step drafts: compare holds sides to the
    positions both drafted). Two results drafting alike measured one workload when their acceptance agrees."""
    from stackpin.profile.topology import topology_of

    method = speculative_method(lock)
    if method is None:
        return None
    profile = lock.stack_profile
    topology = topology_of(profile)
    pool = topology.by_role.get(topology.decode_role)
    spec = profile.speculative_for(pool.spec) if pool is not None else profile.spec.speculative
    parts = [method]
    if spec.draft_model:
        parts.append(f"draft model {spec.draft_model}@{spec.draft_revision or '?'}")
    parts.append(f"draft sampling {spec.draft_sample_method or 'default'}")
    parts.append(f"rejection sampling {spec.rejection_sample_method or 'default'}")
    return ", ".join(parts)


def controls(lock: StackLock, trace_digest: str, agents: tuple[int, ...], slo: Slo | None) -> Controls:
    resolved = lock.resolved
    engine = engine_of(lock.stack_profile)
    engines = {"ai-dynamo": resolved.engines.dynamo, engine.distribution: lock.stack_profile.spec.engine_version,
               "flashinfer-python": resolved.engines.flashinfer, "nixl": resolved.engines.nixl}
    return Controls(model=f"{resolved.model.id}@{resolved.model.revision}",
                    precision=str(lock.stack_profile.spec.model.weights), engines=engines,
                    trace_digest=trace_digest, agents=tuple(sorted(set(agents))), slo=slo)


_DURATION = re.compile(r"^([0-9]*\.?[0-9]+)(ms|s|m)?$")


def parse_seconds(text: str, what: str) -> float:
    """`10`, `10s`, `500ms`, `2m` -> seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise StackpinError(f"{what} {text!r}: give seconds, e.g. 10s, 500ms or 2m")
    return float(match[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match[2]]  # digits only: finite


def service_slo(lock: StackLock) -> Slo:
    """The SLO a stack is tuned for: its profile's `spec.service` (per-agent tok/s, TTFT at p90)."""
    service = lock.stack_profile.spec.service
    return Slo(tps=float(service.per_agent_tok_s), ttft_s=float(service.ttft_seconds))


def slo_option(text: str | None, lock: StackLock) -> Slo | None:
    """--slo as given; absent, the profile's spec.service; `none`, no SLO (no score, no search)."""
    if text is None:
        return service_slo(lock)
    return None if text.strip().lower() == "none" else parse_slo(text)


def parse_slo(text: str) -> Slo:
    """`tps=80,ttft=10s[,percentile=p90]` -> Slo."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("tps", "ttft", "percentile"):
            raise StackpinError(f"--slo {text!r}: write tps=TOKENS_PER_S,ttft=SECONDS[,percentile=p50|p90|p99]")
        fields[key.strip()] = value.strip()
    if "tps" not in fields or "ttft" not in fields:
        raise StackpinError(f"--slo {text!r}: both tps= and ttft= are needed")
    try:
        tps = float(fields["tps"])
    except ValueError:
        raise StackpinError(f"--slo tps={fields['tps']!r}: not a number") from None
    percentile = fields.get("percentile", "p90")
    if percentile not in ("p50", "p90", "p99") or not 0 < tps < float("inf"):  # NaN fails both comparisons
        raise StackpinError(f"--slo {text!r}: tps must be > 0 and percentile one of p50, p90, p99")
    ttft = parse_seconds(fields["ttft"], "--slo ttft")
    if ttft <= 0:
        raise StackpinError(f"--slo {text!r}: ttft must be > 0")
    return Slo(tps=tps, ttft_s=ttft, percentile=percentile)  # type: ignore[arg-type]


def parse_threshold(text: str, option: str = "--threshold") -> float:
    """`5%` or `0.05` -> 0.05: the smallest relative change that counts."""
    try:
        value = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise StackpinError(f"{option} {text!r}: give a fraction (0.05) or a percentage (5%)") from None
    if not 0 <= value < 10:  # NaN fails it too
        raise StackpinError(f"{option} {text!r}: out of range")
    return value


def parse_agents(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise StackpinError(f"--agents {text!r}: give agent counts separated by commas, e.g. 1,8,32") from None
    if not counts or counts[0] < 1:
        raise StackpinError(f"--agents {text!r}: agent counts are positive integers")
    return counts
