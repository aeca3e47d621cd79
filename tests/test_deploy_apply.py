"""`stackpin apply` against a real kube-apiserver (tests/kube.py): first apply, no-op re-apply, a
restart-class change, recreate refused then allowed (in an order that never leaves a multi-node pool
without its ComputeDomain), prune, conflicts with another field manager, a user RBAC forbids, dry run,
the namespace, and waiting for readiness."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from stackpin.deploy.applyset import (
    GROUP_KINDS_ANNOTATION,
    ID_LABEL,
    NAMESPACES_ANNOTATION,
    PART_OF_LABEL,
    TOOLING,
    TOOLING_ANNOTATION,
    applyset_id,
)
from stackpin.lock.lockfile import read_lock
from tests.kube import LOCKS, Kube, attestation, garbage_collector, lockfile, ready_status

CD_SUBJECT = "computedomain.resource.nvidia.com/dsv41-flash-compute-domain"
DGD_SUBJECT = "dynamographdeployment.nvidia.com/dsv41-flash"


def managers(obj: dict) -> dict[str, str]:
    return {m["manager"]: m["operation"] for m in obj["metadata"]["managedFields"]}


def engines(lines: list[str]) -> list[str]:
    """Output lines of the engine objects, without the attestation ConfigMaps' (applied first, pruned last)."""
    return [line for line in lines if not line.startswith("configmap/")]


def record(kube: Kube) -> list[dict]:
    parent = kube.parent()
    assert parent is not None
    return json.loads(parent["data"]["revisions.json"])


def test_first_apply_creates_members_of_an_applyset_and_records_who_applied_what(kube: Kube) -> None:
    result = kube.apply("gb300-disagg-wide-ep")
    assert result.exit_code == 0, result.output
    cm = attestation("gb300-disagg-wide-ep")
    assert result.stdout.splitlines()[:3] == [f"{cm} created", f"{CD_SUBJECT} created", f"{DGD_SUBJECT} created"]
    parent = kube.parent()
    assert parent is not None
    set_id = applyset_id("stackpin-dsv41-flash", kube.namespace)
    assert parent["metadata"]["labels"][ID_LABEL] == set_id
    assert parent["metadata"]["annotations"] == {
        TOOLING_ANNOTATION: TOOLING, NAMESPACES_ANNOTATION: "",
        GROUP_KINDS_ANNOTATION: "ComputeDomain.resource.nvidia.com,ConfigMap,DynamoGraphDeployment.nvidia.com"}
    lock_digest = read_lock(Path(lockfile("gb300-disagg-wide-ep"))).stack_digest
    for obj in (kube.dgd(), kube.compute_domain()):
        assert obj is not None
        assert obj["metadata"]["labels"][PART_OF_LABEL] == set_id
        assert obj["metadata"]["annotations"]["stackpin.dev/stack-digest"] == lock_digest
        assert managers(obj) == {"stackpin": "Apply"}
    dgd = kube.dgd()
    assert dgd is not None and [c["name"] for c in dgd["spec"]["components"]] == ["frontend", "prefill", "decode"]
    [entry] = record(kube)
    assert entry["stack"] == "gb300-disagg-wide-ep" and entry["stackDigest"] == lock_digest
    assert entry["appliedBy"] == "admin" and entry["appliedAt"].endswith("Z") and "revision" not in entry
    assert entry["objects"] == [cm, CD_SUBJECT, DGD_SUBJECT]
    assert entry["lock"]["stackDigest"] == lock_digest


def test_re_apply_changes_nothing_not_even_a_resource_version(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    before = kube.everything()
    again = kube.apply("gb300-tuned", "-o", "json")
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)
    assert data["objects"] == [{"object": attestation("gb300-tuned"), "action": "unchanged"},
                               {"object": DGD_SUBJECT, "action": "unchanged"}]
    assert data["recorded"] is False
    assert kube.everything() == before
    assert len(record(kube)) == 1


def test_re_apply_puts_back_what_another_hand_removed(kube: Kube) -> None:
    """A re-apply leaves out only the writes the server's dry run shows change nothing: fields stackpin
    applied and someone else removed come back, on the member and on the parent."""
    assert kube.apply("gb300-tuned").exit_code == 0
    kube.kubectl("annotate", "dynamographdeployment/dsv41-flash", "stackpin.dev/stack-digest-")
    kube.kubectl("annotate", "configmap/stackpin-dsv41-flash", f"{NAMESPACES_ANNOTATION}-")
    again = kube.apply("gb300-tuned")
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[:2] == [f"{attestation('gb300-tuned')} unchanged", f"{DGD_SUBJECT} configured"]
    dgd, parent = kube.dgd(), kube.parent()
    assert dgd is not None and "stackpin.dev/stack-digest" in dgd["metadata"]["annotations"]
    assert parent is not None and parent["metadata"]["annotations"][NAMESPACES_ANNOTATION] == ""
    assert len(record(kube)) == 1


