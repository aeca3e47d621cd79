"""A result's headline in one line, for `stackpin history` (and anything else that lists results)."""

from __future__ import annotations

from typing import Any

from stackpin.bench.result import BenchResult
from stackpin.bench.stats import measured, prompts_off, slo_edge


def headline_data(result: BenchResult) -> dict[str, Any]:
    valid = measured(result.points)
    single = next((p for p in valid if p.agents == 1 and p.agent_tps.count), None)
    best = max(valid, key=lambda p: p.output_tps_per_gpu, default=None)
    return {
        "fingerprint": result.fingerprint,
        "simulated": result.simulation is not None,
        "interrupted": result.interrupted,
        "promptsOff": prompts_off(r for p in result.points for r in p.request_log)[0],
        "invalidPoints": len(result.points) - len(valid),
        "singleAgentTps": (result.score.single_agent_tps if result.score else
                           single.agent_tps.mean if single else None),
        "maxAgentsUnderSlo": result.score.max_agents if result.score else None,
        # the score is a lower bound where the curve never crossed the SLO at a valid point, a bracket where
        # it crossed past a gap: recomputed from the points, never the file's word
        "sloEdgeBound": bool(edge.bound) if (edge := slo_edge(result.points, result.controls.slo)
                                            if result.controls.slo else None) else None,
        "outputTpsPerGpuAtSlo": result.score.output_tps_per_gpu_at_slo if result.score else None,
        "peakOutputTpsPerGpu": best.output_tps_per_gpu if best else None,
    }


def headline(result: BenchResult) -> str:
    data = headline_data(result)
    parts = []
    if data["singleAgentTps"] is not None:
        parts.append(f"1 agent {data['singleAgentTps']:.0f} tok/s")
    if data["maxAgentsUnderSlo"] is not None:
        slo = result.controls.slo
        at = f"{slo.tps:g} tok/s" if slo else "SLO"
        at_least = ">= " if data["sloEdgeBound"] else ""
        parts.append(f"{at_least}{data['maxAgentsUnderSlo']} agents at {at}")
        if data["outputTpsPerGpuAtSlo"] is not None:
            parts.append(f"{at_least}{data['outputTpsPerGpuAtSlo']:.1f} tok/s/GPU")
    elif data["peakOutputTpsPerGpu"] is not None:
        parts.append(f"peak {data['peakOutputTpsPerGpu']:.1f} tok/s/GPU")
    flags = [f for f, on in (("simulated", data["simulated"]), ("interrupted", data["interrupted"]),
                             ("prompts not the trace's size", data["promptsOff"]),
                             (f"{data['invalidPoints']} point(s) invalid", data["invalidPoints"])) if on]
    return ", ".join(parts) + (f" ({', '.join(flags)})" if flags else "")
