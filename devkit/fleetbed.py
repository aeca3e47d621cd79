"""A fleet of racks on loopback for the rollout tests and `make demo-rollout`: one real kube-apiserver per
rack (devkit/envtest.py: etcd, token auth, RBAC, the bundled CRDs), a Node per shipped platform, and
stand-ins for what no rack here runs:

- `Operator` stands in for the Dynamo operator: it marks every DynamoGraphDeployment whose status is of an
  older generation ready (every component at its replicas), as the operator reports readiness;
- devkit.envtest's `GarbageCollector` stands in for kube-controller-manager's garbage collector (it
  finishes foreground deletions: a launch -> tuned change recreates the DynamoGraphDeployment).

A rack's serving endpoint is devkit/livesim.py's.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkit.envtest import Envtest, GarbageCollector, start_envtest

DGD = "/apis/nvidia.com/v1beta1"


def add_rack_nodes(env: Envtest) -> None:
    """One Node per shipped platform, labelled as the catalog says its GPU nodes are: a stand-in for the racks
    (no kubelet runs here; the API server stores Node objects like any other). apply's preflight looks for a
    node matching each pool's nodeSelector (stackpin/deploy/clusterfacts.py) and warns when there is none."""
    from stackpin.catalog import load_catalog

    for name, platform in sorted(load_catalog().platforms.items()):
        labels = {**platform.node_labels, "kubernetes.io/arch": platform.cpu_arch}
        env.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": f"{name}-node-0", "labels": labels}})


def ready_status(components: dict[str, int], state: str = "successful", ready: str = "True") -> dict[str, Any]:
    """A DynamoGraphDeployment status as the operator writes it (fields of the bundled CRD)."""
    return {"state": state, "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": ready, "reason": "AllComponentsReady" if ready == "True"
                            else "ComponentsNotReady", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "components": {name: {"componentKind": "Deployment", "replicas": count, "updatedReplicas": count,
                                  "readyReplicas": count} for name, count in components.items()}}


class Operator:
    """Stands in for the Dynamo operator on each server: a DynamoGraphDeployment whose status is of an
    older generation is marked ready (every component at its replicas), unless its namespace is held."""

    def __init__(self, envs: Sequence[Envtest]) -> None:
        self.envs = envs
        self.held: set[tuple[int, str]] = set()  # (server port, namespace) left not ready
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Operator:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for env in self.envs:
                if env.apiserver is None:
                    continue
                try:
                    self._mark(env)
                except (OSError, RuntimeError, http.client.HTTPException):  # a server a test stopped
                    pass
            time.sleep(0.2)

    def _mark(self, env: Envtest) -> None:
        for dgd in env.ok("GET", f"{DGD}/dynamographdeployments", timeout=5)["items"]:
            meta = dgd["metadata"]
            if (dgd.get("status") or {}).get("observedGeneration") == meta["generation"] or \
                    (env.port, meta["namespace"]) in self.held or meta.get("deletionTimestamp"):
                continue
            status = ready_status({c["name"]: c.get("replicas", 1) for c in dgd["spec"].get("components") or []})
            status["observedGeneration"] = meta["generation"]
            env.request("PATCH", f"{DGD}/namespaces/{meta['namespace']}/dynamographdeployments/{meta['name']}"
                        "/status?fieldManager=dynamo-operator", {"status": status},
                        content_type="application/merge-patch+json", timeout=5)


@dataclass
class FleetBed:
    """Racks on loopback: one API server each, and the operator and garbage collector stand-ins."""

    envs: tuple[Envtest, ...]
    operator: Operator
    collectors: dict[int, GarbageCollector]

    def restart(self, env: Envtest) -> None:
        """Start a stopped API server again, and its garbage collector afresh (its watch's resourceVersion is
        gone with the server's watch cache)."""
        env.start_apiserver()
        self.collectors[env.port].stop()
        self.collectors[env.port] = GarbageCollector(env).start()


@contextmanager
def fleet_bed(directories: Sequence[Path]) -> Iterator[FleetBed]:
    """One API server per directory (raises devkit.envtest.EnvtestUnavailable where none can start), each
    with the rack nodes and a garbage collector, and the operator stand-in over all of them."""
    with ExitStack() as stack:
        envs = [stack.enter_context(start_envtest(d)) for d in directories]
        collectors = {}
        for env in envs:
            add_rack_nodes(env)
            collectors[env.port] = GarbageCollector(env).start()

        def stop_collectors() -> None:  # the ones running at the end (FleetBed.restart replaces one)
            for collector in collectors.values():
                collector.stop()

        stack.callback(stop_collectors)
        operator = stack.enter_context(Operator(envs))
        yield FleetBed(tuple(envs), operator, collectors)