def test_a_restart_class_change_is_applied_in_place(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    uid = kube.dgd()["metadata"]["uid"]  # type: ignore[index]
    result = kube.apply("vera-rubin-tuned")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # Rubin's attestation expects another GPU: a new ConfigMap first, the GB300 one pruned after.
    assert lines[:2] == [f"{attestation('vera-rubin-tuned')} created", f"{DGD_SUBJECT} configured"]
    assert f"{attestation('gb300-tuned')} pruned" in lines
    dgd = kube.dgd()
    assert dgd is not None and dgd["metadata"]["uid"] == uid  # updated, not recreated
    selector = dgd["spec"]["components"][1]["podTemplate"]["spec"]["nodeSelector"]
    assert selector["nvidia.com/gpu.product"] == "NVIDIA-Rubin"
    assert [e["stack"] for e in record(kube)] == ["gb300-tuned", "vera-rubin-tuned"]


def test_a_recreate_class_change_is_refused_then_done_computedomain_first(kube: Kube) -> None:
    """gb300-launch -> gb300-disagg-wide-ep: decode goes single-node -> multi-node, which Dynamo cannot
    do in place. Refused (nothing changes), then with --allow-recreate: the old DynamoGraphDeployment is
    deleted (foreground) and gone before the new one is created, and the ComputeDomain both use (the launch
    stack is disaggregated across trays: it joins one too) is applied first and never deleted."""
    assert kube.apply("gb300-launch").exit_code == 0
    assert kube.compute_domain() is not None
    before = kube.everything()
    old_uid = kube.dgd()["metadata"]["uid"]  # type: ignore[index]
    refused = kube.apply("gb300-disagg-wide-ep")
    assert refused.exit_code == 1
    [line] = refused.stderr.splitlines()
    assert f"{DGD_SUBJECT} in namespace {kube.namespace} needs delete and recreate" in line
    assert "component decode single-node -> multi-node (4 nodes)" in line and "--allow-recreate" in line
    assert kube.everything() == before

    with garbage_collector(kube) as events:
        allowed = kube.apply("gb300-disagg-wide-ep", "--allow-recreate")
    assert allowed.exit_code == 0, allowed.output
    assert engines(allowed.stdout.splitlines())[:2] == [f"{CD_SUBJECT} configured", f"{DGD_SUBJECT} recreated"]
    dgd = kube.dgd()
    assert dgd is not None and dgd["metadata"]["uid"] != old_uid
    assert [(t, k) for _, t, k, _ in sorted(events) if t != "MODIFIED"] == [
        ("DELETED", "DynamoGraphDeployment"), ("ADDED", "DynamoGraphDeployment")]


def test_switching_to_colocated_recreates_and_prunes_the_computedomain_after_its_user(kube: Kube) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    refused = kube.apply("gb300-tuned")
    assert refused.exit_code == 1 and "components frontend, prefill, decode -> frontend, worker" in refused.stderr
    assert kube.compute_domain() is not None
    before = kube.everything()
    dry = kube.apply("gb300-tuned", "--allow-recreate", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert engines(dry.stdout.splitlines())[:2] == [f"{DGD_SUBJECT} recreated (server dry run)",
                                                    f"{CD_SUBJECT} pruned (server dry run)"]
    assert dry.stderr.splitlines() == [f"warning: {DGD_SUBJECT}: the new object cannot be dry-run while the old one "
                                       "exists; only its deletion was"]
    assert kube.everything() == before
    with garbage_collector(kube) as events:
        result = kube.apply("gb300-tuned", "--allow-recreate")
    assert result.exit_code == 0, result.output
    assert engines(result.stdout.splitlines())[:2] == [f"{DGD_SUBJECT} recreated", f"{CD_SUBJECT} pruned"]
    assert kube.compute_domain() is None
    assert [c["name"] for c in kube.dgd()["spec"]["components"]] == ["frontend", "worker"]  # type: ignore[index]
    # The old DynamoGraphDeployment is gone before its ComputeDomain is deleted.
    assert [(t, k) for _, t, k, _ in sorted(events) if t != "MODIFIED"] == [
        ("DELETED", "DynamoGraphDeployment"), ("ADDED", "DynamoGraphDeployment"), ("DELETED", "ComputeDomain")]
    parent = kube.parent()
    assert parent["metadata"]["annotations"][GROUP_KINDS_ANNOTATION] == (  # type: ignore[index]
        "ConfigMap,DynamoGraphDeployment.nvidia.com")


def test_a_conflict_names_the_other_manager_and_its_fields_and_only_force_takes_them(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    patch = '[{"op":"replace","path":"/spec/components/1/replicas","value":12}]'
    kube.kubectl("patch", "dgd", "dsv41-flash", "--type=json", "-p", patch, "--field-manager=sre-oncall")
    before = kube.everything()
    result = kube.apply("gb300-tuned")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line == (f"error: {DGD_SUBJECT}: conflict: 1 field(s) managed by 'sre-oncall': "
                    '.spec.components[name="worker"].replicas (hint: take them with --force-conflicts, or change '
                    "them back)")
    assert kube.everything() == before  # the dry run found it: nothing written, the parent included
    forced = kube.apply("gb300-tuned", "--force-conflicts")
    assert forced.exit_code == 0, forced.output
    dgd = kube.dgd()
    assert dgd is not None and dgd["spec"]["components"][1]["replicas"] == 18
    assert "sre-oncall" not in managers(dgd)


def test_a_user_rbac_forbids_gets_one_line_and_nothing_is_written(kube: Kube) -> None:
    """`deployer` may read DynamoGraphDeployments, ComputeDomains and ConfigMaps in the namespace, not write them."""
    ns = kube.namespace
    kube.env.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "read-only"},
        "rules": [{"apiGroups": ["nvidia.com", "resource.nvidia.com", ""],
                   "resources": ["dynamographdeployments", "computedomains", "configmaps"],
                   "verbs": ["get", "list", "watch"]}]})
    kube.env.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "deployer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-only"},
        "subjects": [{"kind": "User", "name": "deployer", "apiGroup": "rbac.authorization.k8s.io"}]})
    result = kube.stackpin("apply", lockfile("gb300-disagg-wide-ep"),
                           kubeconfig=kube.env.token_kubeconfig("deployer"))
    assert result.exit_code == 2
    # The first thing apply does is take the deployment's Lease (create it), which this Role does not allow.
    [line] = result.stderr.splitlines()
    assert line.startswith("error: lease.coordination.k8s.io/stackpin-dsv41-flash: ")
    assert 'User "deployer" cannot create resource "leases"' in line
    assert kube.everything() == {}
    # With the Lease allowed, the first write refused is the first object applied: one line after the
    # warning on what preflight could not check (deployer may not read Nodes; nor CRDs, but discovery
    # says both CRDs store the version written, so neither is read).
    kube.env.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "lease"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "create", "update", "delete"]}]})
    kube.env.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "deployer-lease"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
        "subjects": [{"kind": "User", "name": "deployer", "apiGroup": "rbac.authorization.k8s.io"}]})
    result = kube.stackpin("apply", lockfile("gb300-disagg-wide-ep"),
                           kubeconfig=kube.env.token_kubeconfig("deployer"))
    assert result.exit_code == 2
    *warnings, line = result.stderr.splitlines()
    assert [w.split(" (forbidden)")[0] for w in warnings] == ["warning: cannot list nodes"]
    assert line.startswith(f"error: {attestation('gb300-disagg-wide-ep')}: ")  # the first object applied
    assert 'User "deployer" cannot patch resource "configmaps"' in line
    assert kube.everything() == {}
    assert kube.env.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/stackpin-dsv41-flash")[0] \
        == 404  # released


