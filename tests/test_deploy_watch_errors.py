"""A watch that the server ends with an ERROR event (issue 37: a 410 Expired made `wait_ready` raise
AttributeError). As kubectl's watch tools do: on 410 read again and watch from the new
resourceVersion within the same deadline; any other ERROR is one typed line. Against the real
kube-apiserver, behind a loopback front (devkit/kubefront.py) that answers the first watch of the
DynamoGraphDeployment itself with the event the server would send."""

from __future__ import annotations

import json
from collections.abc import Callable

from devkit.kubefront import Seen, front_of
from stackpin.deploy.kube import connect
from stackpin.deploy.wait import WatchFailed, wait_gone, wait_ready
from tests.kube import DGD, Kube, ready_status

EXPIRED = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": "too old resource version: 1 (4242)", "reason": "Expired",
                                       "code": 410}}
BROKEN = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": "etcd cluster is\nunavailable", "reason": "InternalError",
                                      "code": 500}}


def first_watch(answer: tuple[int, list[bytes]], then: Callable[[], None] = lambda: None
                ) -> Callable[[Seen], tuple[int, list[bytes]] | None]:
    """A hook answering the first watch of DynamoGraphDeployments with `answer` (after `then`), passing on
    everything else."""
    done: list[Seen] = []

    def hook(seen: Seen) -> tuple[int, list[bytes]] | None:
        if seen.watch and seen.path.endswith("/dynamographdeployments") and not done:
            done.append(seen)
            then()
            return answer
        return None
    return hook


def event(doc: dict) -> tuple[int, list[bytes]]:
    return 200, [json.dumps(doc).encode() + b"\n"]


def dgd_requests(seen: list[Seen]) -> list[str]:
    return [str(s) for s in seen if "dynamographdeployments" in s.path and s.method == "GET"]


def test_apply_wait_rewatches_after_a_410_expired_event(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    ready = lambda: kube.operator_status(ready_status({"frontend": 1, "worker": 18}))  # noqa: E731
    with front_of(kube.env, first_watch(event(EXPIRED), then=ready)) as front:
        result = kube.stackpin("apply", "lockfiles/gb300-tuned.lock.yaml", "--wait", "--timeout", "30",
                               kubeconfig=front.kubeconfig(kube.env.kubeconfig))
        seen = front.reset()
    assert result.exit_code == 0, result.stdout + result.stderr
    # read, watch (410), read again (ready now): done, within the one deadline
    path = f"GET /apis/nvidia.com/v1beta1/namespaces/{kube.namespace}/dynamographdeployments"
    assert dgd_requests(seen)[-3:] == [f"{path}/dsv41-flash", f"{path} (watch)", f"{path}/dsv41-flash"]


def test_wait_ready_rewatches_after_an_http_410(kube: Kube) -> None:
    """The server may also refuse the watch request itself with 410 Gone."""
    assert kube.apply("gb300-tuned").exit_code == 0
    ready = lambda: kube.operator_status(ready_status({"frontend": 1, "worker": 18}))  # noqa: E731
    gone = (410, [json.dumps(EXPIRED["object"]).encode()])
    with front_of(kube.env, first_watch(gone, then=ready)) as front:
        cluster = connect(str(front.kubeconfig(kube.env.kubeconfig)), None)
        res = cluster.resource_for("DynamoGraphDeployment.nvidia.com")
        assert res is not None
        state = wait_ready(cluster, res, kube.namespace, "dsv41-flash", 30)
    assert state.ready


def test_another_watch_error_is_one_typed_line(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    with front_of(kube.env, first_watch(event(BROKEN))) as front:
        result = kube.stackpin("apply", "lockfiles/gb300-tuned.lock.yaml", "--wait", "--timeout", "30",
                               kubeconfig=front.kubeconfig(kube.env.kubeconfig))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: the watch of dynamographdeployment.nvidia.com/dsv41-flash in namespace "
        f"{kube.namespace} ended with an error (500): InternalError: etcd cluster is unavailable")


def test_wait_gone_rewatches_after_a_410(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    path = kube.path(DGD, "dynamographdeployments", "dsv41-flash")
    kube.env.ok("PATCH", path, {"metadata": {"finalizers": ["example.com/hold"]}},
                content_type="application/merge-patch+json")
    kube.env.ok("DELETE", path)
    uid = (kube.dgd() or {})["metadata"]["uid"]
    release = lambda: kube.env.ok("PATCH", path, {"metadata": {"finalizers": None}},  # noqa: E731
                                  content_type="application/merge-patch+json")
    with front_of(kube.env, first_watch(event(EXPIRED), then=release)) as front:
        cluster = connect(str(front.kubeconfig(kube.env.kubeconfig)), None)
        res = cluster.resource_for("DynamoGraphDeployment.nvidia.com")
        assert res is not None
        wait_gone(cluster, res, kube.namespace, "dsv41-flash", uid, 30)
    assert kube.dgd() is None


def test_a_watch_error_fails_the_library_call_typed(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    with front_of(kube.env, first_watch(event(BROKEN))) as front:
        cluster = connect(str(front.kubeconfig(kube.env.kubeconfig)), None)
        res = cluster.resource_for("DynamoGraphDeployment.nvidia.com")
        assert res is not None
        try:
            wait_ready(cluster, res, kube.namespace, "dsv41-flash", 30)
        except WatchFailed as exc:
            assert "(500): InternalError" in exc.message
        else:
            raise AssertionError("no WatchFailed")
