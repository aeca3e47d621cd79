"""Library twin of `stackpin history DEPLOYMENT --cluster`: the applied revisions, read from the cluster
alone (the ApplySet parent's record), so any machine sees them without a local history.

Which entry is live: the newest one whose stack digest and revision are what the live members carry
(`stackpin.dev/stack-digest`, `stackpin.dev/revision`, as `stackpin status` reads them). None is
marked when nothing is live, or the members disagree (an apply stopped part way): the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stackpin.deploy.applyset import AppliedRevision
from stackpin.deploy.kube import Cluster
from stackpin.deploy.status import deployment_status


@dataclass(frozen=True)
class ClusterHistory:
    deployment: str
    namespace: str
    record: str
    entries: tuple[AppliedRevision, ...]  # oldest first
    live: int | None  # index into entries of the live one
    problems: tuple[str, ...]  # why none is marked, or what else status found wrong

    def as_dict(self) -> dict[str, Any]:
        return {"deployment": self.deployment, "namespace": self.namespace, "record": self.record,
                "revisions": [{"stack": e.stack, "stackDigest": e.stack_digest, "revision": e.revision,
                               "appliedAt": e.applied_at, "appliedBy": e.applied_by, "objects": list(e.objects),
                               "live": i == self.live} for i, e in enumerate(self.entries)],
                "problems": list(self.problems)}


def cluster_history(cluster: Cluster, deployment: str, namespace: str) -> ClusterHistory:
    """The record of `deployment` in `namespace`; ClusterError (exit 2) when there is none."""
    report = deployment_status(cluster, deployment, namespace)  # refuses a deployment with no record
    entries = report.entries
    live = None
    problems = list(report.problems)
    if report.objects and not any("different stack digests" in p for p in problems):
        live = next((i for i in range(len(entries) - 1, -1, -1)
                     if (entries[i].stack_digest, entries[i].revision) == (report.stack_digest, report.revision)),
                    None)
        if live is None and not report.record_behind:  # status already says the record is behind
            problems.append(f"the live objects carry stack digest {report.stack_digest}, which no entry of the "
                            "record has (applied by another tool?)")
    elif not report.objects:
        problems.append("no member of the deployment is live")
    return ClusterHistory(deployment, namespace, report.record, entries, live, tuple(problems))
