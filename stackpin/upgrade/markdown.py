"""proposal.md: the proposal as a pull request body (title line first), from the Proposal and the stack diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stackpin.backends import engine
from stackpin.diff.model import ChangeKind, StackDiff
from stackpin.upgrade.model import Proposal


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def title(p: Proposal) -> str:
    label = engine(p.current.engine).label
    return (f"Upgrade {p.current_profile} to Dynamo {p.candidate.dynamo} ({label} {p.current.release} -> "
            f"{p.candidate.release}, FlashInfer {p.current.flashinfer} -> {p.candidate.flashinfer})")


def _versions(p: Proposal) -> list[str]:
    lines = ["| | current | candidate |", "| --- | --- | --- |"]
    rows = (("Dynamo", "dynamo"), (engine(p.current.engine).label, p.current.engine), ("FlashInfer", "flashinfer"),
            ("NIXL", "nixl"), ("runtime image", "runtime_image"))
    for label, field in rows:
        old, new = getattr(p.current, field), getattr(p.candidate, field)
        lines.append(f"| {label} | {_code(old)} | {_code(new)}{'' if old == new else ' (changed)'} |")
    added = ", ".join(_code(a) for a in p.added) or "none (the catalogs had every release)"
    return [*lines, "", f"Releases added to the catalog `{p.catalog}`: {added}."]


def _translations(p: Proposal) -> list[str]:
    out: list[str] = []
    if p.rewrites:
        out += ["", "## Rewritten", "", "Flags the release renamed, renamed in the candidate:", ""]
        out += [f"- {_code(r.path)}: {_code(r.old)} -> {_code(r.new)} ({_cell(r.source)})" for r in p.rewrites]
    if p.pinned:
        out += ["", "## Defaults pinned", "", "Defaults the release changes that the stack relied on, written out "
                "with their old value so the candidate runs as the current stack does:", ""]
        out += [f"- {_code(d.path)}: {_code(d.value)} ({_code(d.flag)}: the default was {_code(d.old_default)}, "
                f"is {_code(d.new_default)})" for d in p.pinned]
    if p.blockers:
        out += ["", "## Blockers", "", "What the proposal cannot translate; a person has to decide. No candidate "
                "profile was written.", ""]
        out += [f"- {_code(b.path)}: {_cell(b.message)}{f' ({b.code})' if b.code else ''}" for b in p.blockers]
    return out


def _findings(p: Proposal) -> list[str]:
    what = "the candidate has" if p.candidate_profile else "the upgrade causes (`validate --upgrade-to`)"
    if not p.findings:
        return ["", "## Findings", "", f"None: no finding {what} that the current stack lacks."]
    out = ["", "## Findings", "", f"Validation findings {what} that the current stack does not have:", ""]
    for f in p.findings:
        hint = f" (hint: {_cell(f.hint)})" if f.hint else ""
        out.append(f"- {f.severity} {f.code} {_code(f.path)}: {_cell(f.message)}{hint}")
    return out


def _diff(diff: StackDiff | None) -> list[str]:
    if diff is None:
        return []
    out = ["", "## Stack diff", "", f"`stackpin diff {diff.a.source} {diff.b.source}`: {_cell(diff.one_line())}", ""]
    out += ["| group | field | current | candidate | rollout |", "| --- | --- | --- | --- | --- |"]
    for group in diff.groups:
        for change in group.changes:
            old = "(unset)" if change.kind == ChangeKind.added else _code(change.old)
            new = "(unset)" if change.kind == ChangeKind.removed else _code(change.new)
            out.append(f"| {group.id.value} | {_code(change.path)} | {old} | {new} | {change.impact.value} |")
    return out


def _next(p: Proposal, directory: str) -> list[str]:
    if p.blockers:
        return ["", "## Next", "", "Resolve the blockers in the current profile, then propose again:", "",
                "```", f"stackpin upgrade propose {p.current_profile} --to dynamo=={p.candidate.dynamo}", "```"]
    steps = []
    if p.capture_job:
        steps += [f"kubectl apply -f {p.capture_job}   # capture the autotune cache on the candidate's rack",
                  f"stackpin autotune verify CACHE_DIR {p.candidate_profile} --runtime-metadata "
                  "CACHE_DIR/runtime-metadata-worker.json",
                  "stackpin autotune pack CACHE_DIR --push REGISTRY/REPO:TAG   # then pin it: autotune.mode "
                  "replay, autotune.cache"]
    steps += [f"stackpin lock {p.candidate_profile}", f"stackpin upgrade trial {directory}"]
    return ["", "## Next", "", "```", *steps, "```"]


def proposal_markdown(p: Proposal, diff: StackDiff | None, directory: Path) -> str:
    """The pull request body; `directory`: the proposal's, which `upgrade trial` takes."""
    status = (f"Candidate: `{p.candidate_profile}`, the same deployment `{p.deployment}`." if p.candidate_profile
              else f"**Blocked**: no candidate written for `{p.deployment}`; see Blockers.")
    remeasure = ["", "## Must be re-measured", ""] + ([f"- {_cell(r)}" for r in p.remeasure] or ["- nothing"])
    lines = [f"# {title(p)}", "", status, "", "## Versions", "", *_versions(p), *_translations(p), *_findings(p),
             *remeasure, *_diff(diff), *_next(p, str(directory))]
    return "\n".join(lines) + "\n"
