"""`stackpin site probe`: the objects that measure a platform's GPU nodes.

Per platform, a ConfigMap holding the stdlib-only probe script (probe_runtime.py) and an Indexed Job of one pod
per node (`completions` = the nodes to measure; a required pod anti-affinity on the hostname keeps two on one
node apart). Each pod selects the platform's nodes as a stack's workers do (the catalog's node labels and CPU
architecture, or the profile's spec.target.nodeLabels, or --selector when the catalog's label is only an
estimate and selects nothing), requests every GPU of the node so that nvidia-smi sees them all, and prints
one `stackpin-site-probe: {json}` line. The pods complete, so they hold no GPU afterwards.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from stackpin.catalog import Catalog, Platform

SCRIPT = Path(__file__).with_name("probe_runtime.py")
LABEL = "stackpin.dev/site-probe"  # on every probe object: `kubectl logs -l stackpin.dev/site-probe=PLATFORM`
MOUNT = "/opt/stackpin/site-probe"
ARCH_KEY = "kubernetes.io/arch"
# Long enough for an image pull onto a cold node; a probe that cannot schedule says so by staying Pending.
DEADLINE_S = 1800


def probe_objects(catalog: Catalog, platform_key: str, *, image: str, namespace: str, nodes: int | None = None,
                  selector: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The ConfigMap and Job that probe `nodes` nodes (default: the platform's node count) of a platform."""
    platform: Platform = catalog.bundled_hardware.platforms[platform_key]
    script = SCRIPT.read_text(encoding="utf-8")
    digest = hashlib.sha256(script.encode("utf-8")).hexdigest()[:10]
    name = f"stackpin-site-probe-{platform_key}"[:52]
    labels = {LABEL: platform_key, "app.kubernetes.io/managed-by": "stackpin"}
    count = nodes if nodes is not None else platform.nodes
    node_selector = {**(selector if selector is not None else platform.node_labels), ARCH_KEY: platform.cpu_arch}
    config_map: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": f"{name}-{digest}", "namespace": namespace, "labels": labels},
                  "data": {"probe.py": script}}
    pod_labels = {**labels, "job-name": name}
    container = {
        "name": "probe", "image": image, "command": ["python3", f"{MOUNT}/probe.py", platform_key],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": str(platform.gpus_per_node)},
                      "limits": {"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": str(platform.gpus_per_node)}},
        "volumeMounts": [{"name": "probe", "mountPath": MOUNT, "readOnly": True}],
    }
    spec: dict[str, Any] = {
        "nodeSelector": node_selector, "restartPolicy": "Never", "containers": [container],
        "volumes": [{"name": "probe", "configMap": {"name": config_map["metadata"]["name"]}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"job-name": name}}, "topologyKey": "kubernetes.io/hostname"}]}},
    }
    meta = {"name": name, "namespace": namespace, "labels": labels}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
           "spec": {"completions": count, "parallelism": count, "completionMode": "Indexed", "backoffLimit": 0,
                    "activeDeadlineSeconds": DEADLINE_S, "ttlSecondsAfterFinished": 86400,
                    "template": {"metadata": {"labels": pod_labels}, "spec": spec}}}
    return [config_map, job]
