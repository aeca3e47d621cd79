"""`stackpin plan`: capacity for N agents under a service target, from bench results (stackpin.plan)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import OUTPUT, emit, file_only, finite, user_errors

if TYPE_CHECKING:
    from stackpin.bench.compare import Estimate
    from stackpin.plan.aic import AicColumn
    from stackpin.plan.capacity import Plan, Scenario, StackPlan


@click.command("plan")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False), metavar="RESULT.json...")
@click.option("--agents", "agents", type=int, required=True, metavar="N", help="Concurrent agents to serve.")
@click.option("--slo", "slo_text", metavar="tps=N,ttft=Ns[,percentile=p90]",
              help="Per-agent output speed every agent holds and the TTFT limit (at percentile, default p90); "
                   "default: the SLO the results were benched under (the profile's spec.service by default).")
@click.option("--mature", "mature", multiple=True, type=click.Path(dir_okay=False), metavar="B.json",
              help="A result of the mature stack on the same platform as one RESULT (repeatable).")
@click.option("--gain", type=finite(), metavar="X", help="Mature scenario as a stated gain in throughput per GPU at "
              "the same per-agent speed (e.g. 1.3), for results without --mature.")
@click.option("--chart", type=click.Path(dir_okay=False), metavar="PLAN.png", callback=file_only,
              help="Write a chart of racks needed against the per-agent speed target.")
@click.option("--turn-tokens", type=finite(), metavar="N", help="Output tokens of a typical turn (default: the median "
              "request in the results' request logs).")
@click.option("--trajectory-tokens", type=finite(), metavar="N", help="Output tokens of a typical trajectory (default: "
              "the median session in the request logs).")
@click.option("--force", is_flag=True, help="Plan results side by side even when their controls (trace, model, "
              "precision, SLO) differ; the answer lists what differs.")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where the aiconfigurator column looks up each result's lock (by its stack digest).")
@OUTPUT
@user_errors
def plan(results: tuple[str, ...], agents: int, slo_text: str | None, mature: tuple[str, ...], gain: float | None,
         chart: str | None, turn_tokens: float | None, trajectory_tokens: float | None, force: bool,
         lockdir: str, output: str) -> None:
    """Size a fleet from measured curves: per stack, agents per GPU meeting the SLO (interpolated on the
    curve, never extrapolated past it), GPUs, whole racks, rack power and agents per MW, and how long
    an agent waits for a turn and a trajectory; with --mature or --gain the mature-stack scenario and
    its difference in racks. Exit 2 when the results' controls differ (unless --force)."""
    from stackpin.bench.resultfile import read_result
    from stackpin.errors import StackpinError
    from stackpin.plan.capacity import make_plan
    from stackpin.plan.slo import parse_slo, results_slo

    if mature and gain is not None:
        raise StackpinError("--mature and --gain exclude each other")
    given = parse_slo(slo_text) if slo_text else None  # a bad --slo is refused before any file is read
    loaded = [(Path(p), read_result(Path(p))) for p in results]
    slo = given or results_slo([r for _, r in loaded])
    matured = [(Path(p), read_result(Path(p))) for p in mature]
    answer = make_plan(loaded, agents, slo, mature=matured, gain=gain, force=force, turn_tokens=turn_tokens,
                       trajectory_tokens=trajectory_tokens, lockdir=Path(lockdir))
    if chart:
        from stackpin.plan.chart import plan_chart
        from stackpin.yamlio import write_output

        labels = [f"{s.stack} ({s.platform})" for s in answer.stacks]
        labels += [f"{r.stack.name} ({r.stack.platform}, mature)" for _, r in matured]
        write_output(Path(chart), plan_chart([r for _, r in loaded + matured], labels, agents, slo))
    if output != "text":
        emit({**answer.dump(), "chart": chart}, output)
        return
    _print(answer)
    if chart:
        click.echo(f"wrote {chart}", err=True)


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _wait(seconds: float | None, at_most: bool = False) -> str:
    if seconds is None:
        return "-"
    return ("<= " if at_most else "") + (f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min")


def _cells(s: Scenario) -> list[str]:
    op, cap = s.operating, s.capacity
    bound = {"within": "", "at-least": ">= ", "unmet": ""}[op.bound.value]
    most = {"within": "", "at-least": "<= ", "unmet": ""}[op.bound.value]
    unmet = op.bound.value == "unmet"
    power = "unknown" if cap.rack_power_kw is None else f"{cap.rack_power_kw:g}"
    return ["unmet" if unmet else f"{bound}{op.agents_per_gpu:.2f}", "-" if unmet else f"{op.tps_per_gpu:,.0f}",
            "-" if unmet else f"{op.speed:.0f}", "-" if cap.gpus is None else f"{most}{cap.gpus:,}",
            "-" if cap.racks is None else f"{most}{cap.racks:,}" + (" nodes" if cap.rack_kind == "node" else ""), power,
            "-" if cap.power_kw is None else f"{most}{cap.power_kw / 1000:,.2f}",
            "-" if cap.agents_per_mw is None else f"{bound}{cap.agents_per_mw:,.0f}",
            _wait(s.waits.turn_s, s.waits.at_most), _wait(s.waits.trajectory_s, s.waits.at_most)]


def _platform_ratios(answer: Plan) -> list[str]:
    """Throughput per GPU at the target, one platform's stack over another's, the larger over the smaller (a
    bound where a curve still held the target at its largest count; unknown where both did)."""
    lines = []
    stacks = [s for s in answer.stacks
              if s.current.operating.bound.value != "unmet" and s.current.operating.tps_per_gpu]
    for i, first in enumerate(stacks):
        for second in stacks[i + 1:]:
            if first.platform == second.platform:
                continue
            from stackpin.bench.compare import ratio_range

            a, b = sorted((first, second), key=lambda s: s.current.operating.tps_per_gpu, reverse=True)
            # bench compare's bounds arithmetic: the ratios the two (possibly lower-bound) figures allow
            smallest, largest = ratio_range(_estimate(b), _estimate(a))
            value = ("unknown (both are bounds)" if smallest == 0 and largest == math.inf
                     else f"{smallest:.2f}x" if smallest == largest
                     else f">= {smallest:.2f}x" if largest == math.inf else f"<= {largest:.2f}x")
            lines.append(f"per GPU at {answer.slo.tps:g} tok/s per agent: {a.stack} ({a.platform}) / {b.stack} "
                         f"({b.platform}) = {value}")
    return lines


def _estimate(stack: StackPlan) -> Estimate:
    """A stack's throughput per GPU at the target: measured where the curve crosses it, a lower bound where
    it still held at the largest count measured."""
    from stackpin.bench.compare import Estimate

    op = stack.current.operating
    return Estimate(op.tps_per_gpu, None if op.bound.value == "at-least" else op.tps_per_gpu)


def _delta(delta: int, current: Scenario, mature: Scenario) -> str:
    """The mature scenario's racks against the current one's, in a planner's words ("saves 6 racks",
    "saves up to 19 racks"): a bound where either side's racks are one."""
    low, high = current.operating.bound.value == "at-least", mature.operating.bound.value == "at-least"
    unit = "nodes" if mature.capacity.rack_kind == "node" else "racks"
    if low and high:
        return "unknown (both are bounds)"  # both are upper bounds on racks: their difference is unknown
    if delta == 0 and not (low or high):
        return f"same {unit}"
    saves = delta < 0
    # delta >= d (current's racks an upper bound) or delta <= d (mature's): say the side the bound gives.
    at_most = (low and saves) or (high and not saves)
    bound = "up to " if at_most else "at least " if (low or high) else ""
    return f"saves {bound}{-delta:,} {unit}" if saves else f"needs {bound}{delta:,} more {unit}"


def _aic_cell(column: AicColumn | None, reasons: list[str]) -> str:
    """'0.52/GPU, 3 racks [1]' or 'refused [2]', the reason numbered below the table."""
    if column is None:
        return "-"
    if column.reason not in reasons:
        reasons.append(column.reason)
    mark = f"[{reasons.index(column.reason) + 1}]"
    if column.bound is None:
        return f"refused {mark}"
    if column.agents_per_gpu is None or column.racks is None:
        return f"unmet {mark}"
    low, most = (">= ", "<= ") if column.bound == "at-least" else ("", "")
    return f"{low}{column.agents_per_gpu:.2f}/GPU, {most}{column.racks:,} racks {mark}"


def _print(answer: Plan) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from stackpin.plan.slo import slo_text

    console = Console(highlight=False)
    if not console.is_terminal:  # a pipe or a file gets the whole table, not one squeezed to 80 columns
        console = Console(highlight=False, width=260)
    console.print(f"plan for {answer.agents:,} agents at {escape(slo_text(answer.slo))}")
    table = Table(box=None, pad_edge=False)
    aic = [s.aiconfigurator for s in answer.stacks if s.aiconfigurator is not None]
    columns = ["stack", "platform", "scenario", "agents/GPU", "tok/s/GPU", "tok/s/agent", "GPUs", "racks",
               "kW/rack", "MW", "agents/MW", "turn wait", "trajectory wait", "mature vs current"]
    for name in columns + (["aiconfigurator"] if aic else []):
        table.add_column(name, justify="left" if name in ("stack", "platform", "scenario") else "right")
    reasons: list[str] = []
    for s in answer.stacks:
        name = s.stack + (f" (simulated: {s.simulated})" if s.simulated else "")
        extra = [_aic_cell(s.aiconfigurator, reasons)] if aic else []
        table.add_row(escape(name), s.platform, "current", *_cells(s.current), "", *extra)
        if s.mature:
            delta = "-" if s.rack_delta is None else _delta(s.rack_delta, s.current, s.mature)
            later = [_aic_cell(s.mature_aiconfigurator, reasons)] if aic else []
            table.add_row("", "", escape(f"mature: {s.mature.source}"), *_cells(s.mature), delta, *later)
    console.print(table)
    for n, reason in enumerate(reasons, 1):
        console.print(f"aiconfigurator [{n}]: {escape(reason)}")
    console.print(f"waits: output tokens / per-agent speed; typical turn {_num(answer.workload.turn_tokens)} "
                  f"tokens, trajectory {_num(answer.workload.trajectory_tokens)} tokens "
                  f"({escape(answer.workload.source)})")
    for s in answer.stacks:
        for label, sc in (("current", s.current), ("mature", s.mature)):
            if sc is not None:
                console.print(f"{escape(s.stack)} {label}: {escape(sc.operating.note)}")
    for line in _platform_ratios(answer):
        console.print(escape(line))
    for line in answer.forced:
        console.print(f"[yellow]warning:[/] compared despite differing controls: {escape(line)}")
    for note in answer.notes:
        console.print(f"note: {escape(note)}")
