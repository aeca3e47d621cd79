"""The stackpin command line: parse, call one library function, print. Heavy imports stay inside commands."""

from __future__ import annotations

import click

from stackpin.cli.autotune import autotune
from stackpin.cli.bench import bench
from stackpin.cli.deploy import apply, status
from stackpin.cli.diff import diff, show
from stackpin.cli.engines import engines
from stackpin.cli.examples import add_examples
from stackpin.cli.history import history, promote, rollback
from stackpin.cli.importcmd import import_
from stackpin.cli.init import init
from stackpin.cli.lock import lock
from stackpin.cli.plan import plan
from stackpin.cli.plot import plot
from stackpin.cli.render import render
from stackpin.cli.reportpage import report
from stackpin.cli.sim import sim
from stackpin.cli.trace import trace
from stackpin.cli.validate import rules, schema, validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="stackpin")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour in text output: auto is on a terminal unless $NO_COLOR is set (https://no-color.org).")
@click.pass_context
def main(ctx: click.Context, color: str) -> None:
    """Pin, validate, lock and render LLM serving stacks (vLLM + FlashInfer + NVIDIA Dynamo)."""
    import os

    if color == "auto" and os.environ.get("NO_COLOR"):
        color = "never"
    # click's own styling reads the context; rich's tables read NO_COLOR / FORCE_COLOR.
    ctx.color = {"always": True, "never": False}.get(color)
    if color == "never":
        os.environ["NO_COLOR"] = "1"
        os.environ.pop("FORCE_COLOR", None)
    elif color == "always":
        os.environ.pop("NO_COLOR", None)
        os.environ["FORCE_COLOR"] = "1"


# Command groups live in their own modules; importing them costs only their click definitions.
for _command in (validate, lock, render, diff, show, promote, history, rollback, apply, status, autotune, engines,
                 schema, rules, bench):
    main.add_command(_command)
main.add_command(trace)
main.add_command(sim)
main.add_command(plan)
main.add_command(report)
main.add_command(import_)
main.add_command(init)
bench.add_command(plot)
add_examples(main)
