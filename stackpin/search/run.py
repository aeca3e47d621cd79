"""`stackpin search`, the library twin: enumerate around the base, prune by every validate rule, merge what
neither validate nor the model can tell apart, predict the survivors at the SLO, rank, take the Pareto
front and the top picks. `search()` returns typed records; `write_picks` (write.py) puts the picks beside
the base; the CLI only prints. Part 3's verification takes `SearchResult.picks` (each pick's profile, its
predicted figures and where it was written) and measures them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stackpin.bench.result import Slo
from stackpin.errors import StackpinError
from stackpin.profile.loader import LoadedProfile, load_profile
from stackpin.profile.model import StackProfile
from stackpin.search.predict import Measured, Prediction, predict_stack, stack_key
from stackpin.search.prune import Checked, Reason, base_warnings, check, reasons
from stackpin.search.space import Candidate, Space, candidates
from stackpin.sim.curve import Workload
from stackpin.validate import Finding, Severity
from stackpin.yamlio import FieldPath


@dataclass(frozen=True)
class Scored:
    """A candidate that passed validate, with its prediction (or why the model could not predict it)."""

    index: int  # 0: the base
    label: str
    edits: tuple[tuple[FieldPath, Any], ...]
    document: dict[str, Any]
    profile: StackProfile
    warnings: tuple[Finding, ...]  # what validate still says (the base's own warnings)
    prediction: Prediction | None
    unpredicted: str  # why the model refused it ("" when predicted)
    merged: int  # candidates that validate and the model could not tell from this one
    recapture: bool = False  # cannot keep the base's pinned autotune cache: needs a new capture (space.Candidate)

    @property
    def meets(self) -> bool:
        return self.prediction is not None and self.prediction.meets


@dataclass(frozen=True)
class Pick:
    """One of the top picks: what part 3 verifies."""

    rank: int  # 1-based: the front's members (base left out) by tok/s per GPU, then the next best
    scored: Scored
    path: Path | None  # the written profile (None until written)


@dataclass(frozen=True)
class SearchResult:
    base: Path
    base_name: str
    slo: Slo
    model: str
    racks: int
    workload: Workload
    enumerated: int  # candidates the space gave (the base included)
    pruned: int
    reasons: tuple[Reason, ...]
    merged: int  # survivors folded into another that validate and the model cannot tell apart
    survivors: tuple[Scored, ...]  # ranked: meeting the SLO first, by tok/s per GPU, then TTFT, then fewer edits
    front: tuple[int, ...]  # indices into survivors: the Pareto front of those meeting the SLO
    picks: tuple[Pick, ...]
    validate_s: float
    predict_s: float
    measured: Measured | None = None  # the measured acceptance given (`--acceptance`), None: the model's throughout

    @property
    def base_scored(self) -> Scored | None:
        return next((s for s in self.survivors if s.index == 0), None)


def _rank_key(s: Scored) -> tuple[Any, ...]:
    p = s.prediction
    if p is None or not p.meets:
        return (1, 0.0, 0.0, len(s.edits), s.index)
    return (0, -p.tps_per_gpu, p.ttft_s, len(s.edits), s.index)


def pareto(ranked: list[Scored]) -> tuple[int, ...]:
    """Of those meeting the SLO: no other has both more tok/s per GPU and more tok/s per agent (at equal
    figures the better-ranked stands for both)."""
    out: list[int] = []
    best_agent = -1.0
    for i in sorted((i for i, s in enumerate(ranked) if s.meets), key=lambda i: _front_key(ranked[i])):
        p = ranked[i].prediction
        assert p is not None
        if p.agent_tps > best_agent:
            out.append(i)
            best_agent = p.agent_tps
    return tuple(sorted(out))


def _front_key(s: Scored) -> tuple[Any, ...]:
    p = s.prediction
    assert p is not None
    return (-p.tps_per_gpu, -p.agent_tps, p.ttft_s, len(s.edits), s.index)


def _findings_key(item: Checked) -> tuple[tuple[str, str, str], ...]:
    return tuple(sorted((f.code, f.path, f.message) for f in item.findings))


def _figures(p: Prediction | None, why: str) -> tuple[Any, ...]:
    """What the model tells of a candidate, to 6 significant figures (float noise is not a difference)."""
    if p is None:
        return (why,)
    return (p.meets, p.limited_by, *(float(f"{x:.6g}") for x in (p.tps_per_gpu, p.agent_tps, p.ttft_s, p.agents,
                                                                   p.single_agent_tps)), p.gpus, p.acceptance)


def search(base_path: Path, slo: Slo, workload: Workload, *, racks: int = 1, top: int = 3, model: str = "roofline",
           params: dict[str, Any] | None = None, limit: int | None = None, space: Space | None = None,
           measured: Measured | None = None) -> SearchResult:
    """Search the stack space around the profile at `base_path` for `slo` on `workload`. `limit`: enumerate
    at most that many candidates (the bench's sample); None: all of them. `space`: another space than
    space.yaml's (tests). `measured`: draft acceptance a bench run measured, taken over the model's for the
    candidates drafting alike (predict.acceptance_for)."""
    from stackpin.sim.models import check_model
    from stackpin.sim.stack import profile_stack
    from stackpin.validate import run_rules

    if racks < 1:
        raise StackpinError(f"--racks {racks}: give a whole number of racks, at least 1")
    if top < 1:
        raise StackpinError(f"--top {top}: give at least 1")
    check_model(model)
    base = load_profile(base_path)
    allowed = base_warnings(run_rules(base))
    started = time.perf_counter()
    checked = []
    for n, candidate in enumerate(candidates(base, racks, space)):
        if limit is not None and n >= limit:
            break
        checked.append(check(base, candidate, allowed))
    validated = time.perf_counter()
    base_check = checked[0]
    if base_check.profile is None:
        raise StackpinError(f"{base_path}: the base profile does not load: {base_check.reason}")
    survivors, merged = _predict(base, [c for c in checked if not c.pruned_by or c.candidate.index == 0],
                                 slo, workload, model, params, profile_stack, measured)
    predicted = time.perf_counter()
    ranked = sorted(survivors, key=_rank_key)
    front = pareto(ranked)
    # The front first (each trades tok/s per GPU for per-agent speed differently), then the next best: picks
    # that differ only in the fourth digit would verify the same thing three times.
    order = [ranked[i] for i in front] + [s for i, s in enumerate(ranked) if i not in front]
    chosen = [s for s in order if s.meets and s.index != 0][:top]
    picks = tuple(Pick(n, s, None) for n, s in enumerate(sorted(chosen, key=_rank_key), 1))
    return SearchResult(
        base=base_path, base_name=base.profile.name, slo=slo, model=model, racks=racks, workload=workload,
        enumerated=len(checked), pruned=sum(1 for c in checked if c.pruned_by and c.candidate.index != 0),
        reasons=reasons([c for c in checked if c.candidate.index != 0]), merged=merged, survivors=tuple(ranked),
        front=front, picks=picks, validate_s=validated - started, predict_s=predicted - validated, measured=measured)


def _predict(base: LoadedProfile, items: list[Checked], slo: Slo, workload: Workload, model: str,
             params: dict[str, Any] | None, profile_stack: Any, measured: Measured | None = None
             ) -> tuple[list[Scored], int]:
    """Predict the surviving candidates; those with the same findings that the model predicts alike are one
    (validate and the model cannot tell them apart), the one with the fewest edits standing for all. A stack
    the model reads alike is predicted once."""
    cache: dict[str, tuple[Prediction | None, str]] = {}
    groups: dict[tuple[Any, ...], Scored] = {}
    merged = 0
    for item in items:
        assert item.profile is not None
        candidate: Candidate = item.candidate
        warnings = tuple(f for f in item.findings if f.severity != Severity.info)
        try:
            stack = profile_stack(item.profile, base.profile.name)
        except StackpinError as exc:
            prediction, why = None, exc.message
        else:
            key = stack_key(stack)
            if key not in cache:
                try:
                    cache[key] = (predict_stack(stack, slo, workload, model, params, measured), "")
                except StackpinError as exc:
                    cache[key] = (None, exc.message)
            prediction, why = cache[key]
        scored = Scored(candidate.index, candidate.label, candidate.edits, candidate.document, item.profile,
                        warnings, prediction, why, 0, candidate.recapture)
        group = (_findings_key(item), _figures(prediction, why)) if candidate.index != 0 else ("base",)
        first = groups.get(group)
        if first is None:
            groups[group] = scored
            continue
        merged += 1
        keep = min(first, scored, key=lambda s: (len(s.edits), s.index))
        groups[group] = replace(keep, merged=first.merged + 1)
    return list(groups.values()), merged
