"""A lock -> the Kubernetes objects that run it: a DynamoGraphDeployment and, when a replica spans
nodes of an NVLink rack, a ComputeDomain.

Why a typed builder and not text templates: the resource is deeply nested, its shape differs
between DynamoGraphDeployment v1alpha1 (`spec.services` map, `extraPodSpec.mainContainer`) and
v1beta1 (`spec.components` list, `podTemplate`), and every value is user data that must never change
the structure. So the lock is first turned into a small typed plan (`StackPlan` in plan.py: what
runs where, with which argv, env and probes), then one function per CRD version lays the plan out
as plain dicts, each pod through pod.py. No string is ever spliced into YAML; output.py dumps the
dicts canonically.
"""

from __future__ import annotations

import math
from typing import Any, cast

from stackpin.backends import engine_of
from stackpin.catalog import Catalog, load_catalog
from stackpin.catalog.search import profile_catalogs
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.profile.k8s_names import STAND_IN_LABEL
from stackpin.profile.model import AutotuneMode, Placement, StackProfile
from stackpin.profile.podpatch import apply_patch
from stackpin.profile.serving import parser_choices
from stackpin.profile.sizing import capture_size_count
from stackpin.profile.topology import topology_of
from stackpin.render import args as argmod
from stackpin.render import attestation as attest
from stackpin.render.plan import ComponentPlan, Probe, StackPlan
from stackpin.render.pod import (
    ARCH_KEY,
    AUTOTUNE_WORK,
    CONTAINER,
    GPU_RESOURCE,
    assemble_pod,
    quantities_as_text,
)
from stackpin.rules import hit_text
from stackpin.validate.autotune import cache_shape_problems
from stackpin.validate.engineargs import flag_problems
from stackpin.validate.placement import speculative_mismatch_hit

LABEL_PREFIX = "stackpin.dev/"
ESTIMATES_ANNOTATION = f"{LABEL_PREFIX}estimates"  # cluster-facing facts the objects rest on that are estimates
DGD_GROUP = "nvidia.com"
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
SYSTEM_PORT = 9090  # Dynamo's worker system server (/health, /live); the upstream recipes probe it
# Set by Grove on the pods of a multi-node pool (ai-dynamo/grove operator/api/common/labels.go, commit fcc3b3bb,
# lines 39-41): the scaling group's name, shared by every replica of the pool, and one replica's index.
GROVE_SCALING_GROUP = "grove.io/podcliquescalinggroup"
GROVE_REPLICA_INDEX = "grove.io/podcliquescalinggroup-replica-index"
MNNVL_ENV = {"NCCL_CUMEM_ENABLE": "1", "NCCL_MNNVL_ENABLE": "1", "UCX_CUDA_IPC_ENABLE_MNNVL": "y"}


class RenderError(StackpinError):
    """The lock cannot become valid manifests (exit 1: the check ran and found a problem)."""

    exit_code = 1


# --- derived numbers -------------------------------------------------------------------------------

def startup_budget_s(profile: StackProfile, catalog: Catalog) -> int:
    """Seconds a worker may take to become healthy: model load plus CUDA graph capture (plus
    autotuning when the engine tunes at start), with a margin. Every rate is a catalog estimate:

        budget = (base_s + checkpoint_gib / load_gib_per_s + capture_sizes * capture_s_per_size
                  + autotune_s [mode tune]) * margin
    """
    est = catalog.engine.startup_estimate
    found = catalog.model_for(profile.spec.model.id)
    checkpoint_gib = found[1].checkpoint_gib if found else catalog.engine.startup_unknown_checkpoint_gib
    seconds = est.base_s + checkpoint_gib / est.load_gib_per_s
    # One budget for every worker: the pool that captures the most sizes sets it.
    pools = topology_of(profile, catalog).pools
    seconds += max((capture_size_count(profile, pool, catalog) for pool in pools), default=0) * est.capture_s_per_size
    if profile.spec.autotune.mode == AutotuneMode.tune:
        seconds += est.autotune_s
    return math.ceil(seconds * est.margin)


# --- plan ------------------------------------------------------------------------------------------

