"""`stackpin sim serve|figures|curve`: the simulator (stackpin.sim)."""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import OUTPUT, emit, finite, user_errors


@click.group(help="A simulated OpenAI-compatible endpoint whose timing follows a locked stack (a test bed, "
                  "not a claim about hardware).")
def sim() -> None:
    pass


@sim.command(help="""Serve LOCK's stack on loopback: /v1/chat/completions (streaming SSE with usage),
/v1/models, and /stackpin/sim (says it is simulated). --speed X runs simulated time X times faster
than wall time (measured tok/s are then X times the stack's). --fault injects failures for client
tests, e.g. error=0.1,stall=0.05,drop=0.05,malformed=0.05,after=8,seed=1; slow=F makes every engine step
take F times as long (F >= 1), a measurably slower stack for regression drills.""")
@click.argument("lock", type=click.Path(dir_okay=False, exists=True))
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--model", "step_model", default="roofline", show_default=True,
              help="Step-time model: roofline, or aiconfigurator (the optional `sim` extra; it refuses a stack "
                   "it cannot model and states what it stands in with).")
@click.option("--speed", type=finite(), default=1.0, show_default=True)
@click.option("--fault", default="", help="Fault rates and options, key=value[,key=value...].")
@click.option("--share", type=click.IntRange(1), default=1, show_default=True,
              help="Serve 1/N of the stack: each pool keeps 1/N of its replicas (N must divide them), so a "
                   "bench needs N times fewer agents for the same per-GPU curve.")
@click.option("--backend", type=click.Choice(["stackpin", "dynamo"]), default="stackpin", show_default=True,
              help="stackpin: stackpin's own simulator. dynamo: NVIDIA Dynamo's own frontend and KV router in "
                   "front of its mocker engine, shaped like the stack and timed by the step model (its own "
                   "environment: make dynamo-env).")
@click.option("--dynamo-env", metavar="DIR", help="The Dynamo bed's environment (default $STACKPIN_DYNAMO_ENV, "
              "else .dynamobed/dynamo-1.6.1).")
@user_errors
def serve(lock: str, port: int, host: str, step_model: str, speed: float, fault: str, share: int, backend: str,
          dynamo_env: str | None) -> None:
    import sys

    from stackpin.errors import StackpinError
    from stackpin.sim.faults import FaultSpec
    from stackpin.sim.server import check_model
    from stackpin.sim.server import serve as run

    check_model(step_model)
    faults = FaultSpec.parse(fault)
    if speed <= 0:
        raise StackpinError(f"--speed {speed}: must be above 0")
    if backend == "dynamo":
        from stackpin.lock.lockfile import read_lock
        from stackpin.sim.dynamo import plan
        from stackpin.sim.dynamo_bed import find_env
        from stackpin.sim.dynamo_bed import serve as run_bed

        if fault:
            raise StackpinError("--fault: the Dynamo bed injects no faults (use --backend stackpin)")
        env = find_env(dynamo_env)
        locked = read_lock(Path(lock))
        from stackpin.sim.stack import sim_stack

        check_model(step_model, sim_stack(locked))
        code = run_bed(plan(locked, share, speed, step_model), env, host, port, speed, step_model, sys.stderr)
        if code:  # stopped by SIGINT or SIGTERM, everything it started gone: 130 or 143, as a shell expects
            sys.exit(code)
        return

    def announce(bound: int) -> None:
        click.echo(f"stackpin sim: {lock} on http://{host}:{bound} (simulated, {step_model}, speed {speed})",
                   file=sys.stderr)

    code = run(Path(lock), host, port, speed, faults, step_model, announce, share)
    if code:
        sys.exit(code)


