"""`stackpin apply` and `stackpin status`: the commands that talk to a cluster. The cluster client
loads only when one of them runs (stackpin.deploy.kube)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from stackpin.cli.common import (
    ALLOW_STAND_INS,
    HISTORY,
    LOCK_TIMEOUT,
    OUTPUT,
    STRICT,
    allow_stand_ins,
    cluster_options,
    connect_cluster,
    emit,
    finite,
    lock_timeout,
    strict_preflight,
    user_errors,
)
from stackpin.cli.complete import deployments

if TYPE_CHECKING:
    from stackpin.deploy.apply import ApplyResult
    from stackpin.deploy.status import StatusReport


def progress(message: str) -> None:
    """Progress lines on stderr, only when a person is watching."""
    if sys.stderr.isatty():
        click.echo(f"  {message}", err=True)


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


@click.command()
@click.argument("source", metavar="LOCK|DEPLOYMENT[@REV]")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where a profile's lock is looked up when LOCK is a profile.")
@HISTORY
@click.option("--dry-run", is_flag=True, help="Ask the server: a server-side dry run of every write; nothing changes.")
@click.option("--force-conflicts", is_flag=True,
              help="Take fields another field manager owns (otherwise a conflict names them and stops).")
@click.option("--allow-recreate", is_flag=True,
              help="Delete and recreate a DynamoGraphDeployment whose change cannot be made in place "
                   "(components added or removed, a pool switching single-node <-> multi-node).")
@click.option("--create-namespace", is_flag=True, help="Create the namespace if it does not exist.")
@click.option("--wait", is_flag=True, help="Then wait until the DynamoGraphDeployment and every component is ready.")
@click.option("--timeout", type=finite(min=0, min_open=True), metavar="SECONDS",
              help="Limit for --wait, and for a recreated object to be gone (default: the stack's start-up budget).")
@LOCK_TIMEOUT
@STRICT
@ALLOW_STAND_INS
@cluster_options
@OUTPUT
@user_errors
def apply(source: str, lockdir: str, history_dir: str, dry_run: bool, force_conflicts: bool, allow_recreate: bool,
          create_namespace: bool, wait: bool, timeout: float | None, kubeconfig: str | None, context: str | None,
          namespace: str | None, output: str) -> None:
    """Apply a locked stack to a cluster (server-side apply, field manager `stackpin`): a lockfile, or a
    revision of a deployment's history (DEPLOYMENT@REV; DEPLOYMENT alone is its newest revision).

    Prunes the objects this deployment had and the stack no longer renders, and records the applied
    stack in the cluster (an ApplySet parent, configmap/stackpin-<deployment>). Nothing is written
    unless a server-side dry run of every write passes. Holds the deployment's Lease while it writes:
    one writer at a time.
    """
    from pathlib import Path

    from stackpin.deploy.apply import ApplyOptions, apply_stack, default_timeout_s, wait_applied
    from stackpin.deploy.source import refuse_stand_ins, resolve_source
    from stackpin.deploy.wait import WaitTimeout

    stack = resolve_source(source, Path(lockdir), Path(history_dir))
    refuse_stand_ins(stack, allow_stand_ins())  # before the cluster is asked anything
    cluster = connect_cluster(kubeconfig, context)
    limit = timeout if timeout is not None else default_timeout_s(stack)
    options = ApplyOptions(namespace=namespace, dry_run=dry_run, force_conflicts=force_conflicts,
                           allow_recreate=allow_recreate, create_namespace=create_namespace, timeout_s=limit,
                           lock_timeout_s=lock_timeout(), strict=strict_preflight(),
                           allow_stand_ins=allow_stand_ins())
    result = apply_stack(cluster, stack, options, progress=progress, warn=warn)
    if output == "text":
        print_applied(result)
    if not wait or result.dry_run:
        if output != "text":
            emit(result.as_dict(), output)
        return
    try:
        result = wait_applied(cluster, result, limit, progress=progress)
    except WaitTimeout as exc:
        if output != "text":  # the apply happened: say so, with the last state seen
            from msgspec.structs import replace

            emit(replace(result, readiness=exc.state).as_dict(), output)
        raise
    if output == "text":
        assert result.readiness is not None
        click.echo(f"ready: {result.readiness.summary()}")
    else:
        emit(result.as_dict(), output)


def print_applied(result: ApplyResult) -> None:
    suffix = " (server dry run)" if result.dry_run else ""
    for outcome in result.outcomes:
        click.echo(f"{outcome}{suffix}")
    digest = result.stack_digest.removeprefix("sha256:")[:12]
    revision = f" revision {result.revision}" if result.revision is not None else ""
    where = f"{result.namespace}/{result.deployment}"
    if result.dry_run:
        click.echo(f"dry run: {result.stack} ({digest}){revision} would apply to {where}; nothing changed")
    else:
        recorded = "recorded in" if result.recorded else "already recorded in"
        click.echo(f"applied {result.stack} ({digest}){revision} to {where}; {recorded} {result.record}")


@click.command()
@click.argument("deployment", shell_complete=deployments)
@click.option("--lock", "lock_arg", metavar="LOCK",
              help="Compare the live stack with this lockfile (default: the live stack's lockfile in --lockdir).")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where the live stack's lockfile is looked up.")
@cluster_options
@OUTPUT
@user_errors
def status(deployment: str, lock_arg: str | None, lockdir: str, kubeconfig: str | None, context: str | None,
           namespace: str | None, output: str) -> None:
    """What is live for DEPLOYMENT: stack digest and revision, whether it matches the lock, drift
    (fields another field manager changed since stackpin applied), component readiness.

    Exit 0 in sync, 1 drift or a lock mismatch. The namespace defaults to the lock's, then the
    kubeconfig context's, then the profile default.
    """
    from pathlib import Path

    from stackpin.deploy.status import deployment_status

    cluster = connect_cluster(kubeconfig, context)
    if namespace is None and lock_arg:
        from stackpin.deploy.source import resolve_source

        namespace = resolve_source(lock_arg, Path(lockdir)).lock.stack_profile.metadata.namespace
    namespace = namespace or cluster.context_namespace
    if not namespace:  # the profile's default (the profile model loads only for it)
        from stackpin.profile.model import DEFAULT_NAMESPACE

        namespace = DEFAULT_NAMESPACE
    report = deployment_status(cluster, deployment, namespace, lock=lock_arg, lockdir=Path(lockdir))
    if output != "text":
        emit(report.as_dict(), output)
    else:
        _print_status(report)
    if not report.in_sync:
        what = [f"{len(report.drift)} drifted field(s)"] if report.drift else []
        what += ["the live stack does not match the lock"] if report.lock and not report.lock.matches else []
        what += list(report.problems)
        click.echo(f"error: {report.namespace}/{report.deployment} is not in sync: {'; '.join(what)}", err=True)
        sys.exit(1)


def _print_status(report: StatusReport) -> None:
    last = report.last_applied
    revision = str(report.revision) if report.revision is not None else "- (applied from a lockfile)"
    rows = [
        ("deployment", f"{report.namespace}/{report.deployment}  (record {report.record}, "
                       f"{report.revisions} revision(s))"),
        ("stack", f"{report.stack or '-'}  {report.stack_digest or '-'}"
                  + ("  (stand-in pins: not production digests)" if report.stand_in else "")),
        ("revision", revision),
        ("applied", f"{last.applied_at} by {last.applied_by}" if last else
                    "- (not in the record: see the problem below)" if report.record_behind else "-"),
    ]
    if report.lock:
        verdict = "matches" if report.lock.matches else f"differs (lock {report.lock.stack} {report.lock.stack_digest})"
        rows.append(("lock", f"{report.lock.path}: {verdict}"))
    else:
        rows.append(("lock", "- (no lockfile of the live stack; name one with --lock)"))
    rows.append(("objects", ", ".join(o.subject for o in report.objects) or "-"))
    rows.append(("drift", f"{len(report.drift)} field(s) changed by another field manager" if report.drift
                 else "none"))
    for label, value in rows:
        click.echo(f"{label:<11} {value}")
    for d in report.drift:
        click.echo(f"  {d.subject} {d.path}  by {d.manager} ({d.operation} {d.time})")
    for problem in report.problems:
        click.echo(f"problem     {problem}")
    if report.readiness is not None:
        state = report.readiness
        click.echo(f"{'ready':<11} {'yes' if state.ready else 'no'}: {state.summary()}")