def plan_stack(lock: StackLock, catalog: Catalog | None = None) -> StackPlan:
    """The stack's render plan, its flags checked against the catalogs its profile names first
    (spec.catalogPath), as validation checked them."""
    with profile_catalogs(lock.stack_profile.spec.catalog_path, f"{lock.metadata.name} (lock)"):
        # The site facts the lock recorded, never a site.yaml found now: the lock alone decides the bytes.
        return _plan_stack(lock, (catalog or load_catalog()).for_lock(lock.resolved.site))


def _plan_stack(lock: StackLock, catalog: Catalog) -> StackPlan:
    profile = lock.stack_profile
    spec = profile.spec
    pin = catalog.versions.dynamo.get(spec.versions.dynamo)
    if pin is None:
        raise RenderError(f"Dynamo {spec.versions.dynamo} is not in the version catalog; cannot tell which "
                          "DynamoGraphDeployment version it serves", "add it to stackpin/catalog/versions.yaml")
    platform = catalog.platforms[spec.target.platform]
    image = lock.resolved.images["runtime"].pinned
    deployment = profile.metadata.deployment
    engine = engine_of(profile)
    engine_catalog = engine.flag_catalog(spec.engine_version)
    # Dynamo's worker accepts its own options and its engine's: check only when both catalogs exist.
    worker_catalogs = [c for c in (argmod.dynamo_catalog(spec.versions.dynamo, engine.dynamo_worker), engine_catalog)
                       if c]
    if len(worker_catalogs) < 2:
        worker_catalogs = []
    frontend_catalog = argmod.dynamo_catalog(spec.versions.dynamo, "frontend")
    problems: list[str] = list(engine.problems(profile))

    base_labels = {"app.kubernetes.io/name": deployment, "app.kubernetes.io/part-of": deployment}
    topology = topology_of(profile, catalog)
    for pool in topology.pools:
        # No pod spec can express this layout (SP124 / SP125 refuse such a profile before any lock).
        if (layout := pool.layout_problem()) is not None:
            raise RenderError(layout)
    # IMEX channels exist only where NVLink crosses nodes; elsewhere a multi-node replica talks over the
    # network and needs no ComputeDomain. On such a rack a disaggregated stack joins one too even when no
    # replica spans nodes: prefill and decode run on different trays and NIXL moves the KV cache between
    # them over MNNVL (Dynamo's disaggregated GB200 recipes claim the channel on every worker).
    crosses_trays = topology.spans_nodes or spec.placement.mode == Placement.disaggregated
    domain = f"{deployment}-compute-domain" if crosses_trays and platform.multinode_nvlink else None

    period = catalog.engine.startup_estimate.probe_period_s
    budget = startup_budget_s(profile, catalog)
    cache = lock.resolved.autotune_cache
    generated_env: dict[str, str] = {engine.ready_timeout_env: str(budget)} if engine.ready_timeout_env else {}
    if domain:
        generated_env.update(MNNVL_ENV)
    tree = cache.tree() if cache else None
    if cache:
        if tree is None:
            problems.append(f"autotune cache {cache.pinned} does not record its files below exactly one "
                            "<flashinfer version>/<arch list> directory, the one vLLM reads; pack it with "
                            "`stackpin autotune pack` from one capture")
        # vLLM reads <this>/<config hash>/autotune_configs*.json and writes there at start-up: the seed
        # init container's writable copy of the image's <fi>/<arch> directory (render/pod.py).
        if engine.autotune_dir_env:
            generated_env[engine.autotune_dir_env] = AUTOTUNE_WORK
    store = spec.model_store
    # Workers and the frontend (which loads the tokenizer) read the model from the volume.
    model_env = {"HF_HOME": store.mount_path, "HF_HUB_OFFLINE": "1" if store.offline else "0"} if store else {}
    generated_env.update(model_env)
    for where, env in (("spec.kernels.env", spec.kernels.env),
                       *((f"spec.placement.pools.{p.role}.env", p.spec.env) for p in topology.pools)):
        clash = sorted(set(env) & set(generated_env))
        if clash:
            problems.append(f"{where} sets {', '.join(clash)}, which render derives from the stack; "
                            "remove it from the profile")
    if engine_catalog is not None and engine_catalog.accepts("--compilation-config"):
        # SP230 refuses these; a lock made around validation must not render either.
        problems += sorted({p for pool in topology.pools
                            for p in engine_catalog.check_value("--compilation-config",
                                                                spec.cuda_graphs.compilation_config(pool.spec.compilation))})

    site_labels = spec.target.node_labels
    node_labels = site_labels if site_labels is not None else platform.node_labels
    node_selector = tuple(sorted({**node_labels, ARCH_KEY: platform.cpu_arch}.items()))
    # Per component (the frontend and each pool): keys are component names.
    shared_memory = cast(dict[str, str], spec.placement.shared_memory)
    pod_overrides = cast(dict[str, dict[str, Any]], spec.placement.pod_overrides)
    fe_flags = argmod.frontend_flags(profile)
    if frontend_catalog:
        problems += argmod.check_flags(fe_flags, [frontend_catalog])
    # SP232 refuses these; a lock made around validation must not render either.
    problems += [f"spec.placement.frontendArgs sets {option}, which render writes from the profile"
                 for option in sorted(set(spec.placement.frontend_args) & set(argmod.MODELLED_FRONTEND))]
    components = [ComponentPlan(
        name="frontend", replicas=1, command=argmod.FRONTEND_COMMAND, args=tuple(argmod.flatten(fe_flags)),
        env=tuple(sorted(model_env.items())), startup=None, model_store=store,
        readiness=Probe("/health", argmod.FRONTEND_HTTP_PORT, period, 3),
        liveness=Probe("/live", argmod.FRONTEND_HTTP_PORT, period, 6),
        node_selector=((ARCH_KEY, platform.cpu_arch),),
        pod_labels=tuple(sorted({**base_labels, "app.kubernetes.io/component": "frontend"}.items())),
        shared_memory=shared_memory.get("frontend"),
        pod_patch=pod_overrides.get("frontend"),
    )]
    parsers = parser_choices(profile, catalog)
    # SP227 refuses a parser the profile names that the pinned Dynamo lacks; a lock made around it must not render.
    problems += [f"spec.model.{c.field}: Dynamo {spec.versions.dynamo} has no {c.kind} parser {c.value!r}"
                 for c in parsers if not c.accepted and c.given]
    serving = tuple((c.option, c.rendered) for c in parsers if c.rendered is not None)
    host = catalog.engine.worker_host_per_gpu
    for pool in topology.pools:
        role = pool.role
        flags = engine.worker_flags(profile, role, pool.spec, model_revision=lock.resolved.model.revision,
                                    catalog=engine_catalog, serving=serving)
        # SP221-SP225 refuse these passed-through flags; a lock made around validation must not render either.
        problems += flag_problems(profile, role, pool.spec, engine_catalog)
        if worker_catalogs:
            problems += [f"{role}: {p}" for p in argmod.check_flags(flags, worker_catalogs)]
        components.append(ComponentPlan(
            name=role, replicas=pool.replicas, command=engine.worker_command, args=tuple(argmod.flatten(flags)),
            env=tuple(sorted({**spec.kernels.env, **pool.spec.env, **generated_env}.items())),
            startup=Probe("/health", SYSTEM_PORT, period, math.ceil(budget / period)),
            readiness=Probe("/health", SYSTEM_PORT, period, 3),
            liveness=Probe("/live", SYSTEM_PORT, period, 6),
            shape=pool,
            # Every worker joins the domain: NIXL moves KV between prefill and decode over MNNVL too.
            compute_domain=domain, clique_affinity=domain is not None and pool.spans_nodes,
            autotune_image=cache.pinned if cache else None, autotune_tree=tree, model_store=store,
            shared_memory=shared_memory.get(role, catalog.engine.worker_shared_memory),
            host_requests=(("cpu", str(host.cpu * pool.gpus_per_pod)),
                           ("memory", f"{host.memory_gib * pool.gpus_per_pod}Gi")),
            node_selector=node_selector,
            pod_labels=tuple(sorted({**base_labels, "app.kubernetes.io/component": role}.items())),
            pod_patch=pod_overrides.get(role),
        ))
    directories = cache.config_directories() if cache else None
    if directories is not None:
        # SP205 refuses such a cache at lock time; a lock made around it must not render either.
        problems += [why for _, why in cache_shape_problems(profile, topology, directories, catalog)]
    # The engine's start-up refusals (vLLM's SP105) and SP154: a lock made around validation must not render them.
    refusals = [*engine_of(profile).render_refusals(profile), ("SP154", speculative_mismatch_hit(profile, topology))]
    problems += [hit_text(code, hit) for code, hit in refusals if hit is not None]

    labels = {**base_labels, "app.kubernetes.io/managed-by": "stackpin", f"{LABEL_PREFIX}profile": profile.name,
              f"{LABEL_PREFIX}stack-digest": lock.short_digest}
    if lock.resolved.stand_in:
        labels[STAND_IN_LABEL] = "true"
    # No label check here: the profile model refuses bad or reserved labels when the lock is read.
    if problems:
        raise RenderError(f"{profile.name}: " + f"\n{profile.name}: ".join(problems))
    annotations = {
        f"{LABEL_PREFIX}stack-digest": lock.stack_digest,
        f"{LABEL_PREFIX}model": lock.resolved.model.id,
        f"{LABEL_PREFIX}model-revision": lock.resolved.model.revision,
        f"{LABEL_PREFIX}runtime-image": image,
    }
    if cache:
        annotations[f"{LABEL_PREFIX}autotune-cache"] = cache.pinned
    if stand_ins := lock.resolved.stand_ins():
        # The label selects such objects; this says which pins are not production digests.
        annotations[STAND_IN_LABEL] = (", ".join(which for which, _ in stand_ins)
                                       + ": stand-ins from a demo mirror, not production digests")
    if site_labels is None and platform.is_estimate("node_labels"):
        # A wrong label leaves every worker Pending with no hint: say on the object what it rests on.
        selected = ", ".join(f"{k}={v}" for k, v in sorted(platform.node_labels.items()))
        annotations[ESTIMATES_ANNOTATION] = (f"nodeSelector {selected}: the catalog's estimate for "
                                             f"{spec.target.platform} (set spec.target.nodeLabels to your nodes')")
    return StackPlan(
        name=profile.name, deployment=deployment, namespace=profile.metadata.namespace, crd_version=pin.crd,
        backend_framework=engine.backend_framework, image=image, cpu_arch=platform.cpu_arch,
        labels=tuple(sorted({**profile.metadata.labels, **labels}.items())),
        annotations=tuple(sorted(annotations.items())), components=tuple(components), compute_domain=domain,
        tolerate_arch=platform.cpu_arch == "arm64", attestation=attest.attestation_for(lock, catalog),
    )


