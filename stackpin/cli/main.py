"""The stackpin command line: parse, call one library function, print. Heavy imports stay inside commands."""

from __future__ import annotations

import gc
import importlib
import sys
from typing import NoReturn

# A command allocates most of its objects once, importing (classes, functions, schemas), and keeps them to the
# end; at CPython's default threshold (700 allocations) the collector runs hundreds of times over them during
# start-up and finds nothing to free: 5% of a cold render. Cycles are still collected, 50,000 allocations
# apart (mypy raises the threshold the same way).
gc.set_threshold(50_000, 20, 20)

import click  # noqa: E402 - after the threshold: click's import is a tenth of a render's

# Every command, by the module that defines it: only the command run is imported (its click definitions
# and what they import), not all twenty. Groups' subcommands defined elsewhere are added on load.
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("stackpin.cli.validate", "validate"), "rules": ("stackpin.cli.validate", "rules"),
    "schema": ("stackpin.cli.validate", "schema"), "lock": ("stackpin.cli.lock", "lock"),
    "render": ("stackpin.cli.render", "render"), "diff": ("stackpin.cli.diff", "diff"),
    "show": ("stackpin.cli.diff", "show"), "promote": ("stackpin.cli.history", "promote"),
    "history": ("stackpin.cli.history", "history"), "rollback": ("stackpin.cli.history", "rollback"),
    "apply": ("stackpin.cli.deploy", "apply"), "status": ("stackpin.cli.deploy", "status"),
    "autotune": ("stackpin.cli.autotune", "autotune"), "engines": ("stackpin.cli.engines", "engines"),
    "bench": ("stackpin.cli.bench", "bench"), "trace": ("stackpin.cli.trace", "trace"),
    "sim": ("stackpin.cli.sim", "sim"), "plan": ("stackpin.cli.plan", "plan"),
    "report": ("stackpin.cli.reportpage", "report"), "import": ("stackpin.cli.importcmd", "import_"),
    "init": ("stackpin.cli.init", "init"), "upgrade": ("stackpin.cli.upgrade", "upgrade"),
    "rollout": ("stackpin.cli.rollout", "rollout"), "mirror": ("stackpin.cli.mirror", "mirror"),
    "site": ("stackpin.cli.site", "site"), "search": ("stackpin.cli.search", "search"),
}
SUBCOMMANDS: dict[str, tuple[tuple[str, str], ...]] = {
    "rollout": (
        ("stackpin.cli.rollout_run", "start"), ("stackpin.cli.rollout_run", "status"),
        ("stackpin.cli.rollout_run", "pause"), ("stackpin.cli.rollout_run", "resume"),
        ("stackpin.cli.rollout_run", "abort"), ("stackpin.cli.rollout_gitops", "gitops"),
    ),
    "bench": (("stackpin.cli.plot", "plot"),),
    "upgrade": (
        ("stackpin.cli.upgrade_check", "check"), ("stackpin.cli.upgrade_propose", "propose"),
        ("stackpin.cli.upgrade_trial", "trial"), ("stackpin.cli.upgrade_trial", "promote"),
    ),
}


class LazyGroup(click.Group):
    """The top-level group: commands are imported when run, listed (--help, completion) by name."""

    def list_commands(self, ctx: click.Context) -> list[str]:  # noqa: ARG002 - click's signature
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:  # noqa: ARG002 - click's
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(load_command(cmd_name), cmd_name)
        return self.commands.get(cmd_name)


def load_command(name: str) -> click.Command:
    """The command `name` of COMMANDS, with its subcommands from other modules and its examples."""
    from stackpin.cli.examples import add_examples

    module, attribute = COMMANDS[name]
    command: click.Command = getattr(importlib.import_module(module), attribute)
    if isinstance(command, click.Group):
        for sub_module, sub_attribute in SUBCOMMANDS.get(name, ()):
            command.add_command(getattr(importlib.import_module(sub_module), sub_attribute))
    add_examples(command, (name,))
    return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


def all_commands() -> dict[str, click.Command]:
    """Every command loaded (for tests and tools that walk them all)."""
    for name in COMMANDS:
        main.get_command(click.Context(main), name)
    return dict(main.commands)


def run() -> None:
    """The console script (and `python -m stackpin`). pydantic looks for plugins in every installed
    package's entry points before it builds the first model (7 ms a start); the CLI uses none, and a
    plugin found in the same environment would observe stackpin's own models: none is loaded. A user
    who wants one sets PYDANTIC_DISABLE_PLUGINS themselves (even to an empty string)."""
    import os

    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        main()  # click ends every run, success or failure, with SystemExit
    except SystemExit as done:
        _exit(done.code)


def _exit(code: object) -> NoReturn:
    """Exit with `code` as Python would, without the interpreter's teardown: freeing every module and object
    takes 20-24 ms of a 160-180 ms render, and a command has nothing left to free. mypy ends the same way. What
    the teardown would have done that anyone sees is done first: atexit functions (logging's flush,
    multiprocessing's children, weakref finalizers), then stdout and stderr flushed. The full exit runs
    instead when it has more to do: a thread that is not a daemon still running (Python waits for it), an
    exit code that is not a number (Python prints it), or a standard stream that cannot be flushed (Python
    reports that as it always has)."""
    import atexit
    import os
    import threading

    run_exit_functions = getattr(atexit, "_run_exitfuncs", None)  # CPython's; absent elsewhere
    waits = [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if run_exit_functions is None or waits or not (code is None or isinstance(code, int)):
        raise SystemExit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        raise SystemExit(code) from None
    run_exit_functions()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code or 0)
