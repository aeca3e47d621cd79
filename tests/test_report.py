"""The text report of `stackpin validate`: the same layout rich drew on a pipe, without rich.

The reference below is how stackpin printed the report with rich tables (until start-up time moved it
to plain text); on a pipe the two must give the same bytes, except where rich read a finding as
markup or emoji codes, which the plain report prints as written.
"""

from __future__ import annotations

import io
import itertools

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.table import Table

from stackpin.cli import report
from stackpin.validate import Finding, Severity
from stackpin.validate.check import CheckResult, ProfileReport
from stackpin.validate.summary import PoolSummary, StackSummary

_STYLE = {Severity.error: "red", Severity.warning: "yellow", Severity.info: "blue"}


def rich_report(result: CheckResult) -> str:
    console = Console(file=io.StringIO(), highlight=False, width=160)
    for rep in result.reports:
        if rep.findings:
            console.print(f"[bold]{rep.file}[/] ({rep.name})")
        for finding in rep.findings:
            console.print(f"  [{_STYLE[finding.severity]}]{finding}[/]", soft_wrap=True)
    if result.reports:
        table = Table(box=None, pad_edge=False, header_style="bold", caption_justify="left",
                      caption=report.caption(result))
        for column in report.COLUMNS:
            table.add_column(column, justify="right" if column in report.NUMERIC else "left", no_wrap=True)
        for cells, color in report.table_rows(result):
            if color and cells[-1]:
                head, sep, tail = cells[-1].partition(", ")
                cells = [*cells[:-1], f"[{color}]{head}[/]{sep}{tail}"]
            table.add_row(*cells)
        console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def plain_report(result: CheckResult) -> str:
    out = io.StringIO()
    runner = CliRunner()
    with runner.isolation() as (stdout, _, _):
        report.print_reports(result)
        out.write(stdout.getvalue().decode())
    return out.getvalue()


def pool(role: str, tp: int, dp: int, ep: int, replicas: int, numbers: float | None) -> PoolSummary:
    return PoolSummary(role=role, replicas=replicas, tensor_parallel=tp, data_parallel=dp, expert_parallel_size=ep,
                       gpus=tp * dp * replicas, nodes_per_replica=1, weights_gib_per_gpu=numbers,
                       kv_gib_per_gpu=numbers, kv_tokens_per_gpu=None if numbers is None else 1000,
                       headroom_gib_per_gpu=numbers)


def finding(severity: Severity, message: str, line: int = 14) -> Finding:
    return Finding(code="SP183", severity=severity, path="spec.model.revision", message=message,
                   hint="pin it" if line % 2 else None, location=f"profiles/x.yaml:{line}:5")


def result_of(name: str, pools: list[PoolSummary], findings: list[Finding], platform: str = "b200") -> CheckResult:
    summary = StackSummary(name=name, platform=platform, gpu="B200", gpus_available=8,
                           gpus_used=sum(p.gpus for p in pools), placement="colocated", pools=tuple(pools))
    return CheckResult(reports=(ProfileReport(file=f"profiles/{name}.yaml", name=name, summary=summary,
                                              findings=tuple(findings), engine_label="vLLM"),), input_errors=())


NAMES = ["a", "short", "a-medium-sized-stack", "x" * 40]
POOLS = [
    [pool("worker", 1, 1, 1, 1, None)],
    [pool("worker", 8, 1, 1, 1, 51.42)],
    [pool("prefill", 4, 1, 4, 2, 118.8), pool("decode", 2, 8, 16, 4, 1234.56)],
]
FINDINGS = [[], [finding(Severity.warning, "revision 'main' can move")],
            [finding(Severity.error, "too many GPUs", 15), finding(Severity.info, "fine", 16),
             finding(Severity.warning, "careful", 17)]]


@pytest.mark.parametrize(("name", "pools", "findings"), list(itertools.product(NAMES, POOLS, FINDINGS)))
def test_plain_report_is_what_rich_printed(name: str, pools: list[PoolSummary], findings: list[Finding]) -> None:
    result = result_of(name, pools, findings, platform="vera-rubin-nvl72" if len(pools) > 1 else "b200")
    assert plain_report(result) == rich_report(result)


def test_several_stacks_and_none() -> None:
    first = result_of("one", POOLS[2], FINDINGS[1])
    second = result_of("two-longer-name", POOLS[1], FINDINGS[2])
    both = CheckResult(reports=first.reports + second.reports, input_errors=())
    assert plain_report(both) == rich_report(both)
    empty = CheckResult(reports=(), input_errors=("x.yaml: no such file",))
    assert plain_report(empty) == rich_report(empty) == ""


def test_findings_print_as_written() -> None:
    # rich read `[abc]` as markup (dropping it) and `:100:` as an emoji code.
    result = result_of("stack", POOLS[0], [finding(Severity.warning, "value [abc] is odd", line=100)])
    text = plain_report(result)
    assert "  profiles/x.yaml:100:5: warning SP183 spec.model.revision: value [abc] is odd\n" in text


def test_colours_on_a_terminal() -> None:
    result = result_of("stack", POOLS[1], FINDINGS[2])
    runner = CliRunner()
    with runner.isolation(color=True) as (stdout, _, _):
        report.print_reports(result)
        text = stdout.getvalue().decode()
    assert "\x1b[31m" in text and "\x1b[33m" in text and "\x1b[1m" in text


def test_validate_imports_neither_rich_nor_jsonschema() -> None:
    """A cold `stackpin validate PROFILE` pays for what it uses: no table library, no schema library."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    profile = root / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "stackpin", "validate", str(profile)],
                          capture_output=True, text=True, cwd=root, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gb300-tuned" in proc.stdout
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "stackpin" in imported
    assert not imported & {"rich", "jsonschema", "referencing", "httpx", "kubernetes_validate"}
