"""Round trips per cluster command (issue 37): a cluster command waits on the API server, so it sends
no more requests than its work needs. Counted by a loopback front (devkit/kubefront.py) in front of the
real kube-apiserver; bench/bench_requests.py prints the same counts beside kubectl's.

A bound here is a behaviour, not a timing: raising one needs a reason (a new check), said where it is
raised. Each test also checks that the requests that carry a check are still sent."""

from __future__ import annotations

from devkit.kubefront import Seen, front_of
from tests.kube import CD, Kube

# Lease take and release, 2 discovery (storage versions), nodes, /version (pool and image volume checks), the
# record, 3 member lists (prune); no dry run: the live objects' managedFields show their apply would change nothing
# (stackpin/deploy/settled.py). Before issue 37: 15.
NO_CHANGE_APPLY = 10
STATUS = 7  # parent, /apis, 2 discovery, 3 member lists


def lines(seen: list[Seen]) -> list[str]:
    return [f"{s}{' dry-run' if s.query.get('dryRun') else ''}" for s in seen]


def test_a_no_change_apply_sends_only_what_its_checks_need(kube: Kube) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    with front_of(kube.env) as front:
        result = kube.stackpin("apply", "lockfiles/gb300-disagg-wide-ep.lock.yaml",
                               kubeconfig=front.kubeconfig(kube.env.kubeconfig))
        seen = front.reset()
    assert result.exit_code == 0, result.stderr
    sent = lines(seen)
    assert len(sent) <= NO_CHANGE_APPLY, "\n".join(sent)
    ns = f"/namespaces/{kube.namespace}"
    lease = f"/apis/coordination.k8s.io/v1{ns}/leases"
    assert sent[0] == f"POST {lease}" and sent[-1] == f"DELETE {lease}/stackpin-dsv41-flash"  # the Lease held
    assert f"GET /api/v1{ns}/configmaps/stackpin-dsv41-flash" in sent  # the ApplySet record read
    for members in (f"/api/v1{ns}/configmaps", f"/apis/nvidia.com/v1beta1{ns}/dynamographdeployments",
                    f"/apis/resource.nvidia.com/v1beta1{ns}/computedomains"):  # every kind listed, for prune
        assert f"GET {members}" in sent
    assert not [s for s in sent if s.split()[0] in ("PATCH", "PUT", "POST", "DELETE") and "/leases" not in s]


def test_a_field_changed_by_another_manager_is_dry_run_then_written_back(kube: Kube) -> None:
    """The dry run is left out only where nothing would change: a value another manager changed is
    checked by a dry run (conflicts, schema, dropped fields) and written back, as before."""
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    cd = kube.path(CD, "computedomains", "dsv41-flash-compute-domain")
    before = (kube.compute_domain() or {})["metadata"]["labels"]["app.kubernetes.io/part-of"]
    kube.env.ok("PATCH", f"{cd}?fieldManager=someone", {"metadata": {"labels": {"app.kubernetes.io/part-of": "x"}}},
                content_type="application/merge-patch+json")
    with front_of(kube.env) as front:
        result = kube.stackpin("apply", "lockfiles/gb300-disagg-wide-ep.lock.yaml", "--force-conflicts",
                               kubeconfig=front.kubeconfig(kube.env.kubeconfig))
        sent = lines(front.reset())
    assert result.exit_code == 0, result.stderr
    assert [s for s in sent if s.startswith("PATCH ")] == [f"PATCH {cd} dry-run", f"PATCH {cd}"]
    assert (kube.compute_domain() or {})["metadata"]["labels"]["app.kubernetes.io/part-of"] == before != "x"


def test_status_reads_discovery_once_per_group(kube: Kube) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    with front_of(kube.env) as front:
        result = kube.stackpin("status", "dsv41-flash", kubeconfig=front.kubeconfig(kube.env.kubeconfig))
        seen = front.reset()
    assert result.exit_code == 0, result.stderr
    sent = lines(seen)
    assert len(sent) <= STATUS, "\n".join(sent)
    assert sum(s.startswith("GET /apis/nvidia.com/v1beta1/namespaces/") or
               s.startswith("GET /apis/resource.nvidia.com/v1beta1/namespaces/") or
               s == f"GET /api/v1/namespaces/{kube.namespace}/configmaps" for s in sent) == 3
