"""`stackpin promote`, `history`, `rollback`: a deployment's revisions (see stackpin.history).

Registered in stackpin/cli/main.py. The library does the work and returns typed results; this module
only prints them. Heavy imports stay inside the commands.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stackpin.cli.common import (
    ALLOW_STAND_INS,
    HISTORY,
    LOCK_TIMEOUT,
    OUTPUT,
    STRICT,
    allow_stand_ins,
    cluster_flags_given,
    cluster_options,
    connect_cluster,
    emit,
    finite,
    lock_timeout,
    strict_preflight,
    user_errors,
)
from stackpin.cli.comparison import ALLOW_ACCEPTANCE_CHANGE
from stackpin.cli.complete import deployments

if TYPE_CHECKING:
    from stackpin.history.deployed import DeploymentCheck
    from stackpin.history.listing import DeploymentSummary, HistoryEntry
    from stackpin.history.model import DeploymentKey, Revision
    from stackpin.history.record import Recorded
    from stackpin.history.store import HistoryStore

DEPLOYMENTS = click.option("--deployments", "deployments_dir", default="deployments", show_default=True, metavar="DIR",
                           type=click.Path(file_okay=False),
                           help="Where each deployment's newest revision is rendered for GitOps: "
                                "<namespace>/<deployment>@<platform>/.")
MESSAGE_HELP = "Why: kept in the revision and shown by `stackpin history`."
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


SIGNING_KEY = click.option("--signing-key", type=click.Path(dir_okay=False), metavar="KEY",
                           help="Sign the revision with this OpenSSH private key (Ed25519 or RSA), in the format "
                                "ssh-keygen -Y sign writes, namespace stackpin.  [default: $STACKPIN_SIGNING_KEY]")


def _store(history_dir: str, *, signing_key: str | None = None, allowed_signers: str | None = None) -> HistoryStore:
    from stackpin.history.store import HistoryStore

    return HistoryStore(Path(history_dir), signing_key=Path(signing_key) if signing_key else None,
                        allowed_signers=Path(allowed_signers) if allowed_signers else None)


def _cell(value: str) -> str:
    """One table cell: a message's first line, nothing that moves the terminal's cursor."""
    return _UNPRINTABLE.sub("?", value.strip().split("\n", 1)[0])


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _revision_data(revision: Revision) -> dict[str, Any]:
    return revision.summary().data()


def _print_recorded(recorded: Recorded, output: str) -> None:
    revision = recorded.revision
    if output != "text":
        emit({"deployment": str(revision.deployment), "file": str(recorded.path), **_revision_data(revision),
              "directory": str(recorded.directory), "files": list(recorded.files)}, output)
        return
    click.echo(f"recorded {recorded.path}  revision {revision.revision} of {revision.deployment}: "
               f"{revision.action_label} {revision.stack_digest}")
    click.echo(f"rendered {recorded.directory}/  ({len(recorded.files)} files)")


@click.command()
@click.argument("lock_input", metavar="LOCK")
@click.option("-m", "--message", required=True, help=MESSAGE_HELP)
@HISTORY
@DEPLOYMENTS
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where a profile's lock is looked up (LOCK may be a lockfile or a profile with a current lock).")
@click.option("--allow-same", is_flag=True,
              help="Record the stack even when the newest revision already has it (refused otherwise).")
@SIGNING_KEY
@OUTPUT
@user_errors
def promote(lock_input: str, message: str, history_dir: str, deployments_dir: str, lockdir: str,
            allow_same: bool, signing_key: str | None, output: str) -> None:
    """Record LOCK as the next revision of its deployment and render that deployment's directory.

    A deployment is the profile's metadata.namespace, metadata.deployment and target platform: the
    same name on another rack is another history. Nothing is written unless the stack renders.
    """
    from stackpin.errors import StackpinError
    from stackpin.history.record import promote as promote_lock
    from stackpin.render.output import load_inputs

    locks, _ = load_inputs([lock_input], Path(lockdir))
    if len(locks) != 1:
        raise StackpinError(f"{lock_input} holds {len(locks)} stacks; promote one lock at a time")
    store = _store(history_dir, signing_key=signing_key)
    _print_recorded(promote_lock(locks[0], message, store, Path(deployments_dir), allow_same=allow_same), output)


@click.command()
@click.argument("deployment", shell_complete=deployments)
@click.option("--to", "to", type=int, metavar="N", help="The revision whose stack to restore (default: the one "
              "before the newest).")
@click.option("-m", "--message", help=MESSAGE_HELP + "  [default: Roll back to revision N]")
@click.option("--if-regressed", is_flag=True, help="Only if the newest revision's attached bench result regresses "
              "against the previous revision's (`stackpin bench attach`); prints the comparison.")
@click.option("--threshold", "threshold_text", default="5%", show_default=True,
              help="With --if-regressed: the smallest relative change that counts as a regression.")
@ALLOW_ACCEPTANCE_CHANGE
@HISTORY
@DEPLOYMENTS
@click.option("--apply", "apply_it", is_flag=True,
              help="Then apply the new revision to the cluster, with apply's rules. The revision is recorded only "
                   "if the apply succeeds (a failed apply leaves the history as it was).")
@click.option("--dry-run", is_flag=True, help="With --apply: a server-side dry run; nothing is recorded or changed.")
@click.option("--force-conflicts", is_flag=True, help="With --apply: take fields another field manager owns.")
@click.option("--allow-recreate", is_flag=True,
              help="With --apply: delete and recreate a DynamoGraphDeployment whose change cannot be made in place.")
@click.option("--wait", is_flag=True, help="With --apply: then wait until the DynamoGraphDeployment is ready.")
@click.option("--timeout", type=finite(min=0, min_open=True), metavar="SECONDS",
              help="With --apply: limit for --wait and for a recreated object to be gone "
                   "(default: the stack's start-up budget).")
@LOCK_TIMEOUT
@STRICT
@ALLOW_STAND_INS
@SIGNING_KEY
@cluster_options
@OUTPUT
@user_errors
def rollback(deployment: str, to: int | None, message: str | None, if_regressed: bool, threshold_text: str,
             allow_acceptance_change: bool, history_dir: str, deployments_dir: str, signing_key: str | None,
             apply_it: bool, dry_run: bool, force_conflicts: bool, allow_recreate: bool, wait: bool,
             timeout: float | None, kubeconfig: str | None, context: str | None, namespace: str | None,
             output: str) -> None:
    """Record a new revision of DEPLOYMENT whose stack is revision N's, and render it; with --apply,
    apply it to the cluster too (the cluster options and the apply flags only mean something then).

    History is never rewritten: the rollback is the next revision, and can itself be rolled back.
    DEPLOYMENT is NAME, NAME@PLATFORM or NAMESPACE/NAME@PLATFORM (`stackpin history` lists them).
    """
    from stackpin.history.record import rollback as roll_back

    store = _store(history_dir, signing_key=signing_key)
    key = store.resolve(deployment)
    cluster_flags = {"--dry-run": dry_run, "--force-conflicts": force_conflicts, "--allow-recreate": allow_recreate,
                     "--wait": wait, "--timeout": timeout is not None, "--kubeconfig": kubeconfig is not None,
                     "--context": context is not None, "--namespace": namespace is not None,
                     **dict.fromkeys(cluster_flags_given(), True)}
    if not apply_it and (given := [name for name, on in cluster_flags.items() if on]):
        raise click.UsageError(f"{', '.join(given)} only with --apply")
    if allow_acceptance_change and not if_regressed:
        raise click.UsageError("--allow-acceptance-change only with --if-regressed")
    comparison = None
    if if_regressed:
        if to is not None:
            raise click.UsageError("--if-regressed rolls back to the previous revision; it takes no --to")
        to, comparison = _regressed(store, key, threshold_text, output, allow_acceptance_change)
        if to is None:
            if output != "text":
                emit({"deployment": str(key), "comparison": comparison, "rolledBack": False}, output)
            return
        message = message or f"Roll back to revision {to}: revision {to + 1} regressed against it"
    if not apply_it:
        recorded = roll_back(store, key, Path(deployments_dir), to=to, message=message)
        if comparison is not None and output != "text":
            emit({"deployment": str(key), "comparison": comparison, "rolledBack": True,
                  "file": str(recorded.path), **_revision_data(recorded.revision)}, output)
            return
        _print_recorded(recorded, output)
        return
    _rollback_apply(store, key, Path(deployments_dir), to, message, dry_run, force_conflicts, allow_recreate, wait,
                    timeout, kubeconfig, context, namespace, output,
                    extra={"comparison": comparison, "rolledBack": True} if comparison is not None else None)


def _rollback_apply(store: HistoryStore, key: DeploymentKey, deployments: Path, to: int | None, message: str | None,
                    dry_run: bool, force_conflicts: bool, allow_recreate: bool, wait: bool, timeout: float | None,
                    kubeconfig: str | None, context: str | None, namespace: str | None, output: str,
                    extra: dict[str, Any] | None = None) -> None:
    from msgspec.structs import replace

    from stackpin.cli.deploy import print_applied, progress, warn
    from stackpin.deploy.apply import ApplyOptions, wait_applied
    from stackpin.deploy.rollback import rollback_apply
    from stackpin.deploy.wait import WaitTimeout

    cluster = connect_cluster(kubeconfig, context)
    options = ApplyOptions(namespace=namespace, dry_run=dry_run, force_conflicts=force_conflicts,
                           allow_recreate=allow_recreate, timeout_s=timeout, lock_timeout_s=lock_timeout(),
                           strict=strict_preflight(), allow_stand_ins=allow_stand_ins())
    done = rollback_apply(cluster, store, key, deployments, options, to=to, message=message, progress=progress,
                          warn=warn)
    revision, result = done.revision, done.applied

    def data() -> dict[str, Any]:
        recorded = done.recorded
        return {"deployment": str(key), "history": {**_revision_data(revision), "recorded": recorded is not None,
                                                    "file": str(recorded.path) if recorded else None},
                "apply": result.as_dict(), **(extra or {})}

    if output == "text":
        if done.recorded is not None:
            _print_recorded(done.recorded, output)
        print_applied(result)
        if done.recorded is None:
            click.echo(f"dry run: revision {revision.revision} of {key} (roll back to revision "
                       f"{revision.action.revision}) would be recorded; nothing written")
    if not wait or result.dry_run:
        if output != "text":
            emit(data(), output)
        return
    try:
        limit = timeout if timeout is not None else _startup_budget(revision)
        result = wait_applied(cluster, result, limit, progress=progress)
    except WaitTimeout as exc:
        if output != "text":
            result = replace(result, readiness=exc.state)
            emit(data(), output)
        raise
    if output == "text":
        assert result.readiness is not None
        click.echo(f"ready: {result.readiness.summary()}")
    else:
        emit(data(), output)


def _startup_budget(revision: Revision) -> float:
    from stackpin.deploy.apply import default_timeout_s
    from stackpin.deploy.source import StackSource

    return default_timeout_s(StackSource(revision.lock, origin=str(revision.deployment), revision=revision.revision))


def _regressed(store: HistoryStore, key: DeploymentKey, threshold_text: str,
               output: str, allow_acceptance_change: bool) -> tuple[int | None, dict[str, Any] | None]:
    """The revision to roll back to (None, after saying why, when there is none) and the comparison;
    the decision is stackpin.bench.regression's, this only prints it."""
    from stackpin.bench.regression import check_regression
    from stackpin.cli.comparison import comparison_data, print_comparison, threshold

    check = check_regression(store, key, threshold(threshold_text), allow_acceptance_change)
    if check.comparison is None:
        click.echo(f"no rollback: {check.reason}", err=True)
        return None, None
    if output == "text":
        click.echo(f"revision {check.previous} (A) vs revision {check.newest} (B) of {key}:")
        print_comparison(check.comparison, output)
    if check.inconclusive:
        # never a rollback, and never a pass: its own exit code, after the comparison and what it lacks
        from stackpin.bench.compare import EXIT_INCONCLUSIVE

        click.echo(f"no rollback: revision {check.newest} against revision {check.previous} is inconclusive: "
                   f"{'; '.join(check.comparison.missing())}", err=True)
        if output != "text":
            emit({"deployment": str(key), "comparison": comparison_data(check.comparison), "rolledBack": False},
                 output)
        sys.exit(EXIT_INCONCLUSIVE)
    if check.roll_back_to is None:
        click.echo(f"no rollback: revision {check.newest} does not regress against revision {check.previous}",
                   err=True)
    return check.roll_back_to, comparison_data(check.comparison)


