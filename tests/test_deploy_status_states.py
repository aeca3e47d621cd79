"""`stackpin status` in the states where the live objects and the record disagree, or where the
objects are there but cannot serve: every one against the real kube-apiserver, exit 1 and said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stackpin.deploy.apply import ApplyOptions, apply_stack
from stackpin.deploy.kube import connect
from stackpin.deploy.source import resolve_source
from stackpin.lock.lockfile import read_lock
from tests.kube import DGD, LOCKS, Kube, attestation, garbage_collector, lockfile

DGD_SUBJECT = "dynamographdeployment.nvidia.com/dsv41-flash"
DIGEST = {s: read_lock(Path(lockfile(s))).stack_digest for s in ("gb300-tuned", "gb300-disagg-wide-ep")}


def status(kube: Kube) -> tuple[int, dict, str]:
    data = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS), "-o", "json")
    text = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS))
    assert text.exit_code == data.exit_code
    return data.exit_code, json.loads(data.stdout), text.stdout + text.stderr


class Killed(BaseException):
    """The process dying at that point (a BaseException: nothing on the way catches it)."""


def test_a_record_behind_the_live_objects_is_said_and_no_other_stack_is_shown_live(kube: Kube) -> None:
    """An apply of another stack killed after its last prune, before its record entry: the objects are
    the new stack's, the record's newest entry the old one's."""
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    pruned: list[str] = []

    def progress(message: str) -> None:
        if message.endswith(" pruned"):
            pruned.append(message)
            if len(pruned) == 2:
                raise Killed

    cluster = connect(str(kube.kubeconfig), None)
    source = resolve_source(lockfile("gb300-tuned"), LOCKS)
    with garbage_collector(kube), pytest.raises(Killed):
        options = ApplyOptions(namespace=kube.namespace, allow_recreate=True, allow_stand_ins=True)
        apply_stack(cluster, source, options, progress=progress)
    assert attestation("gb300-disagg-wide-ep") + " pruned" in pruned

    code, data, text = status(kube)
    assert code == 1 and data["inSync"] is False and data["recordBehind"] is True
    assert data["stack"] == "gb300-tuned" and data["stackDigest"] == DIGEST["gb300-tuned"]
    assert data["lastApplied"] is None  # not the old stack's entry
    assert data["problems"] == [
        f"the record is behind the live objects: they carry stack digest {DIGEST['gb300-tuned']}, the record's "
        f"newest entry is gb300-disagg-wide-ep {DIGEST['gb300-disagg-wide-ep']}: an apply stopped before writing "
        "its record entry (run it again: it converges)"]
    assert "missing" not in text  # the ConfigMap it pruned is not blamed
    assert "applied     - (not in the record: see the problem below)" in text
    history = kube.stackpin("history", "dsv41-flash", "--cluster", "-o", "json")
    assert json.loads(history.stdout)["problems"] == data["problems"]

    assert kube.apply("gb300-tuned").exit_code == 0  # the re-run writes the record
    code, data, _ = status(kube)
    assert code == 0 and data["recordBehind"] is False and data["lastApplied"]["stack"] == "gb300-tuned"


def test_a_terminating_deployment_is_not_in_sync(kube: Kube) -> None:
    """Deleted, held by a finalizer (an operator's, here the test's: envtest runs none)."""
    assert kube.apply("gb300-tuned").exit_code == 0
    path = kube.path(DGD, "dynamographdeployments", "dsv41-flash")
    kube.env.ok("PATCH", path, {"metadata": {"finalizers": ["example.com/cleanup"]}},
                content_type="application/merge-patch+json")
    kube.env.ok("DELETE", path)
    try:
        code, data, text = status(kube)
        since = (kube.dgd() or {})["metadata"]["deletionTimestamp"]
        assert code == 1 and data["inSync"] is False
        assert data["problems"] == [f"{DGD_SUBJECT} is being deleted (since {since}; waiting on finalizers: "
                                    "example.com/cleanup)"]
        assert f"is not in sync: {DGD_SUBJECT} is being deleted" in text
    finally:
        kube.env.ok("PATCH", path, {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")


def test_a_configmap_the_deployment_mounts_that_does_not_exist_is_said(kube: Kube) -> None:
    """What two unguarded writers left (before the Lease): stack A's DynamoGraphDeployment, written
    last, mounting A's attestation ConfigMap, which B's apply pruned; the record says B."""
    assert kube.apply("gb300-tuned").exit_code == 0
    tuned = kube.dgd()
    assert tuned is not None
    with garbage_collector(kube):
        assert kube.apply("gb300-disagg-wide-ep", "--allow-recreate").exit_code == 0
    meta = tuned["metadata"]
    kube.env.ok("PUT", kube.path(DGD, "dynamographdeployments", "dsv41-flash") + "?fieldManager=stackpin", {
        **{k: tuned[k] for k in ("apiVersion", "kind", "spec")},
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": meta["labels"],
                     "annotations": meta["annotations"],
                     "resourceVersion": (kube.dgd() or {})["metadata"]["resourceVersion"]}})
    code, data, _ = status(kube)
    assert code == 1
    missing = attestation("gb300-tuned")
    assert f"{missing}, which {DGD_SUBJECT} mounts or reads, does not exist: its pods cannot start" in data["problems"]
    assert data["recordBehind"] is True
