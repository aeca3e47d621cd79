"""The probe and the import against a cluster, through stackpin's one cluster edge (stackpin.deploy.kube):
apply the probe's objects (server-side apply), read GPU Node objects and whether ComputeDomains are served."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stackpin.deploy.clusterfacts import NODES
from stackpin.deploy.kube import ApiResource, Cluster
from stackpin.site.facts import GPU_RESOURCE, NodeObject, node_object

CONFIG_MAPS = ApiResource("", "v1", "ConfigMap", "configmaps", True)
JOBS = ApiResource("batch", "v1", "Job", "jobs", True)
COMPUTE_DOMAIN = "ComputeDomain.resource.nvidia.com"


def apply_probe(cluster: Cluster, objects: Sequence[dict[str, Any]]) -> list[str]:
    """Server-side apply each object; `kind/name` of each."""
    done = []
    for obj in objects:
        res = CONFIG_MAPS if obj["kind"] == "ConfigMap" else JOBS
        cluster.apply(res, obj)
        done.append(f"{obj['kind'].lower()}/{obj['metadata']['name']}")
    return done


def gpu_nodes(cluster: Cluster, selector: str) -> list[NodeObject]:
    """The Node objects `selector` picks that offer GPUs (allocatable nvidia.com/gpu), by name."""
    nodes = [node_object(n) for n in cluster.list(NODES, None, selector)]
    return sorted((n for n in nodes if n.gpus), key=lambda n: n.name)


def compute_domains_served(cluster: Cluster) -> bool:
    """Whether the API server serves ComputeDomain (NVIDIA's DRA driver for GPUs installed its CRD)."""
    return cluster.resource_for(COMPUTE_DOMAIN) is not None


__all__ = ["GPU_RESOURCE", "apply_probe", "compute_domains_served", "gpu_nodes"]
