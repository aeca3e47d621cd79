"""The RBAC rules docs/deploy.md lists, shipped as docs/examples/stackpin-rbac.yaml: applied to the real
kube-apiserver and bound to a user with no other rights (`ci-deployer`), they let apply, status and
rollback --apply run; without one of them the command stops with one Forbidden line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube import LOCKS, Kube, lockfile
from tests.test_deploy_live import GB300, history_copy

ROOT = Path(__file__).resolve().parent.parent
RBAC = ROOT / "docs" / "examples" / "stackpin-rbac.yaml"
USER = "ci-deployer"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


def documents() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(RBAC.read_text(encoding="utf-8")))


def test_the_docs_list_exactly_the_shipped_rules() -> None:
    docs = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", docs, flags=re.S)
    assert RBAC.read_text(encoding="utf-8") in blocks


def _subject() -> list[dict[str, str]]:
    return [{"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}]


@pytest.fixture
def bound(kube: Kube) -> Iterator[dict[str, Any]]:
    """The Role in the test's namespace and the ClusterRole, bound to ci-deployer; the cluster-wide
    binding is removed afterwards (the server is shared with the other tests)."""
    role, cluster_role = documents()
    ns = kube.namespace
    kube.env.ok("POST", f"{RBAC_API}/namespaces/{ns}/roles", role)
    kube.env.ok("POST", f"{RBAC_API}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "stackpin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "stackpin"},
        "subjects": _subject()})
    kube.env.ok("PATCH", f"{RBAC_API}/clusterroles/stackpin-crd-reader?fieldManager=test&force=true", cluster_role,
                content_type="application/apply-patch+yaml")
    binding = f"stackpin-crd-reader-{ns}"[:63]
    kube.env.ok("POST", f"{RBAC_API}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "stackpin-crd-reader"},
        "subjects": _subject()})
    try:
        yield role
    finally:
        kube.env.ok("DELETE", f"{RBAC_API}/clusterrolebindings/{binding}")


def without(kube: Kube, role: dict[str, Any], resource: str) -> None:
    """Replace the Role with one lacking the rule for `resource`."""
    current = kube.env.ok("GET", f"{RBAC_API}/namespaces/{kube.namespace}/roles/stackpin")
    current["rules"] = [r for r in role["rules"] if resource not in r["resources"]]
    assert len(current["rules"]) == len(role["rules"]) - 1
    kube.env.ok("PUT", f"{RBAC_API}/namespaces/{kube.namespace}/roles/stackpin", current)


def test_the_documented_role_is_enough_and_each_rule_is_needed(kube: Kube, bound: dict[str, Any],
                                                               tmp_path: Path) -> None:
    config = kube.env.token_kubeconfig(USER)
    history, deployments = history_copy(tmp_path)
    dirs = ("--history", str(history), "--deployments", str(deployments))

    applied = kube.stackpin("apply", GB300, "--history", str(history), kubeconfig=config)
    assert applied.exit_code == 0, applied.output
    assert applied.stderr == ""  # nothing preflight could not check
    status = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS), kubeconfig=config)
    assert status.exit_code == 0, status.output
    assert f"by {USER}" in status.stdout
    rolled = kube.stackpin("rollback", GB300, "--to", "1", "--apply", *dirs, kubeconfig=config)
    assert rolled.exit_code == 0, rolled.output
    assert "revision 4" in rolled.stdout
    changed = kube.stackpin("apply", lockfile("gb300-tuned"), "--allow-recreate", "--dry-run", kubeconfig=config)
    assert changed.exit_code == 0, changed.output

    without(kube, bound, "leases")
    refused = kube.stackpin("apply", GB300, "--history", str(history), kubeconfig=config)
    assert refused.exit_code == 2
    [line] = refused.stderr.splitlines()
    assert line.startswith("error: lease.coordination.k8s.io/stackpin-dsv41-flash: ") and \
        f'User "{USER}" cannot create resource "leases" in API group "coordination.k8s.io"' in line, line

    without(kube, bound, "dynamographdeployments")
    unseen = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS), kubeconfig=config)
    assert unseen.exit_code == 2
    [line] = unseen.stderr.splitlines()
    assert f'User "{USER}" cannot list resource "dynamographdeployments" in API group "nvidia.com"' in line, line