@click.command("history")
@click.argument("deployment", required=False, shell_complete=deployments)
@click.option("--check", is_flag=True, help="Exit 1 if a deployment directory does not hold a fresh render of "
              "its newest revision (every deployment, or DEPLOYMENT's); write nothing.")
@click.option("--render", "rerender", is_flag=True, help="Render each deployment directory (or DEPLOYMENT's) from "
              "its newest revision again; records no revision.")
@click.option("--cluster", "in_cluster", is_flag=True,
              help="The revisions applied to the cluster instead, from its in-cluster record (any machine, no "
                   "local history needed), the live one marked. DEPLOYMENT is then the deployment's name "
                   "(metadata.deployment) and -n its namespace.")
@click.option("--verify", is_flag=True, help="Verify every deployment's whole history (or DEPLOYMENT's) and, with "
              "allowed signers, every revision's signature; exit 1 naming what fails. Writes nothing.")
@click.option("--allowed-signers", type=click.Path(dir_okay=False), metavar="FILE",
              help="An ssh-keygen allowed-signers file: every revision read must be signed by a key it lists for "
                   "the revision's author (namespace stackpin).  [default: $STACKPIN_ALLOWED_SIGNERS]")
@HISTORY
@DEPLOYMENTS
@cluster_options
@OUTPUT
@user_errors
def history(deployment: str | None, check: bool, rerender: bool, in_cluster: bool, verify: bool,
            allowed_signers: str | None, history_dir: str, deployments_dir: str, kubeconfig: str | None,
            context: str | None, namespace: str | None, output: str) -> None:
    """List DEPLOYMENT's revisions (every revision verified against its digest), or the deployments
    with a history when no DEPLOYMENT is given; with --cluster, the revisions applied to the cluster.

    DEPLOYMENT is NAME, NAME@PLATFORM or NAMESPACE/NAME@PLATFORM; a name two racks share is ambiguous.
    """
    if sum((check, rerender, verify)) > 1:
        raise click.UsageError("--check, --render and --verify exclude each other")
    if in_cluster:
        if check or rerender or not deployment:
            raise click.UsageError("--cluster takes a DEPLOYMENT, without --check or --render")
        _cluster_history(deployment, kubeconfig, context, namespace, output)
        return
    if kubeconfig or context or namespace:
        raise click.UsageError("--kubeconfig, --context and --namespace only with --cluster")
    store = _store(history_dir, allowed_signers=allowed_signers)
    keys = [store.resolve(deployment)] if deployment else store.keys()
    if verify:
        _verify(store, keys, output)
    elif check:
        _check(store, keys, Path(deployments_dir), output)
    elif rerender:
        from stackpin.history.record import rerender as render_again

        done = [render_again(store, key, Path(deployments_dir)) for key in keys]
        if output != "text":
            emit({"rendered": [{"deployment": str(r.revision.deployment), "revision": r.revision.revision,
                                "directory": str(r.directory), "files": list(r.files)} for r in done]}, output)
        for r in done if output == "text" else []:
            click.echo(f"rendered {r.directory}/  ({len(r.files)} files, revision {r.revision.revision})")
    elif deployment:
        from stackpin.diff.run import CHANGE_LINE, summarize_locks
        from stackpin.history.listing import list_history

        _print_history(store, keys[0], list_history(store, keys[0], summarize=summarize_locks,
                                                    summarize_name=CHANGE_LINE), output)
    else:
        from stackpin.history.listing import list_deployments

        _print_deployments(store, list_deployments(store), output)


