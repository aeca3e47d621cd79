"""`stackpin sim serve|figures`: the simulator (stackpin.sim)."""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import OUTPUT, emit, user_errors


@click.group(help="A simulated OpenAI-compatible endpoint whose timing follows a locked stack (a test bed, "
                  "not a claim about hardware).")
def sim() -> None:
    pass


@sim.command(help="""Serve LOCK's stack on loopback: /v1/chat/completions (streaming SSE with usage),
/v1/models, and /stackpin/sim (says it is simulated). --speed X runs simulated time X times faster
than wall time (measured tok/s are then X times the stack's). --fault injects failures for client
tests, e.g. error=0.1,stall=0.05,drop=0.05,malformed=0.05,after=8,seed=1.""")
@click.argument("lock", type=click.Path(dir_okay=False, exists=True))
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--model", "step_model", default="roofline", show_default=True,
              help="Step-time model: roofline (aiconfigurator is not built in this version).")
@click.option("--speed", type=float, default=1.0, show_default=True)
@click.option("--fault", default="", help="Fault rates and options, key=value[,key=value...].")
@user_errors
def serve(lock: str, port: int, host: str, step_model: str, speed: float, fault: str) -> None:
    import sys

    from stackpin.sim.faults import FaultSpec
    from stackpin.sim.server import check_model
    from stackpin.sim.server import serve as run

    check_model(step_model)
    faults = FaultSpec.parse(fault)

    def announce(bound: int) -> None:
        click.echo(f"stackpin sim: {lock} on http://{host}:{bound} (simulated, {step_model}, speed {speed})",
                   file=sys.stderr)

    try:
        run(Path(lock), host, port, speed, faults, step_model, announce)
    except KeyboardInterrupt:
        pass


@sim.command(help="""The published figures the simulator is calibrated to next to what its step model
gives for the shipped locks (stackpin/sim/calibration.yaml), and whether each is within tolerance.""")
@OUTPUT
@user_errors
def figures(output: str) -> None:
    from stackpin.sim.curve import figures as compute

    rows = compute()
    if output != "text":
        emit([{"name": f.name, "published": f.published, "simulated": f.simulated, "tolerance": f.tolerance,
               "within": f.within} for f in rows], output)
        return
    width = max(len(f.name) for f in rows)
    click.echo(f"{'figure':{width}}  {'published':>9}  {'simulated':>9}  within")
    for f in rows:
        click.echo(f"{f.name:{width}}  {f.published:>9g}  {f.simulated:>9g}  "
                   f"{'yes' if f.within else 'no'} (±{f.tolerance:.0%})")
