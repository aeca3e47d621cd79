"""proposal.md: the proposal as a pull request body (title line first), from the Proposal and the stack diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stackpin.backends import engine
from stackpin.diff.model import ChangeKind, StackDiff
from stackpin.upgrade.model import Proposal


def code_cell(value: Any) -> str:
    """A value as inline code in a markdown table cell."""
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
        lines.append(f"| {label} | {code_cell(old)} | {code_cell(new)}{'' if old == new else ' (changed)'} |")
    added = ", ".join(code_cell(a) for a in p.added) or "none (the catalogs had every release)"
    return [*lines, "", f"Releases added to the catalog `{p.catalog}`: {added}."]


def _translations(p: Proposal) -> list[str]:
    out: list[str] = []
    if p.rewrites:
        out += ["", "## Rewritten", "", "Flags the release renamed, renamed in the candidate:", ""]
        out += [f"- {code_cell(r.path)}: {code_cell(r.old)} -> {code_cell(r.new)} ({_cell(r.source)})"
                for r in p.rewrites]
    if p.pinned:
        out += ["", "## Defaults pinned", "", "Defaults the release changes that the stack relied on, written out "
                "with their old value so the candidate runs as the current stack does:", ""]
        out += [f"- {code_cell(d.path)}: {code_cell(d.value)} ({code_cell(d.flag)}: the default was "
                f"{code_cell(d.old_default)}, is {code_cell(d.new_default)})" for d in p.pinned]
    if p.blockers:
        out += ["", "## Blockers", "", "What the proposal cannot translate; a person has to decide. No candidate "
                "profile was written.", ""]
        out += [f"- {code_cell(b.path)}: {_cell(b.message)}{f' ({b.code})' if b.code else ''}" for b in p.blockers]
    return out


def _findings(p: Proposal) -> list[str]:
    what = "the candidate has" if p.candidate_profile else "the upgrade causes (`validate --upgrade-to`)"
    if not p.findings:
        return ["", "## Findings", "", f"None: no finding {what} that the current stack lacks."]
    out = ["", "## Findings", "", f"Validation findings {what} that the current stack does not have:", ""]
    for f in p.findings:
        hint = f" (hint: {_cell(f.hint)})" if f.hint else ""
        out.append(f"- {f.severity} {f.code} {code_cell(f.path)}: {_cell(f.message)}{hint}")
    return out


def _diff(diff: StackDiff | None) -> list[str]:
    if diff is None:
        return []
    out = ["", "## Stack diff", "", f"`stackpin diff {diff.a.source} {diff.b.source}`: {_cell(diff.one_line())}", ""]
    return out + diff_table(diff, "current", "candidate")


def diff_table(diff: StackDiff, a: str, b: str) -> list[str]:
    """A stack diff as a markdown table, one row per change; `a` and `b` head the two sides' columns."""
    out = [f"| group | field | {a} | {b} | rollout |", "| --- | --- | --- | --- | --- |"]
    for group in diff.groups:
        for change in group.changes:
            old = "(unset)" if change.kind == ChangeKind.added else code_cell(change.old)
            new = "(unset)" if change.kind == ChangeKind.removed else code_cell(change.new)
            out.append(f"| {group.id.value} | {code_cell(change.path)} | {old} | {new} | {change.impact.value} |")
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
