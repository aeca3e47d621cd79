"""`stackpin report`: one self-contained HTML page of a deployment: its revisions, the semantic diff
between consecutive ones (stackpin.diff's StackDiff, as its JSON output holds it) and the bench curves
of the results attached to them (the chart embedded as a base64 PNG; no external URL, no script).

Same history and results, same bytes: nothing on the page depends on when it was made. Results are read
one at a time (each verified against its request logs, then summarised and let go), so a history of
1,000 results costs the memory of one result plus their summaries.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackpin.diff.run import diff_locks
from stackpin.errors import StackpinError
from stackpin.history.model import DeploymentKey, Revision
from stackpin.history.store import HistoryStore
from stackpin.plan.curve import Bound
from stackpin.plan.figure import slo_edge
from stackpin.plan.slo import slo_text
from stackpin.report.attachments import attached_results
from stackpin.report.curves import MAX_CURVES, curve_chart, result_label, slo_speed, slo_ttft
from stackpin.report.summary import ResultSummary, read_summary


@dataclass(frozen=True)
class Report:
    html: str
    revisions: int
    results: int


def _value(value: Any) -> str:
    if value is None:
        return "(unset)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _revision_row(revision: Revision, change: str | None) -> dict[str, Any]:
    return {"number": revision.revision, "digest": revision.short_digest,
            "standIn": revision.lock.resolved.stand_in, "created": revision.created,
            "author": revision.author, "action": revision.action_label, "message": revision.message.strip(),
            "change": change if change is not None else ("(first revision)" if revision.revision == 1 else "-")}


def _diff_section(previous: Revision, revision: Revision) -> dict[str, Any]:
    data = diff_locks(previous.lock, revision.lock).dump()
    groups = [{"id": g["id"], "title": g["title"], "impact": g["impact"], "restarts": g["restarts"],
               "recreate": g["recreateReasons"],
               "changes": [{"path": c["path"], "old": _value(c["old"]) if c["kind"] != "added" else "(unset)",
                            "new": _value(c["new"]) if c["kind"] != "removed" else "(unset)",
                            "note": c.get("note")} for c in g["changes"]],
               "invalidates": [f"{i['what']}: {i['detail']}" for i in g["invalidates"]]}
              for g in data["groups"]]
    return {"a": previous.revision, "b": revision.revision, "summary": data["oneLine"], "impact": data["impact"],
            "restarts": data["restarts"], "groups": groups}


def _result_row(number: int, path: Path, result: ResultSummary) -> dict[str, Any]:
    slo = result.slo
    invalid = len(result.invalid)
    row: dict[str, Any] = {"revision": number, "file": path.name, "stack": result.stack.name,
                           "platform": result.stack.platform, "gpus": result.stack.gpus,
                           "simulated": result.simulation.model if result.simulation else "",
                           "slo": slo_text(slo) if slo else "-",
                           # Valid points only: an invalid one is listed apart, with its cause.
                           "points": f"{result.valid} of {result.points}" if invalid else str(result.points),
                           "single": "-", "agents_per_gpu": "-", "per_gpu": "-", "bound": ""}
    curve = result.curve(slo.percentile if slo else "p90")
    single = [p.speed for p in curve if p.agents == 1]
    row["single"] = f"{single[0]:.0f}" if single else "-"
    notes = []
    if slo:
        edge = slo_edge(curve, [p.agents for p in result.invalid], slo, result.stack.gpus)
        op = edge.operating
        if op.bound is not Bound.unmet:
            prefix = ">= " if edge.bound else ""
            # Per GPU: results served on unequal GPU counts (a share of each stack) compare only so. Where the
            # crossing lies past an invalid point, the last valid count that met the SLO is what is known.
            agents_per_gpu, per_gpu = (op.agents_per_gpu, op.tps_per_gpu) if not edge.past_invalid or \
                edge.last_met is None else (edge.last_met.agents / result.stack.gpus, edge.last_met.tps_per_gpu)
            row.update(agents_per_gpu=f"{prefix}{agents_per_gpu:.2f}", per_gpu=f"{prefix}{per_gpu:,.0f}")
        notes.append(edge.text if edge.past_invalid else op.note)
    if invalid:
        notes.append(f"{invalid} invalid point(s) not counted (below)")
    if result.saturated:
        notes.append("the client was saturated: throughput is a floor")
    if result.interrupted:
        notes.append("the run was interrupted")
    row["bound"] = "; ".join(notes)
    return row


def _invalid_rows(number: int, path: Path, result: ResultSummary) -> list[dict[str, Any]]:
    return [{"revision": number, "file": path.name, "stack": result.stack.name, "agents": p.agents,
             "cause": p.cause} for p in result.invalid]


def _results(store: HistoryStore, key: DeploymentKey, digests: Mapping[int, str],
             extra: Mapping[int, Sequence[Path]]) -> Iterator[tuple[int, Path, ResultSummary]]:
    """Each result read, verified and summarised in turn: one result's request logs in memory at a time.
    `digests`: revision number -> its stack digest."""
    numbers = list(digests)
    unknown = sorted(set(extra) - set(numbers))
    if unknown:
        raise StackpinError(f"--result {unknown[0]}=...: {key} has no revision {unknown[0]} (it has 1-{len(numbers)})")
    for number, paths in attached_results(store, key, numbers, extra).items():
        for path in paths:
            summary = read_summary(path)
            want = digests[number]
            if summary.stack.digest != want:
                raise StackpinError(f"{path}: measured stack {summary.stack.digest}, but revision {number} of {key} "
                                    f"is {want}", "a result belongs to the revision whose stack it measured")
            yield number, path, summary


def build_report(store: HistoryStore, key: DeploymentKey, extra: Mapping[int, Sequence[Path]] = {}) -> Report:
    from stackpin.extras import require

    require("report")  # jinja2 and matplotlib, before any work
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    revisions = store.revisions(key)
    diffs = [_diff_section(p, r) for p, r in zip(revisions, revisions[1:], strict=False)]
    rows = [_revision_row(r, d["summary"] if d else None) for d, r in zip([None, *diffs], revisions, strict=True)]
    digests = {r.revision: r.stack_digest for r in revisions}
    del revisions  # their locks (about 20 KB a revision) are in the rows and diffs now
    results = list(_results(store, key, digests, extra))
    chart = None
    if results:
        slo_tps = slo_speed([r for _, _, r in results])
        png = curve_chart([(f"rev {n}: {result_label(r)}", r) for n, _, r in results], slo_tps,
                          title=f"{key}: bench curves", ttft_s=slo_ttft([r for _, _, r in results]))
        chart = base64.b64encode(png).decode("ascii")
    env = Environment(loader=PackageLoader("stackpin.report", "templates"), autoescape=select_autoescape(["j2"]),
                      undefined=StrictUndefined, keep_trailing_newline=True)
    chunks = env.get_template("report.html.j2").generate(
        deployment=str(key), revisions=rows, diffs=diffs, chart=chart,
        results=[_result_row(n, p, r) for n, p, r in results], drawn=min(len(results), MAX_CURVES),
        invalid=[row for n, p, r in results for row in _invalid_rows(n, p, r)],
        simulated=sorted({line for _, _, r in results if r.simulation
                          for line in (r.simulation.substitutions or (f"Step-time model: {r.simulation.model}",))}))
    # Written as the template yields it: render() joins a list of every piece of the page (hundreds of
    # thousands for 1,000 revisions, several times the page's own size).
    page = io.StringIO()
    for chunk in chunks:
        page.write(chunk)
    return Report(page.getvalue(), len(rows), len(results))
