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

from stackpin.cli.common import OUTPUT, emit, user_errors

if TYPE_CHECKING:
    from stackpin.history.deployed import DeploymentCheck
    from stackpin.history.listing import DeploymentSummary, HistoryEntry
    from stackpin.history.model import DeploymentKey, Revision
    from stackpin.history.record import Recorded
    from stackpin.history.store import HistoryStore

HISTORY = click.option("--history", "history_dir", default="history", show_default=True, metavar="DIR",
                       type=click.Path(file_okay=False),
                       help="Where revisions are kept: <namespace>/<deployment>@<platform>/NNNNNN.yaml.")
DEPLOYMENTS = click.option("--deployments", "deployments_dir", default="deployments", show_default=True, metavar="DIR",
                           type=click.Path(file_okay=False),
                           help="Where each deployment's newest revision is rendered for GitOps: "
                                "<namespace>/<deployment>@<platform>/.")
MESSAGE_HELP = "Why: kept in the revision and shown by `stackpin history`."
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _store(history_dir: str) -> HistoryStore:
    from stackpin.history.store import HistoryStore

    return HistoryStore(Path(history_dir))


def _cell(value: str) -> str:
    """One table cell: a message's first line, nothing that moves the terminal's cursor."""
    return _UNPRINTABLE.sub("?", value.strip().split("\n", 1)[0])


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _revision_data(revision: Revision) -> dict[str, Any]:
    return {"revision": revision.revision, "stack": revision.stack, "stackDigest": revision.stack_digest,
            "created": revision.created, "author": revision.author, "message": revision.message,
            "action": revision.action.model_dump(mode="json", exclude_none=True),
            "revisionDigest": revision.revision_digest}


def _print_recorded(recorded: Recorded, output: str) -> None:
    revision = recorded.revision
    if output != "text":
        emit({"deployment": str(revision.deployment), "file": str(recorded.path), **_revision_data(revision),
              "directory": str(recorded.directory), "files": list(recorded.files)}, output)
        return
    what = (f"promote {revision.stack}" if revision.action.kind == "promote"
            else f"{revision.action} ({revision.stack})")
    click.echo(f"recorded {recorded.path}  revision {revision.revision} of {revision.deployment}: {what} "
               f"{revision.stack_digest}")
    click.echo(f"rendered {recorded.directory}/  ({len(recorded.files)} files)")


@click.command()
@click.argument("lock_input", metavar="LOCK")
@click.option("-m", "--message", required=True, help=MESSAGE_HELP)
@HISTORY
@DEPLOYMENTS
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where a profile's lock is looked up (LOCK may be a lockfile or a profile with a current lock).")
@OUTPUT
@user_errors
def promote(lock_input: str, message: str, history_dir: str, deployments_dir: str, lockdir: str,
            output: str) -> None:
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
    _print_recorded(promote_lock(locks[0], message, _store(history_dir), Path(deployments_dir)), output)


@click.command()
@click.argument("deployment")
@click.option("--to", "to", type=int, metavar="N", help="The revision whose stack to restore (default: the one "
              "before the newest).")
@click.option("-m", "--message", help=MESSAGE_HELP + "  [default: Roll back to revision N]")
@click.option("--if-regressed", is_flag=True, help="Only if the newest revision's attached bench result regresses "
              "against the previous revision's (`stackpin bench attach`); prints the comparison.")
@click.option("--threshold", "threshold_text", default="5%", show_default=True,
              help="With --if-regressed: the smallest relative change that counts as a regression.")
@HISTORY
@DEPLOYMENTS
@OUTPUT
@user_errors
def rollback(deployment: str, to: int | None, message: str | None, if_regressed: bool, threshold_text: str,
             history_dir: str, deployments_dir: str, output: str) -> None:
    """Record a new revision of DEPLOYMENT whose stack is revision N's, and render it.

    History is never rewritten: the rollback is the next revision, and can itself be rolled back.
    DEPLOYMENT is NAME, NAME@PLATFORM or NAMESPACE/NAME@PLATFORM (`stackpin history` lists them).
    """
    from stackpin.history.record import rollback as roll_back

    store = _store(history_dir)
    key = store.resolve(deployment)
    if if_regressed:
        if to is not None:
            raise click.UsageError("--if-regressed rolls back to the previous revision; it takes no --to")
        to, comparison = _regressed(store, key, threshold_text, output)
        if to is None:
            if output != "text":
                emit({"deployment": str(key), "comparison": comparison, "rolledBack": False}, output)
            return
        message = message or f"Roll back to revision {to}: revision {to + 1} regressed against it"
        if output != "text":
            recorded = roll_back(store, key, Path(deployments_dir), to=to, message=message)
            emit({"deployment": str(key), "comparison": comparison, "rolledBack": True,
                  "file": str(recorded.path), **_revision_data(recorded.revision)}, output)
            return
    recorded = roll_back(store, key, Path(deployments_dir), to=to, message=message)
    _print_recorded(recorded, output)


