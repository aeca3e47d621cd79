"""Time to first token at each point of the steady-state curve (curve.py), in closed form from the same
step model: what `stackpin search` holds a stack's TTFT limit to. Kept apart from curve.py so the curve's
terms can change without this, and this without them; both read the step model alone.

At a concurrency of b running sequences per decode engine a turn's uncached prompt (the workload's
`prefill` tokens) must be prefilled before its first token:

- colocated: chunked into the step budget the decoding sequences leave (max-num-batched-tokens less
  b x (1 + k)); the turns that end meanwhile (b x accepted / output a step, as curve() counts them)
  share that budget, so a prompt of P tokens needs P / (budget - r P) steps (processor sharing), each
  step timed with its decode batch and its prefill chunk. A budget the arrivals already fill never
  drains: infinite.
- disaggregated: the prefill engines serve turns in chunk-sized steps (its own max-num-batched-tokens);
  arrivals at the decode pool's output rate queue as M/D/1 at each prefill engine (mean wait
  rho / (2 (1 - rho)) x service), then the KV moves to decode (kv_transfer_time) and one decode step
  gives the first token. rho >= 1 never drains: infinite.

A first estimate, not fitted to a measured TTFT: it leaves out prefix-cache lookups, the router's
queue, and the spread of prompt lengths (it is the mean prompt's TTFT, not a percentile's).
"""

from __future__ import annotations

import math
from typing import Any

from stackpin.profile.topology import Role
from stackpin.sim.curve import CurvePoint, Workload
from stackpin.sim.models import step_model
from stackpin.sim.roofline import accepted_tokens, load_params
from stackpin.sim.stack import SimStack


def ttft_curve(stack: SimStack, points: list[CurvePoint], workload: Workload, params: dict[str, Any] | None = None,
               model: str = "roofline", acceptance: tuple[float, ...] | None = None) -> list[float]:
    """TTFT in seconds at each of `points` (curve(stack, workload, params, model, acceptance)'s, same order);
    `acceptance`: the measured per-position rates the curve was drawn with."""
    params = params or load_params()
    pool = stack.decode
    dec = step_model(model, stack, pool, params, acceptance)
    prompt = max(workload.prefill, 1.0)
    out = []
    if stack.colocated:
        for p in points:
            kv = int(p.batch * workload.context)
            budget = pool.max_batched_tokens - p.batch * (1 + p.k)
            arrivals = p.batch * accepted_tokens(dec.alpha, p.k) / workload.output  # turns ending per step
            share = budget - arrivals * prompt  # budget left for one prompt once the others take theirs
            if share <= 0:
                out.append(math.inf)
                continue
            steps = max(1, math.ceil(prompt / share))
            chunk = int(min(budget, prompt / steps + arrivals * prompt))
            out.append(steps * dec.step_time(p.batch, p.k, kv, chunk))
        return out
    pre_pool = stack.pool(Role.prefill)
    pre = step_model(model, stack, pre_pool, params, acceptance)
    chunk = pre_pool.max_batched_tokens
    steps = max(1, math.ceil(prompt / chunk))
    service = steps * pre.step_time(0, 0, int(workload.context), int(min(chunk, prompt / steps)))
    transfer = dec.kv_transfer_time(int(workload.context))
    for p in points:
        turns_per_s = p.output_tps_per_gpu * stack.gpus / workload.output
        rho = turns_per_s * service / pre_pool.engines
        if rho >= 1:
            out.append(math.inf)
            continue
        wait = rho / (2 * (1 - rho)) * service
        out.append(service + wait + transfer + dec.step_time(p.batch, p.k, int(p.batch * workload.context)))
    return out