def test_dry_run_asks_the_server_and_writes_nothing(kube: Kube) -> None:
    short = read_lock(Path(lockfile("gb300-disagg-wide-ep"))).short_digest
    result = kube.apply("gb300-disagg-wide-ep", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{attestation('gb300-disagg-wide-ep')} created (server dry run)", f"{CD_SUBJECT} created (server dry run)",
        f"{DGD_SUBJECT} created (server dry run)",
        f"dry run: gb300-disagg-wide-ep ({short}) would apply to {kube.namespace}/dsv41-flash; nothing changed"]
    assert kube.everything() == {}
    broken = kube.stackpin("apply", lockfile("gb300-tuned"), "--dry-run", "-n", "no-such-namespace", namespace=False)
    assert broken.exit_code == 2
    assert broken.stderr.splitlines() == ["error: namespace no-such-namespace does not exist (hint: create it, or pass "
                                          "--create-namespace)"]


def test_create_namespace(kube: Kube) -> None:
    target = f"{kube.namespace}-new"[:63]
    result = kube.stackpin("apply", lockfile("gb300-tuned"), "--create-namespace", "-n", target, namespace=False)
    assert result.exit_code == 0, result.output
    assert kube.env.request("GET", f"/apis/nvidia.com/v1beta1/namespaces/{target}/dynamographdeployments/dsv41-flash"
                            )[0] == 200


