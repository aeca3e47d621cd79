"""`stackpin bench job`: the replay client in N pods, as one Indexed Job next to the stack.

Kubernetes is the distributed engine: pod `i` (its completion index) runs `stackpin bench run` for the
agents whose number modulo N is `i`, with the lock and the trace from one ConfigMap, and writes its
result to a shared volume as `result-<i>.json`; `stackpin bench merge` combines them. The pods do not
coordinate: each measures the asked agent counts in order (no SLO search; merge scores the swept
counts), so give each count a `--duration` for the pods to stay in step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stackpin.bench.result import Slo
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock

CONFIGMAP_LIMIT = 1 << 20  # the API server refuses a ConfigMap over 1 MiB
INPUTS = "/stackpin/inputs"
RESULTS = "/stackpin/results"


def job_objects(lock: StackLock, lock_text: str, trace_text: str, *, endpoint: str, pods: int,
                agents: Sequence[int], image: str, slo: Slo | None = None, workers: int = 1,
                duration_s: float | None = None, sessions: int | None = None, delay_scale: float = 1.0,
                timeout_s: float = 300.0, model: str | None = None, results_claim: str | None = None,
                storage: str = "1Gi", namespace: str | None = None, cpu: str | None = None,
                metrics: Sequence[str] = ()) -> list[dict[str, Any]]:
    """ConfigMap (lock + trace), the results PVC (unless `results_claim` names one), the Indexed Job. `metrics`:
    the Prometheus pages each pod reads draft acceptance from (bench run's --metrics; `bench merge` keeps one
    pod's reading a point, as they overlap)."""
    profile = lock.stack_profile
    namespace = namespace or profile.metadata.namespace
    name = f"{lock.metadata.name}-bench"[:52].rstrip("-")
    size = len(lock_text.encode()) + len(trace_text.encode())
    if size > CONFIGMAP_LIMIT:
        raise StackpinError(f"the lock and the trace are {size} bytes; a ConfigMap holds at most {CONFIGMAP_LIMIT} "
                            "(give a shorter trace)")
    labels = {"app.kubernetes.io/name": "stackpin-bench", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/managed-by": "stackpin"}
    annotations = {"stackpin.dev/stack-digest": lock.stack_digest}
    meta = {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}
    claim = results_claim or f"{name}-results"
    args = ["bench", "run", "--endpoint", endpoint, "--trace", f"{INPUTS}/trace.jsonl",
            "--lock", f"{INPUTS}/stack.lock.yaml", "--agents", ",".join(map(str, agents)),
            "--workers", str(workers), "--delay-scale", f"{delay_scale:g}", "--request-timeout", f"{timeout_s:g}s",
            "--pods", str(pods), "--pod-index", "$(JOB_COMPLETION_INDEX)", "--cache-salt", "$(STACKPIN_RUN)",
            "--out", f"{RESULTS}/result-$(JOB_COMPLETION_INDEX).json"]
    args += ["--slo", f"tps={slo.tps:g},ttft={slo.ttft_s:g}s,percentile={slo.percentile}" if slo else "none"]
    if duration_s is not None:
        args += ["--duration", f"{duration_s:g}s"]
    if sessions is not None:
        args += ["--sessions", str(sessions)]
    if model:
        args += ["--model", model]
    for url in metrics:
        args += ["--metrics", url]
    requests = {"cpu": cpu or str(workers), "memory": "1Gi"}
    container = {
        "name": "bench", "image": image, "command": ["stackpin"], "args": args,
        "env": [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                # one salt for the pods of one Job run (they share the trace's shared blocks), another next run
                {"name": "STACKPIN_RUN", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}}],
        "resources": {"requests": requests, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "inputs", "mountPath": INPUTS, "readOnly": True},
                         {"name": "results", "mountPath": RESULTS}],
    }
    pod = {"restartPolicy": "Never", "containers": [container], "volumes": [
        {"name": "inputs", "configMap": {"name": f"{name}-inputs"}},
        {"name": "results", "persistentVolumeClaim": {"claimName": claim}}]}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": f"{name}-inputs"},
         "data": {"stack.lock.yaml": lock_text, "trace.jsonl": trace_text}}]
    if results_claim is None:
        objects.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {**meta, "name": claim},
                        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": storage}}}})
    objects.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {
        "completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 0,
        "template": {"metadata": {"labels": labels}, "spec": pod}}})
    return objects
