"""Preflight against a real kube-apiserver: a CRD that stores another version without a conversion
webhook is refused before anything is written (the case the upstream DynamoGraphDeployment CRD is in
without the Dynamo operator), and where the user may not read CRDs the server-side dry run still
catches the fields the server would drop. Plus the pure check of a CRD's conversion setup."""

from __future__ import annotations

import copy
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
    envtest.install_crd(stored_as(crd, "v1alpha1"))
    try:
        yield
    finally:
        envtest.install_crd(stored_as(crd, "v1beta1"))


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