# --- layout: pieces shared by both CRD versions ----------------------------------------------------

def _metadata(plan: StackPlan, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": plan.namespace, "labels": dict(plan.labels),
            "annotations": dict(plan.annotations)}


def _serving_pod(plan: StackPlan, comp: ComponentPlan) -> dict[str, Any]:
    """The pod template both versions run for a component (metadata and spec, the main container with its
    resources and probes), with the profile's podOverrides applied last. v1alpha1 then places its pieces
    (`_split_v1alpha1`); v1beta1 carries it as it is."""
    # matchLabelKeys scopes the clique term to one replica: its scaling group and its replica index. The
    # group alone (as the upstream GB200 recipes write it) holds every replica of the pool, which would put
    # all of them into one NVLink clique.
    same_clique = {"labelSelector": {"matchExpressions": [
        {"key": "app.kubernetes.io/managed-by", "operator": "In", "values": ["grove-operator"]}]},
        "matchLabelKeys": [GROVE_SCALING_GROUP, GROVE_REPLICA_INDEX]} if comp.clique_affinity else None
    pod = assemble_pod(plan, comp, command=comp.command, args=comp.args, env=comp.env, same_clique=same_clique)
    container = dict(pod.container)
    container.update(readinessProbe=comp.readiness.as_dict(), livenessProbe=comp.liveness.as_dict())
    if comp.startup:
        container["startupProbe"] = comp.startup.as_dict()
    fields = dict(pod.fields)
    if plan.attestation is not None and comp.shape is not None:  # every worker, before its engine starts
        # After the autotune seed: the check reads the copy the engine will read.
        fields["initContainers"] = [*fields.get("initContainers", []),
                                    attest.init_container(plan.image, container, comp)]
        fields["volumes"] = [*fields.get("volumes", []), attest.volume(plan.attestation)]
    if pod.resources:
        container["resources"] = pod.resources
    template = {"metadata": {"labels": dict(comp.pod_labels)}, "spec": {**fields, "containers": [container]}}
    if comp.pod_patch:
        template = apply_patch(template, comp.pod_patch)
    return quantities_as_text(template)