def _bench_headlines(store: HistoryStore, key: DeploymentKey, entries: list[HistoryEntry]) -> dict[int, Any]:
    """Revision -> (one-line headline, data) of its attached bench result (`stackpin bench attach`);
    history keeps attachments opaque, the bench stage reads them."""
    from stackpin.bench.headline import headline, headline_data
    from stackpin.bench.resultfile import read_result
    from stackpin.errors import StackpinError
    from stackpin.history.attachments import attachment_path

    out: dict[int, Any] = {}
    for e in entries:
        number = e.summary.revision
        path = attachment_path(store, key, number, "bench")
        if path.is_file():
            try:
                result = read_result(path)
                out[number] = (headline(result), {"file": str(path), **headline_data(result)})
            except StackpinError as exc:
                out[number] = (f"unreadable: {exc.lines()[0]}", {"file": str(path), "error": True})
    return out


def _print_history(store: HistoryStore, key: DeploymentKey, entries: list[HistoryEntry], output: str) -> None:
    bench = _bench_headlines(store, key, entries)
    if output != "text":
        emit({"deployment": str(key), "directory": str(store.directory(key)),
              "revisions": [{**e.summary.data(), "file": str(store.path(key, e.summary.revision)),
                             "change": e.change, "bench": bench.get(e.summary.revision, (None, None))[1]}
                            for e in entries]}, output)
        return
    click.echo(f"deployment {key}: {len(entries)} revision(s) in {store.directory(key)}/")
    rows = []
    for e in entries:
        r = e.summary
        change = e.change if e.change is not None else ("(first revision)" if r.revision == 1 else "-")
        rows.append([str(r.revision), r.stack_label, r.created, _cell(r.author), _cell(r.action_label),
                     _cell(r.message), _cell(change),
                     *([_cell(bench[r.revision][0]) if r.revision in bench else "-"] if bench else [])])
    _table(["REVISION", "STACK", "CREATED", "AUTHOR", "ACTION", "MESSAGE", "CHANGE", *(["BENCH"] if bench else [])],
           rows)
    if any(e.summary.stand_in for e in entries):
        from stackpin.history.model import STAND_IN_NOTE

        click.echo(STAND_IN_NOTE)


