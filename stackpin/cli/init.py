"""`stackpin init`: a starter profile from a packaged example, with its bases and the JSON Schema."""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import OUTPUT, emit, user_errors
from stackpin.cli.complete import examples


@click.command()
@click.argument("directory", required=False, metavar="[DIR]")
@click.option("--from", "example", metavar="EXAMPLE", shell_complete=examples,
              help="The packaged example to start from (--list shows them).  [default: gb300-tuned]")
@click.option("--name", metavar="STACK", help="The starter's stack name (metadata.name) and file name, STACK.yaml "
              "(default: the example's).")
@click.option("--list", "list_", is_flag=True, help="List the packaged examples, one line each; write nothing.")
@OUTPUT
@user_errors
def init(directory: str | None, example: str | None, name: str | None, list_: bool, output: str) -> None:
    """Write a starter profile into DIR (default: the current directory, created if missing) from an example
    packaged with stackpin, with every profile its `extends:` chain needs (as _NAME.yaml: bases, which
    `validate DIR` and `lock DIR` read only through extends:) and the JSON Schema its
    `# yaml-language-server` line names, so that it validates, locks and renders where it is written.

    No file is ever replaced: an existing one is refused, named, and nothing is written (a base or the
    schema already there with exactly the same text is kept). Exit 0 written, 2 bad input.
    """
    if list_:
        if directory is not None or example is not None or name is not None:
            raise click.UsageError("--list takes no DIR, --from or --name")
        _list(output)
        return
    from stackpin.examples.packaged import DEFAULT
    from stackpin.examples.starter import chain, check_name, plan_starter, write_starter

    for hint, check, value in (("--from", chain, example), ("--name", check_name, name)):
        try:
            if value is not None:
                check(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=hint) from None
    starter = plan_starter(example or DEFAULT, name)
    outcomes = write_starter(Path(directory or "."), starter)
    roles = ["profile", *["base"] * (len(outcomes) - 2), "schema"]
    if output != "text":
        emit({"example": starter.example, "name": starter.name, "files": [
            {"path": str(o.path), "role": role, "action": o.action} for o, role in zip(outcomes, roles, strict=True)]},
            output)
        return
    notes = {"profile": f"the stack {starter.name}, from the example {starter.example}", "base": "a base it extends",
             "schema": "the JSON Schema editors check it against"}
    for outcome, role in zip(outcomes, roles, strict=True):
        click.echo(f"{outcome.action:<5} {outcome.path}  ({notes[role]})")
    where = directory or "."
    click.echo(f"next: stackpin validate {where}, then stackpin lock {where}")


def _list(output: str) -> None:
    from stackpin.examples.listing import describe_examples

    found = describe_examples()
    if output != "text":
        emit([{"name": e.name, "description": e.description, "extends": list(e.extends), "default": e.default}
              for e in found], output)
        return
    labels = [f"{e.name} (default)" if e.default else e.name for e in found]
    width = max(map(len, labels))
    for e, label in zip(found, labels, strict=True):
        extends = f" (extends {', '.join(e.extends)})" if e.extends else ""
        click.echo(f"{label:<{width}}  {e.description}{extends}")