def _regressed(store: HistoryStore, key: DeploymentKey, threshold_text: str,
               output: str) -> tuple[int | None, dict[str, Any] | None]:
    """The revision to roll back to when the newest revision's bench result regresses against the
    previous one's (None, after saying why, when it does not or cannot be told), and the comparison."""
    from stackpin.bench.compare import compare
    from stackpin.bench.result import read_result
    from stackpin.cli.bench import _threshold, comparison_data, print_comparison
    from stackpin.history.attachments import attachment_path

    newest = store.newest(key)
    if newest is None or newest.revision < 2:
        click.echo(f"no rollback: {key} has no revision before its newest to compare with", err=True)
        return None, None
    previous = newest.revision - 1
    paths = {n: attachment_path(store, key, n, "bench") for n in (previous, newest.revision)}
    missing = [n for n, p in paths.items() if not p.is_file()]
    if missing:
        click.echo(f"no rollback: revision {' and '.join(map(str, missing))} of {key} has no bench result "
                   "(stackpin bench attach DEPLOYMENT@REV RESULT.json)", err=True)
        return None, None
    comparison = compare([read_result(paths[previous])], [read_result(paths[newest.revision])],
                         threshold=_threshold(threshold_text))
    if output == "text":
        click.echo(f"revision {previous} (A) vs revision {newest.revision} (B) of {key}:")
        print_comparison(comparison, output)
    if not comparison.regressed:
        click.echo(f"no rollback: revision {newest.revision} does not regress against revision {previous}", err=True)
        return None, comparison_data(comparison)
    return previous, comparison_data(comparison)


@click.command("history")
@click.argument("deployment", required=False)
@click.option("--check", is_flag=True, help="Exit 1 if a deployment directory does not hold a fresh render of "
              "its newest revision (every deployment, or DEPLOYMENT's); write nothing.")
@click.option("--render", "rerender", is_flag=True, help="Render each deployment directory (or DEPLOYMENT's) from "
              "its newest revision again; records no revision.")
@HISTORY
@DEPLOYMENTS
@OUTPUT
@user_errors
def history(deployment: str | None, check: bool, rerender: bool, history_dir: str, deployments_dir: str,
            output: str) -> None:
    """List DEPLOYMENT's revisions (every revision verified against its digest), or the deployments
    with a history when no DEPLOYMENT is given.

    DEPLOYMENT is NAME, NAME@PLATFORM or NAMESPACE/NAME@PLATFORM; a name two racks share is ambiguous.
    """
    if check and rerender:
        raise click.UsageError("--check and --render exclude each other")
    store = _store(history_dir)
    keys = [store.resolve(deployment)] if deployment else store.keys()
    if check:
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
        from stackpin.diff.run import summarize_locks
        from stackpin.history.listing import list_history

        _print_history(store, keys[0], list_history(store, keys[0], summarize=summarize_locks), output)
    else:
        from stackpin.history.listing import list_deployments

        _print_deployments(store, list_deployments(store), output)


def _bench_headlines(store: HistoryStore, key: DeploymentKey, entries: list[HistoryEntry]) -> dict[int, Any]:
    """Revision -> (one-line headline, data) of its attached bench result (`stackpin bench attach`);
    history keeps attachments opaque, the bench stage reads them."""
    from stackpin.bench.headline import headline, headline_data
    from stackpin.bench.result import read_result
    from stackpin.errors import StackpinError
    from stackpin.history.attachments import attachment_path

    out: dict[int, Any] = {}
    for e in entries:
        path = attachment_path(store, key, e.revision.revision, "bench")
        if path.is_file():
            try:
                result = read_result(path)
                out[e.revision.revision] = (headline(result), {"file": str(path), **headline_data(result)})
            except StackpinError as exc:
                out[e.revision.revision] = (f"unreadable: {exc.lines()[0]}", {"file": str(path), "error": True})
    return out


def _print_history(store: HistoryStore, key: DeploymentKey, entries: list[HistoryEntry], output: str) -> None:
    bench = _bench_headlines(store, key, entries)
    if output != "text":
        emit({"deployment": str(key), "directory": str(store.directory(key)),
              "revisions": [{**_revision_data(e.revision), "file": str(store.path(key, e.revision.revision)),
                             "change": e.change, "bench": bench.get(e.revision.revision, (None, None))[1]}
                            for e in entries]}, output)
        return
    click.echo(f"deployment {key}: {len(entries)} revision(s) in {store.directory(key)}/")
    rows = []
    for e in entries:
        r = e.revision
        action = f"promote {r.stack}" if r.action.kind == "promote" else f"{r.action} ({r.stack})"
        change = e.change if e.change is not None else ("(first revision)" if r.revision == 1 else "-")
        rows.append([str(r.revision), r.short_digest, r.created, _cell(r.author), _cell(action), _cell(r.message),
                     _cell(change), *([_cell(bench[r.revision][0]) if r.revision in bench else "-"] if bench else [])])
    _table(["REVISION", "STACK", "CREATED", "AUTHOR", "ACTION", "MESSAGE", "CHANGE", *(["BENCH"] if bench else [])],
           rows)


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
           [[str(s.key), str(s.newest.revision), s.newest.short_digest, s.newest.created, _cell(s.newest.message)]
            for s in summaries])


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