def test_wait_times_out_naming_what_is_not_ready_then_succeeds_once_the_operator_reports(kube: Kube) -> None:
    """No operator runs here: the test writes the status the way the Dynamo operator would."""
    started = time.monotonic()
    result = kube.apply("gb300-tuned", "--wait", "--timeout", "2")
    assert result.exit_code == 1
    assert 2 <= time.monotonic() - started < 30
    assert engines(result.stdout.splitlines())[0] == f"{DGD_SUBJECT} created"  # applied first, then waited
    [line] = result.stderr.splitlines()
    assert line == (f"error: timed out after 2s waiting for {DGD_SUBJECT} in namespace {kube.namespace}: not ready: "
                    "state not reported; frontend -/1 ready; worker -/18 ready")

    kube.operator_status(ready_status({"frontend": 1, "worker": 6}, state="pending", ready="False"))
    operator = threading.Timer(1.0, kube.operator_status, [ready_status({"frontend": 1, "worker": 18})])
    operator.start()
    try:
        waited = kube.apply("gb300-tuned", "--wait", "--timeout", "60", "-o", "json")
    finally:
        operator.join()
    assert waited.exit_code == 0, waited.output
    state = json.loads(waited.stdout)["readiness"]
    assert state["ready"] is True and state["components"] == [{"name": "frontend", "desired": 1, "ready": 1},
                                                               {"name": "worker", "desired": 18, "ready": 18}]


@pytest.mark.parametrize("stack", sorted(p.name.removesuffix(".lock.yaml") for p in LOCKS.glob("*.lock.yaml")))
def test_every_shipped_stack_is_accepted_and_re_applies_as_a_no_op(kube: Kube, stack: str) -> None:
    """Strict field validation on the real server's CRD schemas; then nothing changes on a re-apply."""
    first = kube.apply(stack)
    assert first.exit_code == 0, first.output
    before = kube.everything()
    again = kube.apply(stack)
    assert again.exit_code == 0, again.output
    assert all(line.endswith(" unchanged") for line in again.stdout.splitlines()[:-1])
    assert kube.everything() == before


def test_an_object_still_being_deleted_is_awaited_then_created_anew(kube: Kube) -> None:
    """Left terminating (by an interrupted recreate, or by someone): applying to it would be lost with it."""
    assert kube.apply("gb300-tuned").exit_code == 0
    path = kube.path("/apis/nvidia.com/v1beta1", "dynamographdeployments", "dsv41-flash")
    kube.env.ok("PATCH", path, {"metadata": {"finalizers": ["example.com/hold"]}},
                content_type="application/merge-patch+json")
    kube.env.ok("DELETE", path)
    old = kube.dgd()
    assert old is not None and old["metadata"].get("deletionTimestamp")
    release = threading.Timer(1.0, kube.env.ok, ["PATCH", path, {"metadata": {"finalizers": None}}],
                              {"content_type": "application/merge-patch+json"})
    release.start()
    try:
        result = kube.apply("gb300-tuned", "--timeout", "60")
    finally:
        release.join()
    assert result.exit_code == 0, result.output
    assert engines(result.stdout.splitlines())[0] == f"{DGD_SUBJECT} created"
    new = kube.dgd()
    assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]
    assert not new["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("stack", sorted(p.name.removesuffix(".lock.yaml") for p in LOCKS.glob("*.lock.yaml")))
def test_every_shipped_stack_is_accepted_by_the_real_api_server(kube: Kube, stack: str) -> None:
    """Each shipped stack, GB200 and B200 included, as a server-side dry run of every write (strict field
    validation against the bundled CRDs): the server accepts all of it and nothing is written."""
    result = kube.apply(stack, "--dry-run", "--strict")
    assert result.exit_code == 0, result.output
    assert "no node matches" not in result.stderr  # the session's stand-in nodes carry each platform's labels
    assert kube.everything() == {}
