"""`stackpin render`: locks (or profiles with current locks) -> validated manifest directories."""

from __future__ import annotations

import sys

import click

from stackpin.cli.common import OUTPUT, emit, user_errors


@click.command()
@click.argument("inputs", nargs=-1, metavar="[LOCK|PROFILE|DIR]...")
@click.option("--output-dir", "outdir", default="manifests", show_default=True,
              type=click.Path(file_okay=False), help="Each stack renders to OUTPUT_DIR/<name>/ (as helm template).")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where a profile's lock is looked up; with no inputs, every lock in it is rendered.")
@click.option("--check", is_flag=True,
              help="Render in memory and exit 1 naming every drifted, missing or extra file; write nothing.")
@click.option("--stdout", "to_stdout", is_flag=True,
              help="Print every object as one multi-document YAML stream instead of writing directories (as helm "
                   "template and kustomize build do); also --output-dir -.")
@OUTPUT
@user_errors
def render(inputs: tuple[str, ...], outdir: str, lockdir: str, check: bool, to_stdout: bool, output: str) -> None:
    """Render locked stacks into Kubernetes manifests (DynamoGraphDeployment, ComputeDomain).

    A profile renders from its lock in --lockdir, which must be current. Rendering never touches the
    network, and writes nothing unless every stack renders and validates.
    """
    from pathlib import Path

    from stackpin.errors import StackpinError
    from stackpin.render.output import check_stacks, load_inputs, render_stacks, stream, write_stacks
    from stackpin.validate.manifests import builtin_schemas

    to_stdout = to_stdout or outdir == "-"
    if to_stdout and (check or output != "text"):
        raise StackpinError(f"--stdout prints the manifests themselves: not with {'--check' if check else '-o'}")
    locks, whole = load_inputs(inputs, Path(lockdir), warn=lambda line: click.echo(f"warning: {line}", err=True))
    stacks = render_stacks(locks)
    if not builtin_schemas():
        click.echo("note: built-in kinds (the ConfigMaps) not checked against Kubernetes' schemas: that needs the "
                   "`manifests` extra (pip install 'stackpin[manifests]')", err=True)
    if to_stdout:
        click.echo(stream(stacks), nl=False)
        return
    if check:
        drift = check_stacks(stacks, Path(outdir), whole_dir=whole)
        if output == "text":
            for item in drift:
                click.echo(str(item))
        else:
            emit({"outputDir": outdir, "current": not drift,
                  "drift": [{"path": d.path, "status": d.status} for d in drift]}, output)
        if drift:
            click.echo(f"error: {len(drift)} file(s) differ from a fresh render; run stackpin render", err=True)
            sys.exit(1)
        if output == "text":  # the answer asked for: stdout (json and yaml said it above)
            click.echo(f"manifests current: {len(stacks)} stack(s) in {outdir}")
        return
    write_stacks(stacks, Path(outdir))
    if output != "text":
        emit({"outputDir": outdir, "stacks": [{"name": s.name, "directory": str(Path(outdir) / s.name),
                                                "files": sorted(s.files)} for s in stacks]}, output)
        return
    for stack in stacks:
        click.echo(f"rendered {Path(outdir) / stack.name}/  ({len(stack.files)} files)")
