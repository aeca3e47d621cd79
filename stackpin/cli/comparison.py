"""Printing a bench comparison and reading --threshold: shared by `bench compare` and
`rollback --if-regressed`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from stackpin.cli.common import emit

if TYPE_CHECKING:
    from stackpin.bench.acceptance import Acceptance
    from stackpin.bench.compare import Comparison, Estimate


# Every command that judges two stacks' bench results (bench compare, rollback --if-regressed, upgrade trial):
# compare although their measured draft acceptance differs (stackpin.bench.acceptance.check_acceptance).
ALLOW_ACCEPTANCE_CHANGE = click.option(
    "--allow-acceptance-change", is_flag=True,
    help="Compare even when the sides' measured draft acceptance (mean acceptance length) differs past "
         "acceptance.yaml's threshold: the same trace drafting differently is not the same workload.")


def threshold(text: str) -> float:
    from stackpin.bench.binding import parse_threshold

    return parse_threshold(text)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _number(value: float, unit: str) -> str:
    if unit == "agents":
        return f"{value:g}"
    return f"{value:.3f}" if unit == "s" else f"{value:.1f}"


def _estimate(estimate: Estimate | None, unit: str) -> str:
    return "no data" if estimate is None else estimate.text(lambda v: _number(v, unit))


def _estimate_data(estimate: Estimate | None) -> dict[str, Any] | None:
    if estimate is None:
        return None
    return {"value": estimate.value, "atLeast": estimate.low, "atMost": estimate.high, "measured": estimate.measured}


def comparison_data(comparison: Comparison) -> dict[str, Any]:
    return {"a": list(comparison.a), "b": list(comparison.b), "runs": list(comparison.runs),
            "agents": comparison.agents, "threshold": comparison.threshold, "forced": list(comparison.forced),
            "gpus": list(comparison.gpus), "verdict": comparison.verdict.value, "regressed": comparison.regressed,
            "missing": comparison.missing() if comparison.verdict.value == "inconclusive" else [],
            "leftOut": list(comparison.left_out),
            "acceptance": {"meanLengthA": _mean_length(comparison.acceptance.a),
                           "meanLengthB": _mean_length(comparison.acceptance.b),
                           "ratesA": list(comparison.acceptance.a.rates) if comparison.acceptance.a else None,
                           "ratesB": list(comparison.acceptance.b.rates) if comparison.acceptance.b else None,
                           "notes": list(comparison.acceptance.notes)},
            "metrics": [{"name": m.name, "unit": m.unit, "higherIsBetter": m.higher_is_better,
                         "a": m.a.value if m.a else None, "b": m.b.value if m.b else None,
                         "estimateA": _estimate_data(m.a), "estimateB": _estimate_data(m.b),
                         "change": m.change, "low": m.low, "high": m.high, "basis": m.basis,
                         "verdict": m.verdict.value, "why": m.why, "evidence": list(m.evidence)}
                        for m in comparison.metrics]}


def _mean_length(acceptance: Acceptance | None) -> float | None:
    return None if acceptance is None else acceptance.mean_length


def print_comparison(comparison: Comparison, output: str) -> None:
    if output != "text":
        emit(comparison_data(comparison), output)
        return
    a, b = comparison.runs
    click.echo(f"A: {', '.join(sorted(set(comparison.a)))} ({a} run{'s' * (a != 1)})   "
               f"B: {', '.join(sorted(set(comparison.b)))} ({b} run{'s' * (b != 1)})")
    if comparison.gpus[0] != comparison.gpus[1]:
        click.echo(f"note: A ran on {comparison.gpus[0]} GPUs, B on {comparison.gpus[1]}: agent counts compare per "
                   "GPU, and TTFT at one agent count (a different load per GPU) is left out", err=True)
    if comparison.forced:
        click.echo(f"warning: compared with --force although {', '.join(comparison.forced)} differ(s)", err=True)
    for note in comparison.acceptance.notes:
        click.echo(f"note: {note}", err=True)
    header = ["METRIC", "A", "B", "CHANGE", "95% CI", "FROM", "VERDICT"]
    rows = [[m.name, _estimate(m.a, m.unit), _estimate(m.b, m.unit), _pct(m.change),
             "-" if m.low is None else f"[{_pct(m.low)}, {_pct(m.high)}]", m.basis, m.verdict.value]
            for m in comparison.metrics]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for m in comparison.metrics:
        if m.verdict.value in ("inconclusive", "regression") or m.basis == "bounds":
            click.echo(f"  {m.name}: {m.why}")
    for line in comparison.left_out:
        click.echo(f"left out (invalid): {line}")
    click.echo(f"verdict: {comparison.verdict.value} (threshold {comparison.threshold:.0%})")
    if comparison.verdict.value == "inconclusive" and not comparison.metrics:
        click.echo(f"  {comparison.missing()[0]}")
