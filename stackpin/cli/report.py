"""Human-readable output of validation results (findings and a summary table), kept out of the library
twins.

Plain text laid out as a borderless table, with colours on a terminal (click drops them on a pipe).
Findings print exactly as `Finding.__str__` words them: no markup or emoji codes are interpreted, so a
value like `[abc]` or a position like `:100:` reaches the reader as written. No rich here: importing
it costs a cold `stackpin validate` a tenth of its time.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import click

from stackpin.validate import Severity
from stackpin.validate.check import CheckResult

_COLOR = {Severity.error: "red", Severity.warning: "yellow", Severity.info: "blue"}
COLUMNS = ("stack", "target", "GPUs", "placement", "pools", "weights", "KV", "headroom", "result")
NUMERIC = frozenset({"GPUs", "weights", "KV", "headroom"})
CAPTION = ("weights, KV, headroom: GiB per GPU (estimates from the catalog); "
           "headroom = HBM outside {engine}'s pool")
_GAP = "  "  # between columns; no padding at the table's edges


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _verdict(errors: int, warnings: int, acknowledged: int = 0) -> tuple[str, str]:
    """(text, colour of its first part) of the result cell; acknowledged findings apart from the count."""
    text, color = (f"{errors} error(s)", "red") if errors else ("ok", "green")
    text = f"{text}, {warnings} warning(s)" if warnings else text
    return (f"{text}, {acknowledged} acknowledged" if acknowledged else text), color


def table_rows(result: CheckResult) -> list[tuple[list[str], str | None]]:
    """Summary rows (cells, colour of the result cell) in COLUMNS order: one per pool, the stack's
    own cells on its first pool only."""
    rows: list[tuple[list[str], str | None]] = []
    for report in result.reports:
        s = report.summary
        verdict, color = _verdict(report.count(Severity.error), report.count(Severity.warning), report.acknowledged)
        for i, pool in enumerate(s.pools):
            first = i == 0
            rows.append(([s.name if first else "", s.platform if first else "",
                          f"{s.gpus_used}/{s.gpus_available}" if first else "", s.placement if first else "",
                          f"{pool.role} {pool.shape}", _num(pool.weights_gib_per_gpu), _num(pool.kv_gib_per_gpu),
                          _num(pool.headroom_gib_per_gpu), verdict if first else ""], color if first else None))
    return rows


def caption(result: CheckResult) -> str:
    """The table's caption, naming the stacks' engine (each stack's, when they run more than one)."""
    labels = sorted({r.engine_label for r in result.reports if r.engine_label})
    named = labels[0] if len(labels) == 1 else "each stack's engine" if labels else "the engine"
    return CAPTION.format(engine=named)


def table_lines(rows: list[tuple[list[str], str | None]], style: Callable[..., str] = click.style,
                text: str = CAPTION.format(engine="the engine")) -> list[str]:
    """The table: a bold header, columns two spaces apart, numbers right-aligned, every line padded
    to the table's width; the caption (`text`) below, wrapped to that width."""
    widths = [max(len(cells[i]) for cells in [list(COLUMNS), *(r for r, _ in rows)]) for i in range(len(COLUMNS))]

    def line(cells: list[str], color: str | None = None, bold: bool = False) -> str:
        parts = [cell.rjust(width) if name in NUMERIC else cell.ljust(width)
                 for name, cell, width in zip(COLUMNS, cells, widths, strict=True)]
        if bold:
            parts = [style(part, bold=True) for part in parts]
        elif color:  # the verdict ("ok", "2 error(s)") in colour; the warning count after it plain
            text = parts[-1].rstrip()
            head, sep, tail = text.partition(", ")
            parts[-1] = style(head, fg=color) + sep + tail + parts[-1][len(text):]
        return _GAP.join(parts)

    total = sum(widths) + len(_GAP) * (len(widths) - 1)
    wrapped = [part.ljust(total) for part in textwrap.wrap(text, width=total, break_on_hyphens=False)]
    return [line(list(COLUMNS), bold=True), *(line(cells, color) for cells, color in rows), *wrapped]


def print_reports(result: CheckResult) -> None:
    for report in result.reports:
        if report.findings or report.upgrade:
            upgrade = f": upgrade {report.upgrade}" if report.upgrade else ""
            click.echo(click.style(report.file, bold=True) + f" ({report.name}){upgrade}")
        if report.upgrade and not report.findings:
            click.echo("  nothing in this profile breaks or changes meaning")
        for finding in report.findings:
            # An acknowledged finding stays in view, dimmed: it no longer asks for anything.
            dim = finding.acknowledged is not None
            click.echo("  " + click.style(str(finding), fg=_COLOR[finding.severity], dim=dim))
    if not result.reports:
        return
    for text in table_lines(table_rows(result), text=caption(result)):
        click.echo(text)
