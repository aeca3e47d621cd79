"""One writer per deployment: the Lease `stackpin-<deployment>` held by `stackpin apply` and `stackpin
rollback --apply`, with real `stackpin` processes against the real kube-apiserver.

To hold a writer in the middle of its run for as long as a test needs, the test makes it recreate the
DynamoGraphDeployment: envtest runs no garbage collector, so the foreground deletion stays pending
(the `foregroundDeletion` finalizer) and the writer waits, holding the Lease, until the test removes
the finalizer as the garbage collector would.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stackpin.deploy.kube import connect
from stackpin.deploy.lease import DURATION_S, DeploymentLease, LeaseHeld
from tests.kube import DGD, LOCKS, Kube, attestation, lockfile, with_stand_ins

STACKPIN = Path(sys.executable).with_name("stackpin")
LEASE = "stackpin-dsv41-flash"


def lease_path(kube: Kube) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{kube.namespace}/leases/{LEASE}"


def lease(kube: Kube) -> dict[str, Any] | None:
    status, data = kube.env.request("GET", lease_path(kube))
    return data if status == 200 else None


def start(kube: Kube, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(STACKPIN), *with_stand_ins(args), "--kubeconfig", str(kube.kubeconfig), "-n",
                             kube.namespace],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    return proc.returncode, out, err


def run(kube: Kube, *args: str) -> tuple[int, str, str]:
    return finish(start(kube, *args))


def until(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def release_foreground_deletion(kube: Kube) -> None:
    """What the garbage collector does once a foreground-deleted object's dependents are gone."""
    kube.env.ok("PATCH", kube.path(DGD, "dynamographdeployments", "dsv41-flash"), {"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json")


@pytest.fixture
def stuck_writer(kube: Kube) -> Iterator[subprocess.Popen[str]]:
    """A real `stackpin apply` holding the Lease, waiting (with the Lease held) for the old
    DynamoGraphDeployment of a recreate to be gone."""
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    proc = start(kube, "apply", lockfile("gb300-tuned"), "--allow-recreate", "--timeout", "300")
    until("the writer holds the Lease and waits for the deletion",
          lambda: lease(kube) and (kube.dgd() or {}).get("metadata", {}).get("deletionTimestamp"))
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def holder_of(kube: Kube) -> str:
    found = lease(kube)
    assert found is not None
    return str(found["spec"]["holderIdentity"])


def test_a_second_writer_is_refused_naming_the_holder_and_a_waiting_one_goes_after(
        kube: Kube, stuck_writer: subprocess.Popen[str]) -> None:
    held = lease(kube)
    assert held is not None
    spec = held["spec"]
    assert spec["leaseDurationSeconds"] == DURATION_S
    assert f" pid {stuck_writer.pid} (" in spec["holderIdentity"]
    assert held["metadata"]["annotations"]["stackpin.dev/operation"] == "apply gb300-tuned"

    # The holder renews its Lease while it runs: past its first term it is still held, not expired.
    renewed = datetime.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
    time.sleep(max(0.0, (renewed - datetime.datetime.now(datetime.UTC)).total_seconds() + DURATION_S + 2))
    code, out, err = run(kube, "apply", lockfile("gb300-launch"))
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"error: deployment {kube.namespace}/dsv41-flash is being changed by "
                           f"{spec['holderIdentity']} (apply gb300-tuned): lease/{LEASE} in namespace "
                           f"{kube.namespace} is held, until "), line
    assert line.endswith("unless its holder renews it; refused (hint: wait for it to finish, or pass "
                         "--lock-timeout SECONDS to wait)"), line
    assert stuck_writer.poll() is None and holder_of(kube) == spec["holderIdentity"]

    # A third writer waits for the Lease; the first finishes once its old object is gone.
    waiting = start(kube, "apply", lockfile("gb300-disagg-wide-ep"), "--allow-recreate", "--lock-timeout", "120",
                    "--timeout", "120")
    time.sleep(3)
    assert waiting.poll() is None, waiting.communicate()
    release_foreground_deletion(kube)
    code, out, err = finish(stuck_writer)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("applied gb300-tuned")
    # The waiting writer now recreates the DGD again: act as the garbage collector until it is done.
    until("the second recreate deletes the DGD",
          lambda: (kube.dgd() or {}).get("metadata", {}).get("deletionTimestamp") or waiting.poll() is not None)
    if waiting.poll() is None:
        release_foreground_deletion(kube)
    code, out, err = finish(waiting)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("applied gb300-disagg-wide-ep")
    assert lease(kube) is None  # released
    # The cluster is one stack's: the DynamoGraphDeployment's attestation ConfigMap exists, the record agrees.
    assert attestation("gb300-disagg-wide-ep") in [f"configmap/{n.split('/')[1]}" for n in kube.everything()]
    status = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS))
    assert status.exit_code == 0, status.output