def _print_deployments(store: HistoryStore, summaries: list[DeploymentSummary], output: str) -> None:
    if output != "text":
        emit({"history": str(store.root), "deployments": [
            {"deployment": str(s.key), "directory": str(s.directory), "newest": _revision_data(s.newest)}
            for s in summaries]}, output)
        return
    if not summaries:
        click.echo(f"no deployment has a history in {store.root}/ (stackpin promote LOCK -m MESSAGE records one)",
                   err=True)
        return
    _table(["DEPLOYMENT", "REVISIONS", "STACK", "CREATED", "MESSAGE"],
           [[str(s.key), str(s.newest.revision), s.newest.stack_label, s.newest.created, _cell(s.newest.message)]
            for s in summaries])
    if any(s.newest.lock.resolved.stand_in for s in summaries):
        from stackpin.history.model import STAND_IN_NOTE

        click.echo(STAND_IN_NOTE)


def _cluster_history(deployment: str, kubeconfig: str | None, context: str | None, namespace: str | None,
                     output: str) -> None:
    from stackpin.deploy.clusterhistory import cluster_history
    from stackpin.errors import StackpinError
    from stackpin.profile.k8s_names import DNS_LABEL
    from stackpin.profile.model import DEFAULT_NAMESPACE

    if not re.fullmatch(DNS_LABEL, deployment):
        raise StackpinError(f"{deployment!r}: --cluster takes the deployment's name (metadata.deployment, e.g. "
                            "dsv41-flash), not a history key", "name the namespace with -n")
    cluster = connect_cluster(kubeconfig, context)
    ns = namespace or cluster.context_namespace or DEFAULT_NAMESPACE
    found = cluster_history(cluster, deployment, ns)
    if output != "text":
        emit(found.as_dict(), output)
        return
    click.echo(f"deployment {found.namespace}/{found.deployment}: {len(found.entries)} applied revision(s) in "
               f"{found.record}")
    rows = []
    for i, e in enumerate(found.entries):
        rows.append(["*" if i == found.live else "", str(e.revision) if e.revision is not None else "-",
                     e.stack, e.stack_digest.removeprefix("sha256:")[:12], e.applied_at, _cell(e.applied_by)])
    _table(["LIVE", "REVISION", "STACK", "DIGEST", "APPLIED", "BY"], rows)
    for problem in found.problems:
        click.echo(f"problem: {problem}")


