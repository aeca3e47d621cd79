"""`stackpin autotune capture-job`: the Kubernetes objects that run a locked stack once on its rack
with FlashInfer autotuning on, writing the cache to a volume, so it can be packed and pinned.

vLLM names a captured cache by a hash of its whole engine configuration, so the capture must run
exactly the flags the stack serves with: this module takes the stack's own render plan with the
autotune mode switched to `tune` and runs each worker pool's command under `vllm serve` (the same
engine arguments; only Dynamo's own flags are left out). A pool whose replica spans nodes becomes an
Indexed Job, one pod per node, with the data-parallel flags Dynamo's operator gives the served pods.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from stackpin.catalog import Catalog, load_catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.lock.lockfile import StackLock
from stackpin.render.build import RenderError, compute_domain, plan_stack
from stackpin.render.plan import ComponentPlan, StackPlan
from stackpin.render.pod import Volume, assemble_pod

CACHE_ROOT = "/cache"  # VLLM_CACHE_ROOT: vLLM writes flashinfer_autotune_cache/<fi>/<arch>/<hash>/ below it
# A multi-node data-parallel pool runs with the flags Dynamo's operator injects into the served pods
# (deploy/operator/internal/dynamo/backend_vllm.go injectDataParallelLaunchFlags, read at upstream commit
# 2a6da14c: --data-parallel-hybrid-lb, the local size, the node's start rank, the leader's address and RPC
# port 13445 on every node, no --headless), so the capture's engine configuration is the served one.
DP_RPC_PORT = "13445"
# `vllm serve` until the API answers /health (the cache is written during warm-up, before that),
# then stop. Every node of a multi-node replica serves its own ranks (hybrid load balancing, as served)
# and stops when rank 0 is done. Engine arguments arrive as "$@": nothing from the profile is spliced in.
CAPTURE_SCRIPT = r"""set -euo pipefail
extra=()
index="${JOB_COMPLETION_INDEX:-0}"
if [ "$STACKPIN_NODES" -gt 1 ]; then
  extra+=(--data-parallel-hybrid-lb --data-parallel-size-local "$STACKPIN_DP_LOCAL"
          --data-parallel-start-rank "$((index * STACKPIN_DP_LOCAL))"
          --data-parallel-address "$STACKPIN_LEADER" --data-parallel-rpc-port "$STACKPIN_DP_RPC_PORT")
fi
done_marker="$VLLM_CACHE_ROOT/.stackpin-captured-$STACKPIN_POOL"
vllm serve "$@" "${extra[@]}" &
pid=$!
if [ "$index" -eq 0 ]; then
  until python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/health")' 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit 1; }
    sleep 10
  done
  touch "$done_marker"
else
  until [ -e "$done_marker" ]; do kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit 1; }; sleep 10; done
fi
kill -TERM "$pid"
wait "$pid" || true
if [ "$index" -eq 0 ]; then
  # The environment FlashInfer records in each file's _metadata, from the same image on the same GPUs:
  # `stackpin autotune verify --runtime-metadata` compares every cache file with it.
  python3 -c 'import json, sys; from flashinfer.autotuner.autotuner import _collect_metadata as meta
