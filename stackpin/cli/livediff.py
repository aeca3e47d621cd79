"""`stackpin diff DEPLOYMENT@live B`: what applying B would change in the cluster (stackpin.deploy.livediff),
printed as the semantic diff of the stacks, then one unified YAML diff per object, as kubectl diff."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stackpin.cli.common import emit

if TYPE_CHECKING:
    from rich.console import Console

    from stackpin.deploy.livediff import LiveDiff

SUFFIX = "@live"
ACTIONS = ("configured", "created", "recreated", "pruned", "unchanged")


def is_live(arg: str) -> bool:
    return arg.endswith(SUFFIX) and not Path(arg).exists()


def run_live_diff(a: str, b: str, lockdir: str, history_dir: str, kubeconfig: str | None, context: str | None,
                  namespace: str | None, output: str) -> None:
    """Exit 0 no change, 1 changes, 2 an error (as kubectl diff)."""
    from stackpin.cli.common import connect_cluster
    from stackpin.cli.deploy import warn
    from stackpin.deploy.livediff import live_diff
    from stackpin.deploy.source import resolve_source
    from stackpin.errors import StackpinError

    deployment = a.removesuffix(SUFFIX)
    if is_live(b):
        raise StackpinError(f"{b}: B is what would be applied (a lockfile, a profile or DEPLOYMENT[@REV]); only A "
                            "may be DEPLOYMENT@live")
    source = resolve_source(b, Path(lockdir), Path(history_dir))
    cluster = connect_cluster(kubeconfig, context)
    result = live_diff(cluster, deployment, source, namespace=namespace, warn=warn)
    if output == "text":
        print_live_diff(result)
    else:
        emit(result.as_dict(), output)
    sys.exit(1 if result.changed else 0)


def print_live_diff(result: LiveDiff, console: Console | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape

    from stackpin.cli.diffreport import print_diff

    if console is None:
        console = Console(highlight=False, soft_wrap=True)
    live = result.live
    revision = f" revision {live.revision}" if live.revision is not None else ""
    console.print(f"[bold]live[/] {escape(result.namespace)}/{escape(result.deployment)}: {escape(live.stack)} "
                  f"({escape(live.stack_digest.removeprefix('sha256:')[:12])}){escape(revision)}, applied "
                  f"{escape(live.applied_at)} by {escape(live.applied_by)}  [dim]({escape(result.record)})[/]")
    if result.stack is not None:
        print_diff(result.stack, console)
        if result.stack.equal:
            console.print()
    counts = {a: sum(1 for o in result.objects if o.action == a) for a in ACTIONS}
    console.print("[bold]objects[/] " + ", ".join(f"{n} {a}" for a, n in counts.items()) + " (server dry run)")
    for obj in result.objects:
        style = {"created": "green", "pruned": "red", "recreated": "bold red", "configured": "yellow"}.get(obj.action)
        head = f"[{style}]{obj.action}[/]" if style else obj.action
        note = f"  [dim]({escape(obj.note)})[/]" if obj.note else ""
        console.print(f"{head} {escape(obj.subject)}{note}")
        for c in obj.conflicts:
            console.print(f"  [red]conflict:[/] {escape(c.field)} managed by {escape(repr(c.manager))}")
        for line in obj.diff.splitlines():
            style = ("bold" if line.startswith(("---", "+++")) else "cyan" if line.startswith("@@")
                     else "green" if line.startswith("+") else "red" if line.startswith("-") else "")
            console.print(f"[{style}]{escape(line)}[/]" if style else escape(line))
    verdict = "applying it changes the cluster" if result.changed else "no changes: applying it changes nothing"
    console.print(f"[bold]summary[/] {escape(result.target)}: {verdict}")