def _verify(store: HistoryStore, keys: list[DeploymentKey], output: str) -> None:
    """Each deployment's chain (and signatures, with allowed signers): one line each, exit 1 on a failure."""
    from stackpin.errors import StackpinError

    signers = store.signers  # a bad allowed-signers file is bad input (exit 2), not a failed verification
    results: list[dict[str, Any]] = []
    for key in keys:
        try:
            links = store.chain(key).links
            signed = sorted({link.signer for link in links if link.signer})
            results.append({"deployment": str(key), "verified": True, "revisions": len(links), "signers": signed})
        except StackpinError as exc:
            results.append({"deployment": str(key), "verified": False, "error": exc.message.splitlines()[0],
                            "hint": exc.hint})
    failed = [r for r in results if not r["verified"]]
    if output != "text":
        emit({"history": str(store.root), "allowedSigners": str(signers.path) if signers else None,
              "verified": not failed, "deployments": results}, output)
    else:
        for r in results:
            if not r["verified"]:
                click.echo(f"FAILED    {r['deployment']}: {r['error']}")
                if r["hint"]:
                    click.echo(f"          ({r['hint']})")
            elif signers is None:
                click.echo(f"verified  {r['deployment']}: {r['revisions']} revision(s), digests, chain and head "
                           "(signatures not checked: no allowed signers)")
            else:
                click.echo(f"verified  {r['deployment']}: {r['revisions']} revision(s), each signed by a key "
                           f"{signers.path} allows for its author ({', '.join(r['signers'])})")
    if failed:
        click.echo(f"error: {len(failed)} of {len(results)} deployment histories failed verification", err=True)
        sys.exit(1)
    if not results:
        click.echo(f"no deployment has a history in {store.root}/", err=True)