def _component_v1beta1(plan: StackPlan, comp: ComponentPlan) -> dict[str, Any]:
    out: dict[str, Any] = {"name": comp.name, "type": comp.name, "replicas": comp.replicas,
                           "podTemplate": _serving_pod(plan, comp)}
    if comp.node_count > 1:
        out["multinode"] = {"nodeCount": comp.node_count}
    if comp.shared_memory:
        out["sharedMemorySize"] = comp.shared_memory
    return out


def _dynamo_resources(resources: dict[str, Any]) -> dict[str, Any]:
    """A container's resources as v1alpha1's `resources` (Dynamo's Resources: cpu, memory, gpu and `custom` for
    every other name, per side; claims as they are). The operator builds the main container's resources from
    this field and overwrites what mainContainer.resources says (Dynamo 1.x graph.go: GetResourcesConfig after
    merging mainContainer), so everything goes here."""
    out: dict[str, Any] = {}
    for side in ("requests", "limits"):
        amounts = resources.get(side) or {}
        if not amounts:
            continue
        modelled = {"cpu": "cpu", "memory": "memory", GPU_RESOURCE: "gpu"}
        out[side] = {modelled[name]: value for name, value in amounts.items() if name in modelled}
        if custom := {name: value for name, value in amounts.items() if name not in modelled}:
            out[side]["custom"] = custom
    if resources.get("claims"):
        out["claims"] = resources["claims"]
    return out


