"""One pod-spec assembly for every GPU pod stackpin writes: the serving pods of both
DynamoGraphDeployment versions (build.py) and the capture Job pods (capture.py).

A capture must land on the same nodes, with the same claims and volumes, as the stack it tunes for;
assembling both from one place keeps the two from drifting apart. Callers add only what differs:
the command, probes, extra volumes, and how the pods of one replica find each other.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from stackpin.profile.engine_args import scalar_text
from stackpin.profile.podpatch import MAIN_CONTAINER
from stackpin.render.plan import ComponentPlan, StackPlan

CONTAINER = MAIN_CONTAINER  # the operator finds the engine container by this name
CLAIM = "compute-domain-channel"
CLIQUE_KEY = "nvidia.com/gpu.clique"  # GPU feature discovery: nodes of one NVLink clique share it
ARCH_KEY = "kubernetes.io/arch"
GPU_RESOURCE = "nvidia.com/gpu"
AUTOTUNE_VOLUME = "autotune-cache"  # the pinned cache image, read-only; only the seed container mounts it
AUTOTUNE_MOUNT = "/opt/stackpin/autotune"
# vLLM writes into its autotune directory on every start (mkdir of the config-hash directory, every rank
# rewrites the file, rank 0 saves it: docs/facts.md#autotune-cache-path), uncaught; an image volume is
# read-only, so the engine reads a writable copy that the seed init container fills from the image.
AUTOTUNE_WORK_VOLUME = "autotune-work"
AUTOTUNE_WORK = "/var/lib/stackpin/flashinfer-autotune"  # VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR
AUTOTUNE_SEED = "autotune-seed"
# Copying some MiB of JSON: a tenth of a core and a little memory.
SEED_RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
MODEL_VOLUME = "model-cache"


class Volume(msgspec.Struct, frozen=True):
    """A pod volume and where the main container mounts it."""

    name: str
    source: Mapping[str, Any]  # the volume's source, e.g. {"persistentVolumeClaim": {...}}
    mount_path: str
    read_only: bool = True

    def as_volume(self) -> dict[str, Any]:
        return {"name": self.name, **copy.deepcopy(dict(self.source))}

    def as_mount(self) -> dict[str, Any]:
        mount: dict[str, Any] = {"name": self.name, "mountPath": self.mount_path}
        if self.read_only:
            mount["readOnly"] = True
        return mount


class Pod(msgspec.Struct, frozen=True):
    """The pieces of one pod spec; each CRD version (or a Job) places them where it wants them."""

    fields: dict[str, Any]  # pod-level fields, without containers
    container: dict[str, Any]  # the main container, without resources
    resources: dict[str, Any] | None  # GPU limits/requests (+ claim); None without GPUs


def autotune_image_volume(comp: ComponentPlan) -> Volume:
    # Kubernetes 1.33+ ImageVolume: the cache arrives by digest, read-only, verified by the runtime.
    assert comp.autotune_image is not None
    return Volume(AUTOTUNE_VOLUME, {"image": {"reference": comp.autotune_image, "pullPolicy": "IfNotPresent"}},
                  AUTOTUNE_MOUNT)


def autotune_source(comp: ComponentPlan) -> str:
    """The image's directory that becomes VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR: the packed
    flashinfer_autotune_cache/<fi>/<arch> (stackpin/autotune/cache.py), whose <config hash>/ directories
    vLLM looks in."""
    assert comp.autotune_tree is not None
    return f"{AUTOTUNE_MOUNT}/flashinfer_autotune_cache/{comp.autotune_tree}"


def seed_container(image: str, comp: ComponentPlan) -> dict[str, Any]:
    """Copies the pinned cache into the engine's writable directory before anything else runs.
    `cp -R SRC/. DST` copies SRC's contents (every config-hash directory) into the existing DST."""
    work = Volume(AUTOTUNE_WORK_VOLUME, {"emptyDir": {}}, AUTOTUNE_WORK, read_only=False)
    return {"name": AUTOTUNE_SEED, "image": image,
            "command": ["cp", "-R", f"{autotune_source(comp)}/.", AUTOTUNE_WORK],
            "volumeMounts": [autotune_image_volume(comp).as_mount(), work.as_mount()],
            "resources": {k: dict(v) for k, v in SEED_RESOURCES.items()}}