def _check(store: HistoryStore, keys: list[DeploymentKey], deployments: Path, output: str) -> None:
    from stackpin.history.listing import check_deployments

    checks: list[DeploymentCheck] = check_deployments(store, deployments, keys)
    stale = [c for c in checks if not c.current]
    if output != "text":
        emit({"deployments": str(deployments), "current": not stale, "checks": [
            {"deployment": str(c.key), "directory": str(c.directory), "current": c.current, "newest": c.newest,
             "holds": c.holds, "drift": [{"path": d.path, "status": d.status} for d in c.drift]} for c in checks]},
             output)
    else:
        for c in checks:
            if c.current:
                click.echo(f"current  {c.directory}/  (revision {c.newest})")
                continue
            if c.holds == c.newest:
                why = f"revision {c.newest}, but not as it renders now"
            else:
                why = f"{'holds no revision' if c.holds is None else f'holds revision {c.holds}'}, newest is {c.newest}"
            click.echo(f"stale    {c.directory}/  ({why})")
            for item in c.drift:
                click.echo(str(item))
    if stale:
        click.echo(f"error: {len(stale)} deployment director{'y is' if len(stale) == 1 else 'ies are'} not "
                   "current; run stackpin history --render", err=True)
        sys.exit(1)
    click.echo(f"deployments current: {len(checks)} deployment(s) in {deployments}", err=True)
