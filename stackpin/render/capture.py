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

CACHE_ROOT = "/cache"  # the engine's cache_root_env: vLLM writes flashinfer_autotune_cache/<fi>/<arch>/<hash>/ below it
# A multi-node data-parallel pool runs with the flags Dynamo's operator injects into the served pods
# (deploy/operator/internal/dynamo/backend_vllm.go injectDataParallelLaunchFlags, read at upstream commit
# 2a6da14c: --data-parallel-hybrid-lb, the local size, the node's start rank, the leader's address and RPC
# port 13445 on every node, no --headless), so the capture's engine configuration is the served one.
DP_RPC_PORT = "13445"


def _tune_lock(lock: StackLock) -> StackLock:
    """The same stack with autotune switched to tune and no cache: what a capture runs."""
    profile = {**lock.profile, "spec": {**lock.profile["spec"], "autotune": {"mode": "tune", "cache": None}}}
    return lock.replace(profile=profile, resolved=lock.resolved.replace(autotune_cache=None))


def dynamo_only_options(lock: StackLock) -> frozenset[str]:
    """Options of the pinned Dynamo worker that its engine does not have (the parsers, `--disaggregation-mode`, a
    pool's dynamoArgs): Dynamo's own, which the engine's server would refuse and its config never sees."""
    from stackpin.backends import engine_of
    from stackpin.catalog.flags import dynamo_catalog

    spec = lock.stack_profile.spec
    eng = engine_of(lock.stack_profile)
    dynamo, own = dynamo_catalog(spec.versions.dynamo, eng.dynamo_worker), eng.flag_catalog(spec.engine_version)
    known = frozenset(o for o in dynamo.options if own is None or not own.accepts(o)) if dynamo else frozenset()
    return known | {"--disaggregation-mode", "--dyn-tool-call-parser", "--dyn-reasoning-parser"}


def serve_args(lock: StackLock, args: tuple[str, ...], dynamo_only: frozenset[str]) -> list[str]:
    """A worker's argv as its engine's own server takes it (the backend's capture), Dynamo's own flags left out."""
    from stackpin.backends import engine_of

    capture = engine_of(lock.stack_profile).capture
    if capture is None:
        raise RenderError(f"{lock.metadata.name}: its engine has no autotune capture")
    try:
        return capture.serve_args(args, dynamo_only)
    except ValueError as exc:
        raise RenderError(str(exc)) from None


def _job(plan: StackPlan, comp: ComponentPlan, pvc: str, dynamo_only: frozenset[str], lock: StackLock
         ) -> list[dict[str, Any]]:
    from stackpin.backends import engine_of

    eng = engine_of(lock.stack_profile)
    assert eng.capture is not None and eng.cache_root_env is not None  # capture_objects: require_replayable
    shape = comp.shape
    assert shape is not None  # worker pools only
    name = f"{plan.name}-autotune-{comp.name}"
    labels = {**dict(plan.labels), "app.kubernetes.io/component": f"autotune-capture-{comp.name}"}
    meta = {"name": name, "namespace": plan.namespace, "labels": labels, "annotations": dict(plan.annotations)}
    env = {**dict(comp.env), eng.cache_root_env: CACHE_ROOT, "STACKPIN_POOL": comp.name,
           "STACKPIN_NODES": str(shape.nodes_per_replica), "STACKPIN_DP_RPC_PORT": DP_RPC_PORT}
    if eng.ready_timeout_env is not None:
        env.pop(eng.ready_timeout_env, None)
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
    built = assemble_pod(plan, comp, command=("bash", "-c", eng.capture.script, "stackpin-capture"),
                         args=serve_args(lock, comp.args, dynamo_only), env=tuple(sorted(env.items())),
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
            objects += _job(plan, comp, pvc, dynamo_only, lock)
    if plan.compute_domain:
        objects.append(compute_domain(plan))
    return objects
