"""Library twin of `stackpin rollback DEPLOYMENT --apply`: the history rollback, then apply it.

The history records only what happened: a rollback revision exists once the cluster holds it. In
order, holding the deployment's history lock (so no other promote or rollback takes the number):

1. the rollback's revision N+1 is worked out (not written);
2. apply's read and check phases run for it (a server-side dry run of every write): a recreate not
   allowed, a conflict, RBAC, a schema error stop here, and nothing is written anywhere;
3. the revision file is written and the deployment directory rendered from it;
4. apply's writes. If they fail, step 3 is taken back (the file removed, the directory rendered from
   revision N again) and the error says so. The cluster may then hold part of revision N+1 (objects
   annotated with it; the in-cluster record, written last, does not list it): the same command run
   again works out the same revision and stack, and converges.

Steps 1 to 4 hold the deployment's Lease (`lease.py`), as `stackpin apply` does. With `dry_run` only
steps 1 and 2 run, and no Lease is taken. Waiting for readiness (`--wait`) comes after: the revision is
applied by then, so a wait that times out takes nothing back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stackpin.deploy.apply import ApplyOptions, ApplyResult, CheckedApply, check_apply, write_checked
from stackpin.deploy.kube import Cluster
from stackpin.deploy.lease import holding
from stackpin.deploy.source import StackSource
from stackpin.errors import StackpinError
from stackpin.history.model import DeploymentKey, Revision
from stackpin.history.record import Recorded, planned_rollback, rollback
from stackpin.history.store import HistoryStore

Progress = Callable[[str], None]


class RollbackNotApplied(StackpinError):
    """The apply of a rollback failed and its history revision was taken back (the apply's exit code)."""

    def __init__(self, cause: StackpinError, revision: Revision, key: DeploymentKey) -> None:
        target = revision.action.revision
        lines = cause.lines()
        lines.append(f"history unchanged: revision {revision.revision} of {key} (roll back to revision {target}) "
                     "was taken back because the apply did not complete; the cluster may hold part of it: run the "
                     "same stackpin rollback --apply again, it converges")
        super().__init__("\n".join(lines))
        self.exit_code = cause.exit_code


@dataclass(frozen=True)
class RollbackApplied:
    revision: Revision
    recorded: Recorded | None  # None on a dry run: nothing was written
    applied: ApplyResult


def _quiet(_: str) -> None:
    pass


def rollback_apply(cluster: Cluster, store: HistoryStore, key: DeploymentKey, deployments: Path,
                   options: ApplyOptions, *, to: int | None = None, message: str | None = None,
                   env: Mapping[str, str] | None = None, progress: Progress = _quiet,
                   warn: Progress = _quiet) -> RollbackApplied:
    """Record the rollback and apply it (see the module docstring); `options` as for apply_stack
    (`create_namespace` is not offered: a deployment being rolled back has its namespace)."""
    def source_of(revision: Revision) -> StackSource:
        return StackSource(revision.lock, origin=f"{key}@{revision.revision}", revision=revision.revision)

    if options.dry_run:
        planned = planned_rollback(store, key, to=to, message=message, env=env)
        checked = check_apply(cluster, source_of(planned), options, progress, warn)
        return RollbackApplied(planned, None, write_checked(cluster, checked, progress))

    found: list[CheckedApply] = []
    results: list[ApplyResult] = []

    def check(revision: Revision) -> None:
        found.append(check_apply(cluster, source_of(revision), options, progress, warn))

    def then(revision: Revision) -> None:
        try:
            results.append(write_checked(cluster, found[-1], progress))
        except StackpinError as exc:
            raise RollbackNotApplied(exc, revision, key) from exc

    # The deployment's Lease around the whole of it: no other apply changes the cluster between this
    # check and these writes.
    with holding(cluster, options.namespace or key.namespace, key.name, f"rollback --apply of {key}",
                 wait_s=options.lock_timeout_s, progress=progress):
        recorded = rollback(store, key, deployments, to=to, message=message, env=env, check=check, then=then)
    return RollbackApplied(recorded.revision, recorded, results[-1])
