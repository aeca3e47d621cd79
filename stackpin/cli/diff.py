"""`stackpin diff A B` and `stackpin show PROFILE`: compare two stacks; print a merged profile."""

from __future__ import annotations

import sys

import click

from stackpin.cli.common import HISTORY, OUTPUT, cluster_options, emit, user_errors

INPUTS = "A and B are each a profile, a lockfile, a stack name (its lockfile in --lockdir), DEPLOYMENT@REV or " \
         "git:REF:PATH (the file at a git revision, its extends: bases read at the same revision)."
LOCKDIR = click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
                       help="Where a bare stack name's lockfile, and a profile's lock for --manifests, are found.")


@click.command(help=f"""Compare two stacks: changes grouped by what they are, the rollout each needs
(none, restart of named pools, or recreate) and what each invalidates.

{INPUTS} Profiles are compared after extends: is merged; two locks also compare their pins.
Exit 0 (with --exit-code: 0 equal, 1 different), 2 bad input.

A may be DEPLOYMENT@live: what `stackpin apply B` would change in the cluster (B as apply takes it:
a lockfile, a profile with a current lock, DEPLOYMENT[@REV]): the live stack from the in-cluster
record against B, then each object live against a server-side dry run of B, as kubectl diff; the
cluster options apply. Exit 0 no change, 1 changes, 2 an error.""")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--manifests", is_flag=True,
              help="Also render both stacks and show a unified diff per object (matched by kind and name).")
@click.option("--exit-code", is_flag=True, help="Exit 1 when the stacks differ, 0 when they are equal (as git diff).")
@LOCKDIR
@HISTORY
@cluster_options
@OUTPUT
@user_errors
def diff(a: str, b: str, manifests: bool, exit_code: bool, lockdir: str, history_dir: str, kubeconfig: str | None,
         context: str | None, namespace: str | None, output: str) -> None:
    from pathlib import Path

    from stackpin.cli.livediff import is_live, run_live_diff

    if is_live(a):
        if manifests:
            raise click.UsageError("DEPLOYMENT@live always shows each object's diff; --manifests is for two stacks")
        run_live_diff(a, b, lockdir, history_dir, kubeconfig, context, namespace, output)
        return
    if kubeconfig or context or namespace:
        raise click.UsageError("--kubeconfig, --context and --namespace only with A = DEPLOYMENT@live")

    from stackpin.diff.run import diff_sources
    from stackpin.history.store import HistoryStore

    result = diff_sources(a, b, manifests=manifests, lockdir=Path(lockdir),
                          revision_lock=HistoryStore(Path(history_dir)).lock_reader())
    if output == "text":
        from stackpin.cli.diffreport import print_diff

        print_diff(result)
    else:
        emit(result.dump(), output)
    if exit_code and not result.equal:
        sys.exit(1)


@click.command(help=f"""Print a stack's effective profile: extends: merged and every default filled in,
the profile a lock embeds and diff compares.

{INPUTS.replace("A and B are each", "PROFILE is")} Text output is YAML headed by the files merged.""")
@click.argument("source", metavar="PROFILE")
@LOCKDIR
@HISTORY
@OUTPUT
@user_errors
def show(source: str, lockdir: str, history_dir: str, output: str) -> None:
    from pathlib import Path

    from stackpin.diff.inputs import load_stack
    from stackpin.history.store import HistoryStore

    stack = load_stack(source, lockdir=Path(lockdir), revision_lock=HistoryStore(Path(history_dir)).lock_at)
    if output == "text":
        from stackpin.yamlio import dump_yaml

        chain = " <- ".join(stack.sources)
        # spec.acknowledge changes nothing that runs, so the effective profile leaves it out; the reader is told.
        acknowledged = "".join(f"# acknowledged: {a.rule}{f' at {a.where}' if a.where else ''}: {a.reason}\n"
                               for a in stack.profile.spec.acknowledge)
        click.echo(f"# effective profile of {stack.ref.name} ({stack.ref.kind.value}): extends merged, "
                   f"defaults filled\n# from: {chain}\n{acknowledged}" + dump_yaml(stack.document), nl=False)
    else:
        emit(stack.document, output)