@sim.command(help="""Every public figure stackpin has for its model family next to what the step model gives
for the stack behind it, its error, and whether the model was fitted to it (stackpin/sim/calibration.yaml
`figures`, within the tolerance the calibration test holds them to) or it was held out (`validation`: the
fit never sees them; each names its source and what the model lacks). Where the `sim` extra is installed, a
column shows what the aiconfigurator step model gives for the fitted figures (not fitted to them), or why it
cannot model the stack. Then what the fit says about itself: each fitted parameter, its bounds, whether it
ended on one, and the figures it moves; with --leave-one-out, each fitted figure's error when the model is
refitted without it (about half a minute): a held-out error for the fitted figures too.""")
@click.option("--leave-one-out", "loo", is_flag=True, help="Refit without each independent figure and print the "
              "error on it: how well the model predicts a figure it was not fitted to.")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="The shipped locks the figures are of (stackpin's own lockfiles/); validation profiles are "
                   "read relative to its parent.")
@OUTPUT
@user_errors
def figures(loo: bool, lockdir: str, output: str) -> None:
    from stackpin.sim.aic import installed_version, mapping
    from stackpin.sim.curve import model_figures
    from stackpin.sim.fit import every_figure, provenance

    locks = Path(lockdir)
    every = every_figure(locks, loo)
    fitted_rows = [r for r in every if r.status != "held out"]
    held = [r for r in every if r.status == "held out"]
    aic = model_figures("aiconfigurator", lockdir=locks) if installed_version() == mapping()["version"] else None
    fitted = provenance(lockdir=locks)
    if output != "text":
        out: list[dict[str, object]] = [{"name": f.name, "published": f.published, "simulated": f.model,
                                         "tolerance": f.tolerance, "within": f.within} for f in fitted_rows]
        if aic is not None:
            for row, a in zip(out, aic, strict=True):
                row["aiconfigurator"] = a.value if a.value is not None else {"refused": a.reason}
        data: dict[str, object] = {
            "every": [{"name": r.name, "published": r.published, "model": r.model, "error": round(r.error, 4),
                       "status": r.status, **({"leftOut": round(r.left_out, 4)} if r.left_out is not None else {}),
                       **({"source": r.source, "lacks": r.lacks} if r.status == "held out" else {})}
                      for r in every],
            "figures": out, "fitted": [
                {"parameter": p.parameter, "value": p.value, "bounds": [p.low, p.high], "onBound": p.on_bound,
                 "moves": list(p.moves)} for p in fitted],
            "validation": [{"name": v.name, "published": v.published, "simulated": v.model, "error": round(v.error, 4),
                            "source": v.source, "lacks": v.lacks, "unmodelled": list(v.unmodelled)} for v in held]}
        if loo:
            data["leaveOneOut"] = [
                {"name": r.name, "published": r.published, "predicted": round(r.published * (1 + r.left_out), 3),
                 "error": round(r.left_out, 4)} for r in fitted_rows if r.left_out is not None]
        emit(data, output)
        return
    width = max(len(r.name) for r in every)
    head = f"{'figure':{width}}  {'published':>9}  {'model':>9}  {'error':>7}  {'fitted or held out':30}"
    if loo:
        head += f"  {'left out':>8}"
    click.echo(head + (f"  {'aiconfigurator':>14}" if aic is not None else ""))
    reasons: list[str] = []
    notes: list[str] = []
    for i, r in enumerate(every):
        if r.status == "held out":
            marks = []
            for note in ([r.lacks] if r.lacks else []) + list(r.unmodelled):
                if note not in notes:
                    notes.append(note)
                marks.append(f"({notes.index(note) + 1})")
            status = " ".join(["held out", *marks])
        else:
            status = f"{r.status}, {'within' if r.within else 'OUTSIDE'} ±{r.tolerance or 0:.0%}"
        line = f"{r.name:{width}}  {r.published:>9g}  {r.model:>9g}  {r.error:>+7.1%}  {status:30}"
        if loo:
            line += f"  {f'{r.left_out:+.1%}' if r.left_out is not None else '-':>8}"
        if aic is not None and i < len(aic):
            a = aic[i]
            if a.value is None and a.reason not in reasons:
                reasons.append(a.reason)
            line += f"  {f'{a.value:g}' if a.value is not None else f'refused [{reasons.index(a.reason) + 1}]':>14}"
        click.echo(line)
    for n, note in enumerate(notes, 1):
        click.echo(f"({n}) not modelled: {note}")
    for n, reason in enumerate(reasons, 1):
        click.echo(f"[{n}] {reason}")
    if aic is None:
        click.echo("aiconfigurator column not shown: the `sim` extra (aiconfigurator-core) is not installed")
    if not loo:
        click.echo("left out: with --leave-one-out, each independent fitted figure's error refitted without it")
    count = sum(r.status == "fitted" for r in fitted_rows)
    click.echo(f"\nfitted to {len(fitted_rows)} figures ({count} independent; the others are quotients of them) by "
               f"scripts/sim_fit.py, {len(held)} held out: {len(fitted)} parameters")
    names = [r.name for r in fitted_rows]
    pwidth = max(len(p.parameter) for p in fitted)
    click.echo(f"{'parameter':{pwidth}}  {'value':>10}  {'bounds':>19}  {'on bound':8}  moves figures (by > 1% when "
               "it moves 20%)")
    for p in fitted:
        moves = ", ".join(str(names.index(m) + 1) for m in p.moves) or "none"
        click.echo(f"{p.parameter:{pwidth}}  {p.value:>10.6g}  {f'[{p.low:g}, {p.high:g}]':>19}  "
                   f"{p.on_bound or '-':8}  {moves}")
    click.echo("figures by number: " + "; ".join(f"{i} {n}" for i, n in enumerate(names, 1)))


