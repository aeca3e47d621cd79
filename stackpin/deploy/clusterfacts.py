"""What the pods need from the cluster's nodes and server, checked before apply writes: a node for every
worker pool's nodeSelector (a wrong GPU label leaves every pod Pending with no hint: GB300 and Vera Rubin
labels are catalog estimates), and image volumes where the pinned autotune cache arrives as one.

Each finding is a warning by default and an error with `--strict`; what cannot be read (Nodes are
cluster-scoped: the namespaced Role does not grant them) is a note.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

from stackpin.deploy.kube import ApiResource, Cluster, Forbidden

NODES = ApiResource("", "v1", "Node", "nodes", False)
ESTIMATES_ANNOTATION = "stackpin.dev/estimates"  # render/build.py writes it on the DynamoGraphDeployment
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


class ClusterFacts(msgspec.Struct, frozen=True):
    findings: tuple[str, ...]  # what would keep the pods from running as rendered
    notes: tuple[str, ...]  # what could not be checked, and why


def _pod_specs(dgd: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(component, pod spec) of a DynamoGraphDeployment's GPU components, v1beta1 or v1alpha1."""
    spec = dgd.get("spec") or {}
    for comp in spec.get("components") or []:
        if comp.get("type") != "frontend":
            yield comp["name"], (comp.get("podTemplate") or {}).get("spec") or {}
    for name, svc in (spec.get("services") or {}).items():
        if svc.get("componentType") != "frontend":
            yield name, svc.get("extraPodSpec") or {}


def _minor(version: str) -> tuple[int, int] | None:
    found = _VERSION.match(version)
    return (int(found[1]), int(found[2])) if found else None


def cluster_facts(cluster: Cluster, objects: tuple[dict[str, Any], ...]) -> ClusterFacts:
    from stackpin.catalog import load_catalog

    findings: list[str] = []
    notes: list[str] = []
    dgds = [o for o in objects if o.get("kind") == "DynamoGraphDeployment"]
    pods = [(name, spec) for dgd in dgds for name, spec in _pod_specs(dgd)]
    estimate = next((d["metadata"].get("annotations", {}).get(ESTIMATES_ANNOTATION) for d in dgds), None)
    matched: dict[str, int] = {}
    for name, spec in pods:
        selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items()))
        try:
            if selector not in matched:
                matched[selector] = len(cluster.list(NODES, None, selector))
        except Forbidden:
            notes.append("cannot list nodes (forbidden): whether a node matches each pool's nodeSelector was not "
                         "checked (docs/deploy.md#rbac: the optional ClusterRole grants it)")
            break
        if matched[selector] == 0:
            why = f" ({estimate})" if estimate else ""
            findings.append(f"{name}: no node matches its nodeSelector {selector}{why}: its pods would stay Pending")
    if any(v.get("image") for _, spec in pods for v in spec.get("volumes") or []):
        facts = load_catalog().engine.image_volume
        since, default_on = _minor(facts.since), _minor(facts.default_on)
        assert since is not None and default_on is not None  # catalog data, checked by tests/test_facts.py
        status, data = cluster.request("GET", "/version")
        version = str(data.get("gitVersion", "")) if isinstance(data, dict) and status < 300 else ""
        found = _minor(version)
        if found is None:
            notes.append("cannot read the server's version: image volume support was not checked")
        elif found < since:
            findings.append(f"the API server is {version}: image volumes (the pinned autotune cache) need Kubernetes "
                            f"{facts.since} or later with the {facts.feature_gate} feature gate")
        elif found < default_on:
            notes.append(f"the API server is {version}: image volumes (the pinned autotune cache) need the "
                         f"{facts.feature_gate} feature gate there (on by default from {facts.default_on}); with it "
                         "off the pods lose the cache volume. The nodes' container runtime must support them too")
    return ClusterFacts(tuple(findings), tuple(notes))
