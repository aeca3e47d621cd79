"""`stackpin report DEPLOYMENT --out report.html`: the deployment's page (stackpin.report.page)."""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import HISTORY, OUTPUT, emit, out_name, report_to_stderr, user_errors, write_out
from stackpin.cli.complete import deployments


def _results(values: tuple[str, ...]) -> dict[int, list[Path]]:
    from stackpin.errors import StackpinError

    out: dict[int, list[Path]] = {}
    for value in values:
        rev, sep, file = value.partition("=")
        if not sep or not rev.isdigit() or not file:
            raise StackpinError(f"--result {value}: expected REV=FILE (e.g. 2=tuned.json)")
        out.setdefault(int(rev), []).append(Path(file))
    return out


@click.command("report")
@click.argument("deployment", shell_complete=deployments)
@click.option("--out", required=True, type=click.Path(dir_okay=False, allow_dash=True), metavar="REPORT.html",
              help="The page to write; `-` for stdout.")
@click.option("--result", "result_files", multiple=True, metavar="REV=FILE",
              help="A bench result of revision REV, besides those attached to it (repeatable).")
@HISTORY
@OUTPUT
@user_errors
def report(deployment: str, out: str, result_files: tuple[str, ...], history_dir: str, output: str) -> None:
    """Write one self-contained HTML page for DEPLOYMENT: its revisions, the diff between consecutive
    ones and the bench curves of their results (chart embedded; no external URL). Same inputs, same bytes."""
    from stackpin.history.store import HistoryStore
    from stackpin.report.page import build_report
    store = HistoryStore(Path(history_dir))
    key = store.resolve(deployment)
    page = build_report(store, key, _results(result_files))
    write_out(out, page.html)
    err = report_to_stderr(out)
    if output == "text":
        click.echo(f"wrote {out_name(out)}  ({key}: {page.revisions} revision(s), {page.results} bench result(s))",
                   err=err)
    else:
        emit({"out": out, "deployment": str(key), "revisions": page.revisions, "results": page.results}, output,
             err=err)
