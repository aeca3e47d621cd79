"""A search result in words: the JSON record (`search -o json`, search.json) and the proposal markdown
(search.md). Every figure is labelled as the named model's prediction; none is a measurement."""

from __future__ import annotations

import json
import math
from typing import Any

from stackpin.diff.model import StackDiff
from stackpin.search.predict import Prediction
from stackpin.search.run import Scored, SearchResult
from stackpin.upgrade.markdown import code_cell, diff_table


def predicted_label(model: str) -> str:
    return f"predicted ({model} step model, not measured)"


def _number(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else round(x, 3)


def prediction_data(p: Prediction | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"model": p.model, "meetsSlo": p.meets, "tokSPerGpu": _number(p.tps_per_gpu),
            "tokSPerAgent": _number(p.agent_tps), "ttftS": _number(p.ttft_s), "agents": _number(p.agents),
            "gpus": p.gpus, "limitedBy": p.limited_by, "singleAgentTokS": _number(p.single_agent_tps),
            "acceptance": p.acceptance or None}


def acceptance_note(r: SearchResult) -> str:
    """Which draft acceptance the predictions took, in one line."""
    m = r.measured
    if m is None:
        return "the model's draft acceptance throughout (published where sim/roofline.yaml has it, else estimated)"
    return (f"measured from {m.source} ({m.text()}{', ' + m.drafting if m.drafting else ''}) for candidates drafting "
            f"{m.method} k={m.drafts}; the model's for every other method and draft count")


RECAPTURE = ("needs a new autotune capture: the base's pinned autotune cache belongs to the engine config it was "
             "captured on (the engine keys it by its config hash), and this pick runs another, so it is written with "
             "autotune.mode: tune and no cache (tuning at every start, SP203) and predicted so; capture one for it "
             "(`stackpin autotune capture-job`, `stackpin autotune pack --push`), pin it and set mode: replay")


def _edit_text(path: tuple[Any, ...], value: Any) -> str:
    return f"{'.'.join(map(str, path))}: {json.dumps(value, sort_keys=True)}"


def scored_data(s: Scored) -> dict[str, Any]:
    return {"candidate": s.index, "label": s.label, "edits": [_edit_text(p, v) for p, v in s.edits],
            "predicted": prediction_data(s.prediction), "unpredicted": s.unpredicted or None,
            "warnings": [f"{f.code} {f.path}: {f.message}" for f in s.warnings], "alike": s.merged,
            "needsAutotuneCapture": s.recapture}


def result_data(r: SearchResult) -> dict[str, Any]:
    """Stable keys; `picks` is what part 3 (verify on the bed or a cluster) reads."""
    base = r.base_scored
    return {
        "base": str(r.base), "slo": {"tps": r.slo.tps, "ttftS": r.slo.ttft_s}, "model": r.model,
        "figures": predicted_label(r.model), "racks": r.racks, "acceptance": acceptance_note(r),
        "workload": {"context": round(r.workload.context, 1), "prefill": round(r.workload.prefill, 1),
                     "output": round(r.workload.output, 1)},
        "candidates": {"enumerated": r.enumerated, "pruned": r.pruned, "alike": r.merged,
                       "predicted": len(r.survivors) - 1,
                       "meetSlo": sum(1 for s in r.survivors if s.meets and s.index)},
        "prunedBy": [{"rule": x.code, "candidates": x.candidates, "example": x.example} for x in r.reasons],
        "baseStack": None if base is None else scored_data(base),
        "front": [scored_data(r.survivors[i]) for i in r.front],
        "picks": [{"rank": p.rank, "path": None if p.path is None else str(p.path), **scored_data(p.scored)}
                  for p in r.picks],
    }


def proposal_json(r: SearchResult) -> str:
    return json.dumps(result_data(r), indent=2, sort_keys=True) + "\n"


def _fig(p: Prediction | None) -> str:
    if p is None:
        return "not predicted"
    if not p.meets:
        return f"misses the SLO ({p.limited_by})"
    return (f"{p.tps_per_gpu:,.0f} tok/s per GPU at {p.agent_tps:.0f} tok/s per agent, TTFT {p.ttft_s:.2f} s, "
            f"{p.agents:,.0f} agents on {p.gpus} GPUs (limited by {p.limited_by})")


def _diff(diff: StackDiff, base: str, path: str) -> list[str]:
    return [f"`stackpin diff {base} {path}`: {diff.one_line()}", "", *diff_table(diff, "base", "pick")]


def proposal_markdown(r: SearchResult, diffs: dict[int, StackDiff]) -> str:
    base = r.base_scored
    meets = sum(1 for s in r.survivors if s.meets and s.index)
    lines = [f"# Search around {r.base} for tps={r.slo.tps:g},ttft={r.slo.ttft_s:g}s on {r.racks} rack(s)", "",
             f"Every figure here is {predicted_label(r.model)}: verify a pick by measuring it before serving it.", "",
             f"{r.enumerated:,} candidates; {r.pruned:,} pruned by validate; {r.merged:,} alike to another "
             f"(validate and the model cannot tell them apart); {len(r.survivors) - 1:,} predicted, {meets:,} "
             "meet the SLO.", "",
             f"Base `{r.base_name}`: {_fig(base.prediction if base else None)}.", "",
             f"Draft acceptance: {acceptance_note(r)}.", ""]
    if r.reasons:
        lines += ["Pruned by (rule: candidates):", ""]
        lines += [f"- {x.code}: {x.candidates:,} ({x.example})" for x in r.reasons[:5]]
        lines.append("")
    for pick in r.picks:
        s = pick.scored
        lines += [f"## Pick {pick.rank}: `{pick.path}`", "", f"{s.label}.", "",
                  f"Why: rank {pick.rank} by tok/s per GPU at the SLO: {_fig(s.prediction)}."]
        if s.prediction is not None and s.prediction.acceptance:
            lines.append(f"Draft acceptance: {s.prediction.acceptance}.")
        if s.recapture:
            lines += ["", f"This pick {RECAPTURE}."]
        if base is not None and base.prediction is not None and base.prediction.meets and s.prediction is not None:
            gain = s.prediction.tps_per_gpu / base.prediction.tps_per_gpu if base.prediction.tps_per_gpu else 0
            lines.append(f"That is {gain:.2f}x the base's predicted tok/s per GPU.")
        lines += ["", "What it changes in the base file:", ""]
        lines += [f"- {code_cell(_edit_text(p, v))}" for p, v in s.edits]
        if s.warnings:
            lines += ["", "Warnings it keeps (the base has them too):", ""]
            lines += [f"- {f.code} {code_cell(f.path)}: {f.message}" for f in s.warnings]
        if pick.rank in diffs:
            lines += ["", *_diff(diffs[pick.rank], str(r.base), str(pick.path))]
        lines.append("")
    return "\n".join(lines)