@sim.command(help="""LOCK's steady-state curve from the step model: for 1..max-num-seqs running sequences
per engine, each agent's tok/s and the stack's output tok/s per GPU, on the default AgentPerf-shaped
workload or on --trace FILE's. --at TPS adds the throughput per GPU at that per-agent speed.""")
@click.argument("lock", type=click.Path(dir_okay=False, exists=True))
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False, exists=True), help="Workload from this trace.")
@click.option("--at", "at_tps", type=finite(), multiple=True, help="Per-agent tok/s to read the curve at (repeatable).")
@click.option("--model", "step_model", default="roofline", show_default=True,
              help="Step-time model: roofline or aiconfigurator (the `sim` extra).")
@OUTPUT
@user_errors
def curve(lock: str, trace_file: str | None, at_tps: tuple[float, ...], step_model: str, output: str) -> None:
    from stackpin.bench.traceio import read_trace
    from stackpin.sim.curve import curve as compute
    from stackpin.sim.curve import single_agent_tps, throughput_at, workload_of
    from stackpin.sim.models import check_model, substitutions
    from stackpin.sim.stack import load_stack

    check_model(step_model)
    stack = load_stack(Path(lock))
    check_model(step_model, stack)
    workload = workload_of(read_trace(Path(trace_file))) if trace_file else None
    points = compute(stack, workload, model=step_model)
    single = round(single_agent_tps(stack, model=step_model), 1)
    stated = substitutions(step_model, stack)
    rows = [{"batch": p.batch, "running": p.running, "agents": p.agents, "agent_tps": round(p.agent_tps, 1),
             "output_tps_per_gpu": round(p.output_tps_per_gpu, 1), "speculative_k": p.k} for p in points]
    at = {f"{tps:g}": round(throughput_at(points, tps), 1) for tps in at_tps}
    if output != "text":
        emit({"stack": stack.name, "gpus": stack.gpus, "model": step_model, "substitutions": stated,
              "single_agent_tps": single, "points": rows, "at": at}, output)
        return
    click.echo(f"{stack.name}: {stack.gpus} GPUs, single agent {single} tok/s (simulated, {step_model})")
    for line in stated:
        click.echo(f"  substitution: {line}")
    click.echo("batch: sequences decoding per engine; running: across the stack; agents: counted through their "
               "prefill and tool time too")
    click.echo(f"{'batch':>5}  {'running':>7}  {'agents':>6}  {'agent tok/s':>11}  {'tok/s per GPU':>13}  k")
    for row in rows:
        click.echo(f"{row['batch']:>5}  {row['running']:>7}  {row['agents']:>6}  {row['agent_tps']:>11}  "
                   f"{row['output_tps_per_gpu']:>13}  {row['speculative_k']}")
    for tps, value in at.items():
        click.echo(f"at {tps} tok/s per agent: {value} tok/s per GPU")