def stack_volumes(comp: ComponentPlan) -> list[Volume]:
    """What the stack mounts into a worker: the writable copy of the pinned autotune cache and the model store."""
    out = []
    if comp.autotune_image:
        out.append(Volume(AUTOTUNE_WORK_VOLUME, {"emptyDir": {}}, AUTOTUNE_WORK, read_only=False))
    if comp.model_store:
        store = comp.model_store
        out.append(Volume(MODEL_VOLUME, {"persistentVolumeClaim": {"claimName": store.pvc, "readOnly": True}},
                          store.mount_path))
    return out


def gpu_resources(comp: ComponentPlan, resource: str = GPU_RESOURCE) -> dict[str, Any] | None:
    """GPU limits and requests of one pod (and its CPU and memory requests), with the ComputeDomain channel
    claim when it joins one."""
    if not comp.gpus_per_pod:
        return None
    gpus = {resource: str(comp.gpus_per_pod)}
    # CPU and memory requested, not limited: a memory limit would OOM-kill a worker whose pinned NIXL
    # buffers or weight loading briefly need more (Dynamo's V4 recipes request them the same way).
    out: dict[str, Any] = {"limits": dict(gpus), "requests": {**dict(comp.host_requests), **gpus}}
    if comp.compute_domain:
        out["claims"] = [{"name": CLAIM}]
    return out


def kubelet_literal(value: str) -> str:
    """`value` as the kubelet passes it on: it expands `$(NAME)` in a container's args and env values and
    reduces `$$` to `$`, so every `$` is doubled and what stackpin wrote arrives as written
    (`engineArgs` of `$(HF_TOKEN)` must never become the token)."""
    return value.replace("$", "$$")


def kubelet_value(written: str) -> str:
    """What a container receives for an arg or env value written by `kubelet_literal`."""
    return written.replace("$$", "$")


def assemble_pod(plan: StackPlan, comp: ComponentPlan, *, command: Sequence[str], args: Sequence[str],
                 env: Sequence[tuple[str, str]], extra_volumes: Sequence[Volume] = (),
                 same_clique: Mapping[str, Any] | None = None, gpu_resource: str = GPU_RESOURCE) -> Pod:
    """A pod of `comp`: `extra_volumes` come before the stack's own; `same_clique`, when given, is the
    affinity term (without its topology key) that selects the other pods of the same replica."""
    volumes = [*extra_volumes, *stack_volumes(comp)]
    # The command is stackpin's own text; args and env values carry the profile's, which the kubelet expands.
    container: dict[str, Any] = {"name": CONTAINER, "image": plan.image, "command": list(command),
                                 "args": [kubelet_literal(a) for a in args]}
    if env:
        container["env"] = [{"name": k, "value": kubelet_literal(v)} for k, v in env]
    if volumes:
        container["volumeMounts"] = [v.as_mount() for v in volumes]
    if comp.model_store and comp.model_store.token_secret:
        container["envFrom"] = [{"secretRef": {"name": comp.model_store.token_secret}}]
    pod: dict[str, Any] = {"nodeSelector": dict(comp.node_selector)}
    if plan.tolerate_arch:
        # Rack nodes (Grace / Vera) carry the arm64 taint, as in the upstream GB200 recipes.
        pod["tolerations"] = [{"key": ARCH_KEY, "operator": "Equal", "value": plan.cpu_arch, "effect": "NoSchedule"}]
    if comp.compute_domain:
        pod["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": f"{comp.compute_domain}-channel"}]
    if same_clique is not None:
        # Every pod of one replica in ONE NVLink clique, required: a parallel group split across
        # cliques fails at engine start (deep_gemm_mega_moe's symmetric memory cannot cross them).
        pod["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": CLIQUE_KEY, **copy.deepcopy(dict(same_clique))}]}}
    if comp.autotune_image:
        pod["initContainers"] = [seed_container(plan.image, comp)]
        volumes = [*volumes, autotune_image_volume(comp)]  # the seed's alone: the engine never mounts it
    if volumes:
        pod["volumes"] = [v.as_volume() for v in volumes]
    return Pod(pod, container, gpu_resources(comp, gpu_resource))


def quantities_as_text(template: dict[str, Any]) -> dict[str, Any]:
    """A pod template whose container resource amounts are all strings: a quantity written as a YAML number
    (`cpu: 16` in podOverrides) means the same as its text, and v1alpha1's resources take text only, so both
    CRD versions carry the same bytes."""
    spec = template.get("spec", {})
    for field in ("containers", "initContainers"):
        for container in spec.get(field, []):
            for side in ("requests", "limits"):
                amounts = container.get("resources", {}).get(side)
                if isinstance(amounts, dict):
                    container["resources"][side] = {
                        k: v if isinstance(v, str) else (scalar_text(v) or str(v)) for k, v in amounts.items()}
    return template
