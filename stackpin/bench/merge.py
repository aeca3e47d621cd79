"""`stackpin bench merge`: the pods' parts of one run (`stackpin bench job`) as one result.

Refused unless the parts are one run's: the same controls (fingerprint), the same stack, shards
0..N-1 of the same N, each once. Each agent count's requests are pooled and its numbers computed
again from them (throughput over the longest pod's time); the score is taken over the measured
counts (pods do not search). A pod that stopped early makes the merged result interrupted.
"""

from __future__ import annotations

from collections.abc import Sequence

from stackpin.bench.compare import ControlsDiffer, control_differences
from stackpin.bench.result import BenchResult, ClientInfo
from stackpin.bench.stats import build_point, measured, score
from stackpin.errors import StackpinError


def merge(parts: Sequence[BenchResult], names: Sequence[str]) -> BenchResult:
    if not parts:
        raise StackpinError("nothing to merge")
    first = parts[0]
    for part, name in zip(parts, names, strict=True):
        if part.shard is None:
            raise StackpinError(f"{name}: not one pod's part of a run (no shard); only `stackpin bench job` "
                                "results merge")
        if part.stack.digest != first.stack.digest:
            raise StackpinError(f"{name}: measured stack {part.stack.digest}, {names[0]} {first.stack.digest}")
        if part.fingerprint != first.fingerprint:
            for field, a, b in control_differences(first, part):
                raise ControlsDiffer(field, a, b, f"{names[0]} and {name}")
            raise StackpinError(f"{name}: controls differ from {names[0]}'s (fingerprint {part.fingerprint} vs "
                                f"{first.fingerprint}: agent counts or engines)")
    count = first.shard.count if first.shard else 0
    indices = sorted(p.shard.index for p in parts if p.shard)
    if any(p.shard is not None and p.shard.count != count for p in parts) or indices != list(range(count)):
        raise StackpinError(f"the parts are shards {indices} of {[p.shard.count for p in parts if p.shard]}: "
                            f"give each of 0..{count - 1} of one run once")
    slo = first.controls.slo
    points = []
    interrupted = any(p.interrupted for p in parts)
    for agents in sorted({p.agents for part in parts for p in part.points}):
        shares = [pt for part in parts for pt in part.points if pt.agents == agents]
        expected = min(agents, count)  # pods with at least one agent at this count
        interrupted |= len(shares) < expected
        requests = [r for pt in shares for r in pt.request_log]
        busy = [pt.client_busy for pt in shares if pt.client_busy is not None]
        lags = [pt.loop_lag_p99_s for pt in shares if pt.loop_lag_p99_s is not None]
        late = [pt.server_late_s for pt in shares if pt.server_late_s is not None]
        point = build_point(agents, max(pt.duration_s for pt in shares), requests, first.stack.gpus, slo,
                            searched=all(pt.searched for pt in shares), busy=max(busy, default=None),
                            lag_s=max(lags, default=None), lag_limit_s=first.client.lag_limit_s,
                            busy_limit=first.client.busy_limit, server_late_s=max(late, default=None),
                            host_share_limit=first.client.host_share_limit)
        # Every pod read the one endpoint's counters around its own share of the point: each difference holds
        # all pods' drafts over that pod's time, so they overlap and do not add; the longest span is kept.
        counted = [pt.acceptance for pt in shares if pt.acceptance is not None]
        if counted:
            point = point.model_copy(update={"acceptance": max(counted, key=lambda a: a.drafts)})
        points.append(point)
    client = ClientInfo(
        workers=sum(p.client.workers for p in parts), cpu_seconds=round(sum(p.client.cpu_seconds for p in parts), 3),
        saturated=any(p.client.saturated for p in parts),
        note="; ".join(f"pod {p.shard.index if p.shard else '?'}: {p.client.note}" for p in parts if p.client.note),
        busy_fraction=max((p.client.busy_fraction for p in parts if p.client.busy_fraction is not None), default=None),
        loop_lag_p99_s=max((p.client.loop_lag_p99_s for p in parts if p.client.loop_lag_p99_s is not None),
                           default=None), lag_limit_s=first.client.lag_limit_s, busy_limit=first.client.busy_limit,
        host_share_limit=first.client.host_share_limit)
    return first.model_copy(update={
        "started": min(p.started for p in parts), "finished": max(p.finished for p in parts),
        "interrupted": interrupted, "client": client, "points": tuple(points),
        "score": score(points, slo) if slo and measured(points) else None, "shard": None})
