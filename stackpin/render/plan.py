"""The typed plan of one stack: what runs where, with which argv, env, probes and topology.

build.py fills it from a lock and lays it out per CRD version; capture.py reuses it for its Jobs.
"""

from __future__ import annotations

from typing import Any

import msgspec

from stackpin.profile.model import ModelStore
from stackpin.profile.topology import PoolTopology


class Attestation(msgspec.Struct, frozen=True):
    """The stack's runtime check (stackpin.render.attestation makes it)."""

    config_map: str  # the ConfigMap's name
    expected: str  # expected.json
    digest: str  # sha256 of expected.json: what a passing worker prints as attested


class Probe(msgspec.Struct, frozen=True):
    path: str
    port: int
    period_s: int
    failure_threshold: int

    def as_dict(self) -> dict[str, Any]:
        return {"httpGet": {"path": self.path, "port": self.port}, "periodSeconds": self.period_s,
                "timeoutSeconds": self.period_s, "failureThreshold": self.failure_threshold}


class ComponentPlan(msgspec.Struct, frozen=True):
    name: str  # frontend | worker | prefill | decode: also the v1beta1 type
    replicas: int
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    startup: Probe | None
    readiness: Probe
    liveness: Probe
    shape: PoolTopology | None = None  # a worker pool's topology; None for the frontend
    compute_domain: str | None = None  # ComputeDomain name whose channel the pods claim
    clique_affinity: bool = False
    autotune_image: str | None = None
    autotune_tree: str | None = None  # <flashinfer version>/<arch list> inside the image (LockedArtifact.tree)
    model_store: ModelStore | None = None
    shared_memory: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    pod_labels: tuple[tuple[str, str], ...] = ()
    host_requests: tuple[tuple[str, str], ...] = ()  # CPU and memory a GPU pod requests (engine.yaml)
    # spec.placement.podOverrides of this component: a strategic merge patch of its pod template, applied last.
    pod_patch: dict[str, Any] | None = None

    @property
    def gpus_per_pod(self) -> int:
        return self.shape.gpus_per_pod if self.shape else 0

    @property
    def node_count(self) -> int:
        """Nodes one replica spans (a pod on each)."""
        return self.shape.nodes_per_replica if self.shape else 1


class StackPlan(msgspec.Struct, frozen=True):
    name: str
    deployment: str
    namespace: str
    crd_version: str  # v1alpha1 | v1beta1
    backend_framework: str  # the DGD's spec.backendFramework: the stack's engine
    image: str
    cpu_arch: str
    labels: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    components: tuple[ComponentPlan, ...]
    compute_domain: str | None
    tolerate_arch: bool
    attestation: Attestation | None = None  # None: the profile turns it off
