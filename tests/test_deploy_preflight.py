"""Preflight against a real kube-apiserver: a CRD that stores another version without a conversion
webhook is refused before anything is written (the case the upstream DynamoGraphDeployment CRD is in
without the Dynamo operator), and where the user may not read CRDs the server-side dry run still
catches the fields the server would drop. Plus the pure check of a CRD's conversion setup."""

from __future__ import annotations

import base64
import copy
import hashlib
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import yaml

from devkit.envtest import CRDS, DGD_CRD, Envtest, stored_as
from stackpin.deploy.preflight import conversion_problem, dropped_fields
from tests.kube import Kube, lockfile

DGD_SUBJECT = "dynamographdeployment.nvidia.com/dsv41-flash"


@cache
def _upstream_text() -> str:
    return (CRDS / "nvidia.com_dynamographdeployments.yaml").read_text(encoding="utf-8")


def upstream_dgd_crd() -> dict[str, Any]:
    """The bundled (upstream) DynamoGraphDeployment CRD, storing v1alpha1."""
    return yaml.load(_upstream_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.fixture
def upstream_storage(envtest: Envtest) -> Iterator[None]:
    """The DynamoGraphDeployment CRD as upstream ships it (storing v1alpha1, no webhook) for one test;
    the v1beta1-storing copy the other tests use is put back afterwards."""
    crd = upstream_dgd_crd()
    _install_stored_as(envtest, crd, "v1alpha1")
    try:
        yield
    finally:
        _install_stored_as(envtest, crd, "v1beta1")


def _install_stored_as(envtest: Envtest, crd: dict[str, Any], version: str) -> None:
    """Install the CRD storing `version`, then wait until discovery says so too (preflight reads the
    storage version there first; the API server updates discovery a moment after the CRD)."""
    envtest.install_crd(stored_as(crd, version))
    kind, group = crd["spec"]["names"]["kind"], crd["spec"]["group"]
    want = base64.b64encode(hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()[:8]).decode()
    deadline = time.monotonic() + 30
    while not all(r.get("storageVersionHash") == want for r in envtest.ok("GET", f"/apis/{group}/v1beta1")["resources"]
                  if r["kind"] == kind and "/" not in r["name"]):
        assert time.monotonic() < deadline, f"discovery did not show {kind} stored as {version} within 30s"
        time.sleep(0.05)


@pytest.mark.usefixtures("upstream_storage")
def test_a_crd_storing_another_version_without_a_webhook_is_refused_before_any_write(kube: Kube) -> None:
    result = kube.apply("gb300-tuned")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line == (f"error: CRD {DGD_CRD} stores v1alpha1 and has no conversion webhook (conversion strategy "
                    "None): v1beta1 objects would be stored as v1alpha1 and the fields v1alpha1 lacks dropped silently;"
                    " install the operator that provides the webhook (for DynamoGraphDeployment, the Dynamo operator)")
    assert kube.everything() == {}


@pytest.mark.usefixtures("upstream_storage")
def test_without_rights_to_read_crds_the_dry_run_still_catches_dropped_fields(kube: Kube) -> None:
    """`deployer` may do anything in the namespace but read no CRD: the storage version cannot be
    checked (a warning says so), and the dry run shows spec.components would be dropped."""
    ns = kube.namespace
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "all-here"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    kube.env.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", role)
    kube.env.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "deployer-all"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "all-here"},
        "subjects": [{"kind": "User", "name": "deployer", "apiGroup": "rbac.authorization.k8s.io"}]})
    result = kube.stackpin("apply", lockfile("gb300-tuned"), kubeconfig=kube.env.token_kubeconfig("deployer"))
    assert result.exit_code == 1
    warning, nodes, error = result.stderr.splitlines()
    assert warning.startswith(f"warning: cannot read CRD {DGD_CRD} (forbidden): its storage version was not checked")
    assert nodes.startswith("warning: cannot list nodes (forbidden)")  # Nodes are cluster-scoped too
    assert error == (f"error: {DGD_SUBJECT}: the server would drop .spec.components (a CRD without the version or "
                     "conversion webhook it needs?)")
    assert kube.everything() == {}


def test_conversion_check_of_a_crd() -> None:
    crd = upstream_dgd_crd()
    assert "stores v1alpha1 and has no conversion webhook" in str(conversion_problem(crd, "v1beta1"))
    assert conversion_problem(crd, "v1alpha1") is None  # stored as written
    assert conversion_problem(stored_as(crd, "v1beta1"), "v1beta1") is None
    webhook = copy.deepcopy(crd)
    webhook["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}}
    assert conversion_problem(webhook, "v1beta1") is None  # the operator converts
    assert conversion_problem(crd, "v2") == f"CRD {DGD_CRD} does not serve v2 (served: v1alpha1, v1beta1)"


@pytest.mark.parametrize(("sent", "returned", "dropped"), [
    ({"spec": {"a": 1, "b": {"c": 2}}}, {"spec": {"a": 1, "b": {"c": 2}, "extra": 3}}, []),
    ({"spec": {"components": [{"name": "x"}]}}, {"spec": {}}, [".spec.components"]),
    ({"spec": {"l": [{"a": 1, "b": 2}]}}, {"spec": {"l": [{"a": 1}]}}, [".spec.l[0].b"]),
    ({"spec": {"l": [1, 2]}}, {"spec": {"l": [1]}}, [".spec.l"]),
])
def test_dropped_fields(sent: dict[str, Any], returned: dict[str, Any], dropped: list[str]) -> None:
    assert dropped_fields(sent, returned) == dropped


def test_discovery_tells_the_storage_version_so_the_crd_is_not_read(envtest: Envtest) -> None:
    """The API server's storageVersionHash, as ApiResource.stored_as reads it, against the bundled
    CRDs (the DynamoGraphDeployment copy stores v1beta1; tests/kube.py)."""
    from stackpin.deploy.kube import connect

    cluster = connect(str(envtest.kubeconfig), None)
    dgd = (cluster.resources("nvidia.com", "v1beta1") or {})["DynamoGraphDeployment"]
    assert dgd.stored_as("v1beta1") is True and dgd.stored_as("v1alpha1") is False
    assert (cluster.resources("nvidia.com", "v1alpha1") or {})["DynamoGraphDeployment"].stored_as("v1alpha1") is False
    assert (cluster.resources("", "v1") or {})["ConfigMap"].stored_as("v1") is True