def test_a_killed_writer_s_lease_is_taken_over_only_once_it_expires(
        kube: Kube, stuck_writer: subprocess.Popen[str]) -> None:
    os.kill(stuck_writer.pid, signal.SIGKILL)
    stuck_writer.wait()
    held = lease(kube)
    assert held is not None  # SIGKILL: no chance to release it
    renewed = datetime.datetime.fromisoformat(held["spec"]["renewTime"].replace("Z", "+00:00"))
    expires = renewed + datetime.timedelta(seconds=held["spec"]["leaseDurationSeconds"])

    code, _, err = run(kube, "apply", lockfile("gb300-tuned"), "--allow-recreate")
    assert code == 2 and "is being changed by" in err and f"pid {stuck_writer.pid} (" in err

    waiting = start(kube, "apply", lockfile("gb300-tuned"), "--allow-recreate", "--lock-timeout", "60",
                    "--timeout", "60")
    until("the Lease taken over", lambda: holder_of(kube) != held["spec"]["holderIdentity"], timeout=70)
    taken = datetime.datetime.now(datetime.UTC)
    assert taken >= expires, (taken, expires)
    taken_over = lease(kube)
    assert taken_over is not None and taken_over["spec"]["leaseTransitions"] == 1
    release_foreground_deletion(kube)  # the killed writer's recreate: the new writer waits for it first
    code, out, err = finish(waiting)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("applied gb300-tuned")
    assert lease(kube) is None


def test_a_writer_that_loses_its_lease_stops_before_its_next_write(
        kube: Kube, stuck_writer: subprocess.Popen[str]) -> None:
    """Another writer takes the Lease (here the test, as an admin would after deciding the holder was
    dead): the holder's next renewal finds it gone and it writes nothing more."""
    held = lease(kube)
    assert held is not None
    before = kube.everything()
    held["spec"]["holderIdentity"] = "intruder"
    kube.env.ok("PUT", lease_path(kube), held)
    time.sleep(12)  # one renewal period and a little
    release_foreground_deletion(kube)
    code, out, err = finish(stuck_writer)
    assert code == 2 and out == ""
    [line] = [x for x in err.splitlines() if not x.startswith("warning: ")]  # the recreate's dry-run note
    assert line == (f"error: lost lease/{LEASE} in namespace {kube.namespace} (intruder holds it now): stopped before "
                    "the next write, so that two writers never change the deployment at once; the apply stopped "
                    "after 2 of its 7 writes (the last: dynamographdeployment.nvidia.com/dsv41-flash deleted for "
                    "recreate) (hint: run it again: it converges)"), line
    after = kube.everything()
    assert "dynamographdeployments/dsv41-flash" not in after  # the delete went through; no create followed
    assert {k: v for k, v in after.items() if k.startswith("configmaps/")} == \
        {k: v for k, v in before.items() if k.startswith("configmaps/")}
    assert holder_of(kube) == "intruder"  # not released: it is not the writer's any more


@pytest.mark.parametrize("existing", ["none", "expired"])
def test_of_two_racing_takers_exactly_one_wins(kube: Kube, existing: str) -> None:
    """Two processes' worth of clients racing for one Lease (created, or taken over from an expired
    holder), started together: the server's create and resourceVersion checks let exactly one win."""
    for attempt in range(5):
        name = f"race-{existing}-{attempt}"
        if existing == "expired":
            old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=DURATION_S + 5)
            kube.env.ok("POST", f"/apis/coordination.k8s.io/v1/namespaces/{kube.namespace}/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": f"stackpin-{name}"},
                "spec": {"holderIdentity": "dead", "leaseDurationSeconds": DURATION_S,
                         "renewTime": old.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}})
        clusters = [connect(str(kube.kubeconfig), None) for _ in range(2)]
        leases = [DeploymentLease(c, kube.namespace, name, "race", identity=f"racer-{i}")
                  for i, c in enumerate(clusters)]
        barrier = threading.Barrier(2)
        outcome: dict[int, str] = {}
        threads = [threading.Thread(target=_take, args=(leases[i], barrier, outcome, i)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcome.values()) == ["refused", "won"], outcome
        winner = next(i for i, o in outcome.items() if o == "won")
        status, data = kube.env.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{kube.namespace}/leases/stackpin-{name}")
        assert status == 200 and data["spec"]["holderIdentity"] == f"racer-{winner}"
        leases[winner].release()


def _take(lease: DeploymentLease, barrier: threading.Barrier, outcome: dict[int, str], i: int) -> None:
    barrier.wait()
    try:
        lease.acquire(0, lambda _: None)
        outcome[i] = "won"
    except LeaseHeld:
        outcome[i] = "refused"
