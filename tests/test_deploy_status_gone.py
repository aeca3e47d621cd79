"""`stackpin status` when the DynamoGraphDeployment is gone (issue 37): an apply killed between a
recreate's delete and its create, or a delete outside stackpin. Nothing serves, and status says so, in
its text and in `-o json` (`dgdGone`), against the real kube-apiserver."""

from __future__ import annotations

import json
import time

import pytest

from stackpin.deploy.apply import ApplyOptions, apply_stack
from stackpin.deploy.kube import connect
from stackpin.deploy.source import resolve_source
from tests.kube import DGD, LOCKS, Kube, garbage_collector, lockfile

DGD_SUBJECT = "dynamographdeployment.nvidia.com/dsv41-flash"
GONE = "the DynamoGraphDeployment is gone: nothing serves"


class Killed(BaseException):
    """The process dying at that point (a BaseException: nothing on the way catches it)."""


def status(kube: Kube) -> tuple[int, dict, str]:
    data = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS), "-o", "json")
    text = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS))
    assert text.exit_code == data.exit_code
    return data.exit_code, json.loads(data.stdout), text.stdout + text.stderr


def test_a_recreate_killed_after_its_delete_says_nothing_serves(kube: Kube) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0

    def progress(message: str) -> None:
        if message.endswith("deleted for recreate"):
            raise Killed

    cluster = connect(str(kube.kubeconfig), None)
    source = resolve_source(lockfile("gb300-tuned"), LOCKS)
    with garbage_collector(kube), pytest.raises(Killed):
        apply_stack(cluster, source, ApplyOptions(namespace=kube.namespace, allow_recreate=True,
                                                  allow_stand_ins=True), progress=progress)
    deadline = time.monotonic() + 10
    while kube.dgd() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kube.dgd() is None

    code, data, text = status(kube)
    assert code == 1 and data["inSync"] is False and data["dgdGone"] is True
    assert data["readiness"] is None and data["recordBehind"] is False
    assert data["problems"][0].startswith(f"{GONE} ({DGD_SUBJECT} is in the record, not in the cluster")
    assert not any("missing (deleted outside stackpin?)" in p for p in data["problems"])  # said once, not twice
    assert f"problem     {GONE}" in text and f"is not in sync: {GONE}" in text

    assert kube.apply("gb300-tuned").exit_code == 0  # the re-run converges
    code, data, _ = status(kube)
    assert code == 0 and data["dgdGone"] is False and data["problems"] == []


def test_a_deployment_deleted_outside_stackpin_says_nothing_serves(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    kube.env.ok("DELETE", kube.path(DGD, "dynamographdeployments", "dsv41-flash"))
    code, data, text = status(kube)
    assert code == 1 and data["dgdGone"] is True and data["problems"][0].startswith(GONE)
    assert f"problem     {GONE}" in text


def test_a_live_deployment_is_not_gone(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    code, data, _ = status(kube)
    assert code == 0 and data["dgdGone"] is False


def test_a_revision_whose_deployment_is_gone_is_not_taken_for_a_record_behind(kube: Kube) -> None:
    """The issue's case: the stack applied from a history revision, the DynamoGraphDeployment deleted by a
    killed recreate. The revision is read from the members left (it was read from the DGD only, so the
    record was said to be behind the live objects with the same digest on both sides)."""
    from msgspec.structs import replace

    cluster = connect(str(kube.kubeconfig), None)
    options = ApplyOptions(namespace=kube.namespace, allow_recreate=True, allow_stand_ins=True)
    apply_stack(cluster, replace(resolve_source(lockfile("gb300-disagg-wide-ep"), LOCKS), revision=1), options)

    def progress(message: str) -> None:
        if message.endswith("deleted for recreate"):
            raise Killed

    with garbage_collector(kube), pytest.raises(Killed):
        apply_stack(connect(str(kube.kubeconfig), None),
                    replace(resolve_source(lockfile("gb300-tuned"), LOCKS), revision=2), options, progress=progress)
    deadline = time.monotonic() + 10
    while kube.dgd() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    code, data, text = status(kube)
    assert code == 1 and data["dgdGone"] is True and data["recordBehind"] is False
    assert data["revision"] == 1 and data["lastApplied"]["revision"] == 1
    assert "the record is behind" not in text and data["problems"][0].startswith(GONE)
