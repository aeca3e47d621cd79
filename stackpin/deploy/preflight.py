"""Checks before anything is written: the cluster serves every kind at the rendered apiVersion, a
CRD that stores another version has a conversion webhook, and the namespace exists. Core v1 kinds
(`CORE`: the ConfigMap) are served by every API server and are not looked up.

Discovery, read for the first check, also tells which version the server stores each kind as
(storageVersionHash): where that is the version written, the CRD is not read at all; otherwise (or
where the server does not say) the CRD's versions and conversion strategy are read from the CRD.

Why the webhook matters: a CustomResourceDefinition with `conversion.strategy: None` converts between
versions by rewriting `apiVersion` only, so a v1beta1 DynamoGraphDeployment stored as v1alpha1 (the
upstream CRD's storage version) loses every field v1alpha1 lacks, `spec.components` included, and
the API server says nothing (docs/facts.md#dynamographdeployment-crd). The Dynamo operator installs
the webhook; without it stackpin refuses.
"""

from __future__ import annotations

from typing import Any

import msgspec

from stackpin.deploy.kube import CONFIGMAPS, CRDS, NAMESPACES, ApiResource, Cluster, ClusterError, Forbidden

# Core kinds a stack renders, which every Kubernetes API server serves at v1 (the API's stable core):
# not worth a discovery round trip (/api/v1) per command.
CORE: dict[tuple[str, str], ApiResource] = {(r.api_version, r.kind): r for r in (CONFIGMAPS,)}


class Preflight(msgspec.Struct, frozen=True):
    resources: dict[tuple[str, str], ApiResource]  # (apiVersion, kind) -> resource
    namespace_missing: bool
    notes: tuple[str, ...]  # what could not be checked, and why


def conversion_problem(crd: dict[str, Any], version: str) -> str | None:
    """Why objects of `version` would not survive storage under this CRD, or None."""
    name = crd["metadata"]["name"]
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in versions or not versions[version].get("served"):
        served = ", ".join(n for n, v in versions.items() if v.get("served"))
        return f"CRD {name} does not serve {version} (served: {served})"
    storage = next((n for n, v in versions.items() if v.get("storage")), None)
    strategy = (crd["spec"].get("conversion") or {}).get("strategy") or "None"
    if storage and storage != version and strategy != "Webhook":
        return (f"CRD {name} stores {storage} and has no conversion webhook (conversion strategy {strategy}): "
                f"{version} objects would be stored as {storage} and the fields {storage} lacks dropped silently; "
                "install the operator that provides the webhook (for DynamoGraphDeployment, the Dynamo operator)")
    return None


def preflight(cluster: Cluster, objects: tuple[dict[str, Any], ...], namespace: str) -> Preflight:
    resources: dict[tuple[str, str], ApiResource] = {}
    notes: list[str] = []
    problems: list[str] = []
    for api_version, kind in sorted({(o["apiVersion"], o["kind"]) for o in objects}):
        if (core := CORE.get((api_version, kind))) is not None:
            resources[(api_version, kind)] = core
            continue
        group, _, version = api_version.rpartition("/")
        served = cluster.resources(group, version)
        res = (served or {}).get(kind)
        if res is None:
            crd_hint = "its CRD is not installed" if group else "the server does not serve it"
            problems.append(f"the cluster does not serve {kind} {api_version}: {crd_hint}")
            continue
        resources[(api_version, kind)] = res
        if not group or "." not in group or group.endswith(".k8s.io"):
            continue  # built-in kinds convert losslessly
        if res.stored_as(version):
            continue  # discovery says it is stored as written: nothing to convert (and no CRD of ~1 MB to read)
        try:
            crd = cluster.get(CRDS, None, f"{res.plural}.{group}")
        except Forbidden:
            notes.append(f"cannot read CRD {res.plural}.{group} (forbidden): its storage version was not checked; "
                         "the server-side dry run still catches fields it would drop")
            continue
        if crd is not None and (problem := conversion_problem(crd, version)):
            problems.append(problem)
    if problems:
        raise ClusterError("\n".join(problems))
    if namespace in cluster.namespaces_seen:  # apply wrote its Lease there, diff read the record
        return Preflight(resources, False, tuple(notes))
    try:
        missing = cluster.get(NAMESPACES, None, namespace) is None
    except Forbidden:  # a user bound to one namespace may not read namespaces; the applies will tell
        missing = False
    return Preflight(resources, missing, tuple(notes))


def dropped_fields(sent: Any, returned: Any, path: str = "") -> list[str]:
    """Paths of `sent` that are missing from what the server returned (pruned or lost in conversion)."""
    if isinstance(sent, dict):
        if not isinstance(returned, dict):
            return [path or "."]
        out = []
        for key, value in sent.items():
            sub = f"{path}.{key}"
            out += [sub] if key not in returned else dropped_fields(value, returned[key], sub)
        return out
    if isinstance(sent, list):
        if not isinstance(returned, list) or len(returned) != len(sent):
            return [path]
        return [p for i, (a, b) in enumerate(zip(sent, returned, strict=True))
                for p in dropped_fields(a, b, f"{path}[{i}]")]
    return []