json.dump(meta(), sys.stdout, sort_keys=True)' > "$VLLM_CACHE_ROOT/runtime-metadata-$STACKPIN_POOL.json"
fi
find "$VLLM_CACHE_ROOT/flashinfer_autotune_cache" -type f -name '*.json' | sort
"""


def _tune_lock(lock: StackLock) -> StackLock:
    """The same stack with autotune switched to tune and no cache: what a capture runs."""
    profile = {**lock.profile, "spec": {**lock.profile["spec"], "autotune": {"mode": "tune", "cache": None}}}
    return lock.replace(profile=profile, resolved=lock.resolved.replace(autotune_cache=None))


def dynamo_only_options(lock: StackLock) -> frozenset[str]:
    """Options of the pinned Dynamo worker that vLLM does not have (the parsers, `--disaggregation-mode`, a
    pool's dynamoArgs): Dynamo's own, which `vllm serve` would refuse and which vLLM's config never sees."""
    from stackpin.catalog.flags import dynamo_catalog, vllm_catalog

    spec = lock.stack_profile.spec
    dynamo, vllm = dynamo_catalog(spec.versions.dynamo, "worker_vllm"), vllm_catalog(spec.engine_version)
    known = frozenset(o for o in dynamo.options if vllm is None or not vllm.accepts(o)) if dynamo else frozenset()
    return known | {"--disaggregation-mode", "--dyn-tool-call-parser", "--dyn-reasoning-parser"}


def vllm_serve_args(args: tuple[str, ...], dynamo_only: frozenset[str] = frozenset({"--disaggregation-mode"})
                    ) -> list[str]:
    """A dynamo.vllm argv as `vllm serve` argv: the model goes first, Dynamo's own flags go (with their
    value: the next token when it is not an option)."""
    out, model, i = [], None, 0
    while i < len(args):
        if args[i] == "--model":
            model, i = args[i + 1], i + 2
        elif args[i] in dynamo_only:
            i += 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
        else:
            out.append(args[i])
            i += 1
    if model is None:
        raise RenderError("engine arguments carry no --model")
    return [model, *out]


def _job(plan: StackPlan, comp: ComponentPlan, pvc: str, dynamo_only: frozenset[str]) -> list[dict[str, Any]]:
    shape = comp.shape
    assert shape is not None  # worker pools only
    name = f"{plan.name}-autotune-{comp.name}"
    labels = {**dict(plan.labels), "app.kubernetes.io/component": f"autotune-capture-{comp.name}"}
    meta = {"name": name, "namespace": plan.namespace, "labels": labels, "annotations": dict(plan.annotations)}
    env = {**dict(comp.env), "VLLM_CACHE_ROOT": CACHE_ROOT, "STACKPIN_POOL": comp.name,
           "STACKPIN_NODES": str(shape.nodes_per_replica), "STACKPIN_DP_RPC_PORT": DP_RPC_PORT}
    env.pop("VLLM_ENGINE_READY_TIMEOUT_S", None)
    objects: list[dict[str, Any]] = []
    if shape.spans_nodes:
        if shape.tensor_parallel > shape.gpus_per_pod:
            raise RenderError(f"{plan.name}: pool {comp.name} splits a tensor-parallel group across nodes; "
                              "capture-job runs multi-node pools through data parallelism only")
        env["STACKPIN_DP_LOCAL"] = str(shape.dp_per_pod)
        env["STACKPIN_LEADER"] = f"{name}-0.{name}.{plan.namespace}.svc"
        objects.append({"apiVersion": "v1", "kind": "Service", "metadata": meta,
                        "spec": {"clusterIP": "None", "selector": {"job-name": name},
                                 "ports": [{"name": "dp-rpc", "port": int(DP_RPC_PORT)}]}})
    scratch = (Volume("cache", {"persistentVolumeClaim": {"claimName": pvc}}, CACHE_ROOT, read_only=False),
               Volume("shm", {"emptyDir": {"medium": "Memory", "sizeLimit": comp.shared_memory}}, "/dev/shm",
                      read_only=False))
    # One replica's pods inside one NVLink clique, as the serving stack requires.
    same_clique = {"labelSelector": {"matchLabels": {"job-name": name}}} if shape.spans_nodes else None
    built = assemble_pod(plan, comp, command=("bash", "-c", CAPTURE_SCRIPT, "stackpin-capture"),
                         args=vllm_serve_args(comp.args, dynamo_only), env=tuple(sorted(env.items())),
                         extra_volumes=scratch, same_clique=same_clique)
    container = {**built.container, "resources": built.resources}
    pod: dict[str, Any] = {"restartPolicy": "Never", **built.fields, "containers": [container]}
    spec: dict[str, Any] = {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": pod}}
    if shape.spans_nodes:
        pod["subdomain"] = name
        spec.update(completionMode="Indexed", completions=shape.nodes_per_replica,
                    parallelism=shape.nodes_per_replica)
    if comp.startup is not None:
        # The whole run is start-up: bound it by the stack's start-up budget.
        spec["activeDeadlineSeconds"] = comp.startup.period_s * comp.startup.failure_threshold
    objects.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
    return objects


def capture_objects(lock: StackLock, catalog: Catalog | None = None, storage: str = "20Gi") -> list[dict[str, Any]]:
    """PVC, Jobs (one per worker pool), and what multi-node pools need (headless Service,
    ComputeDomain), all from the stack's own render plan."""
    from stackpin.autotune.verify import require_replayable

    require_replayable(lock.stack_profile)  # the Jobs run `vllm serve`; a cache for another engine is never read
    with profile_catalogs(lock.stack_profile.spec.catalog_path):
        catalog = catalog or load_catalog()
    plan = plan_stack(_tune_lock(lock), catalog)
    if plan.compute_domain:
        # Its own ComputeDomain: deleting the capture objects must never take the serving stack's.
        domain = f"{plan.name}-autotune-compute-domain"
        plan = replace(plan, compute_domain=domain, components=tuple(
            replace(c, compute_domain=domain if c.compute_domain else None) for c in plan.components))
    pvc = f"{plan.name}-autotune-cache"
    objects: list[dict[str, Any]] = [{
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc, "namespace": plan.namespace, "labels": dict(plan.labels)},
        # Every pod of every pool writes its own files into the one tree that gets packed.
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": storage}}},
    }]
    dynamo_only = dynamo_only_options(lock)
    for comp in plan.components:
        if comp.name != "frontend":
            objects += _job(plan, comp, pvc, dynamo_only)
    if plan.compute_domain:
        objects.append(compute_domain(plan))
    return objects
