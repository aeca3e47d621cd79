"""Human-readable output of validation results (rich tables), kept out of the library twins."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stackpin.validate import Severity
from stackpin.validate.check import CheckResult

_STYLE = {Severity.error: "red", Severity.warning: "yellow", Severity.info: "blue"}


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_reports(result: CheckResult, console: Console | None = None) -> None:
    if console is None:
        # Never narrower than the summary table: rich assumes 80 columns on a pipe and would truncate.
        console = Console(highlight=False)
        console.width = max(console.width, 160)
    for report in result.reports:
        if report.findings:
            console.print(f"[bold]{escape(report.file)}[/] ({escape(report.name)})")
        for finding in report.findings:
            # User data (paths, values quoted in messages) is escaped: `[/]` or `[bold]` in it is text, not markup.
            console.print(f"  [{_STYLE[finding.severity]}]{escape(str(finding))}[/]", soft_wrap=True)
    if not result.reports:
        return
    table = Table(box=None, pad_edge=False, header_style="bold", caption_justify="left",
                  caption="weights, KV, headroom: GiB per GPU (estimates from the catalog); "
                          "headroom = HBM outside vLLM's pool")
    for column in ("stack", "target", "GPUs", "placement", "pools", "weights", "KV", "headroom", "result"):
        numeric = column in ("GPUs", "weights", "KV", "headroom")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    for report in result.reports:
        s = report.summary
        errors, warnings = report.count(Severity.error), report.count(Severity.warning)
        verdict = f"[red]{errors} error(s)[/]" if errors else "[green]ok[/]"
        if warnings:
            verdict += f", {warnings} warning(s)"
        for i, pool in enumerate(s.pools):
            first = i == 0
            table.add_row(escape(s.name) if first else "", escape(s.platform) if first else "",
                          f"{s.gpus_used}/{s.gpus_available}" if first else "", escape(s.placement) if first else "",
                          escape(f"{pool.role} {pool.shape}"), _num(pool.weights_gib_per_gpu),
                          _num(pool.kv_gib_per_gpu), _num(pool.headroom_gib_per_gpu), verdict if first else "")
    console.print(table)