def _service_v1alpha1(plan: StackPlan, comp: ComponentPlan) -> dict[str, Any]:
    template = _serving_pod(plan, comp)
    spec = dict(template["spec"])
    containers = spec.pop("containers")
    main = next(c for c in containers if c.get("name") == CONTAINER)
    if len(containers) > 1:  # v1alpha1's extraPodSpec holds the main container apart from the others
        spec["containers"] = [c for c in containers if c is not main]
    main = dict(main)
    resources = main.pop("resources", None)
    out: dict[str, Any] = {
        "componentType": "frontend" if comp.name == "frontend" else "worker",
        "replicas": comp.replicas,
        "extraPodMetadata": template.get("metadata", {}),
        "extraPodSpec": {**spec, "mainContainer": main},
    }
    if comp.name in ("prefill", "decode"):
        out["subComponentType"] = comp.name
    if resources:
        out["resources"] = _dynamo_resources(resources)
    if comp.node_count > 1:
        out["multinode"] = {"nodeCount": comp.node_count}
    if comp.shared_memory == "0":
        out["sharedMemory"] = {"disabled": True}
    elif comp.shared_memory:
        out["sharedMemory"] = {"size": comp.shared_memory}
    return out


def dynamo_graph_deployment(plan: StackPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {"backendFramework": plan.backend_framework}
    if plan.crd_version == "v1beta1":
        spec["components"] = [_component_v1beta1(plan, c) for c in plan.components]
    else:
        spec["services"] = {c.name: _service_v1alpha1(plan, c) for c in plan.components}
    return {"apiVersion": f"{DGD_GROUP}/{plan.crd_version}", "kind": "DynamoGraphDeployment",
            "metadata": _metadata(plan, plan.deployment), "spec": spec}


def compute_domain(plan: StackPlan) -> dict[str, Any]:
    assert plan.compute_domain is not None
    # numNodes is deprecated (DRA driver CRD): 0 lets IMEX daemons start as pods arrive.
    return {"apiVersion": COMPUTE_DOMAIN_API, "kind": "ComputeDomain",
            "metadata": _metadata(plan, plan.compute_domain),
            "spec": {"numNodes": 0,
                     "channel": {"resourceClaimTemplate": {"name": f"{plan.compute_domain}-channel"}}}}


def build_objects(lock: StackLock, catalog: Catalog | None = None) -> list[dict[str, Any]]:
    """Every Kubernetes object of one stack, as plain data."""
    plan = plan_stack(lock, catalog)
    objects = [dynamo_graph_deployment(plan)]
    if plan.compute_domain:
        objects.append(compute_domain(plan))
    if plan.attestation is not None:
        meta = _metadata(plan, plan.attestation.config_map)
        objects.append(attest.config_map(plan.attestation, meta))
    return objects
