"""Runtime attestation: the ConfigMap and init container that make every worker check, before its
engine starts, that the pod runs the stack its lock pins (docs/render.md#runtime-attestation).

The check itself is `attest_runtime.py` beside this module: a stdlib-only script stackpin never imports,
shipped verbatim in the ConfigMap with the expectation rendered from the lock (`expected.json`). The init
container runs it with the runtime image's own Python and the engine container's volume mounts, so it
sees the distributions, the autotune cache and the GPUs the engine would. The ConfigMap is immutable
and named by the digest of what it holds (the script and the expectation), not by the stack digest: a
change the workers do not see (a label, the replica count, the service target) leaves their pod
templates alone, and a rollout never changes what an older revision's pods attest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from stackpin.backends import engine_of
from stackpin.catalog import Catalog
from stackpin.lock.lockfile import StackLock
from stackpin.render.plan import Attestation, ComponentPlan
from stackpin.render.pod import AUTOTUNE_WORK, GPU_RESOURCE

SCRIPT = "attest_runtime.py"
VOLUME = "stackpin-attestation"
MOUNT = "/opt/stackpin/attestation"
CONTAINER = "attest"
CACHE_DIR = AUTOTUNE_WORK  # the writable copy vLLM reads (VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR), not the image
# Python, hashing and nvidia-smi, and FlashInfer's metadata probe, which imports torch and initialises CUDA
# (about 1 GiB resident): a tenth of a core requested, a little memory, room to spare in the limit (GPUs: see
# init_container).
RESOURCES = {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}


def script_text() -> str:
    # The package's own directory, as catalog.search.bundled reads it: importlib.resources would import
    # tempfile, shutil and zipfile into every render.
    return Path(__file__).with_name(SCRIPT).read_text(encoding="utf-8")


def expectation(lock: StackLock, catalog: Catalog) -> dict[str, Any]:
    """What a worker of this stack must find: the lock's engine versions under their distribution names,
    the autotune cache's files and digests (None where the lock records no per-file digests: then only
    the image digest, which the runtime checks when it pulls the volume, stands for them), the GPU model."""
    profile = lock.stack_profile
    engines = profile.spec.versions  # what the lock's resolved.engines repeat
    names = catalog.versions.distributions
    cache = lock.resolved.autotune_cache
    files, tree = (cache.file_digests(), cache.tree()) if cache else (None, None)
    if files is not None and tree is not None:
        # The lock keys files by <fi>/<arch>/<hash>/<name>; the copy vLLM reads holds <hash>/<name>.
        files = {path.removeprefix(f"{tree}/"): digest for path, digest in files.items()}
    return {
        "deployment": profile.metadata.deployment,
        "packages": {engine_of(profile).distribution: profile.spec.engine_version,
                     names["flashinfer"]: engines.flashinfer, names["dynamo"]: engines.dynamo,
                     names["nixl"]: engines.nixl},
        "autotuneCache": None if cache is None else {"dir": CACHE_DIR, "image": cache.pinned,
                                                     "files": files},
        **gpu_expectation(lock, catalog),
    }


def gpu_expectation(lock: StackLock, catalog: Catalog) -> dict[str, Any]:
    """The GPU names a worker may see, and what a different one means. A name the site measured (the lock's
    site facts), or one the catalog does not mark as an estimate, must match: `gpu` alone, as locks have always
    rendered it. A catalog estimate fails no pod unless the site is strict: `gpuCheck: log` makes the script say
    the mismatch and pass (docs/site.md)."""
    platform = lock.stack_profile.spec.target.platform
    site = lock.resolved.site
    names = site.facts.gpu_names if site is not None else None
    if names is not None:
        return {"gpu": names[0]} if len(names) == 1 else {"gpu": sorted(names)}
    gpu = catalog.gpu_of(platform)
    if gpu.is_estimate("device_name") and not (site is not None and site.strict):
        return {"gpu": gpu.device_name, "gpuCheck": "log"}
    return {"gpu": gpu.device_name}


def attestation_for(lock: StackLock, catalog: Catalog) -> Attestation | None:
    """None when the profile turns attestation off (SP185 warns)."""
    if not lock.stack_profile.spec.attestation:
        return None
    expected = json.dumps(expectation(lock, catalog), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    digest = hashlib.sha256(expected.encode("utf-8")).hexdigest()
    # The name covers the script too: a stackpin that ships another check gets another ConfigMap.
    named = hashlib.sha256(script_text().encode("utf-8") + b"\0" + expected.encode("utf-8")).hexdigest()
    return Attestation(f"{lock.stack_profile.metadata.deployment}-attestation-{named[:12]}", expected,
                       f"sha256:{digest}")


DIGEST_ANNOTATION = "stackpin.dev/attestation-digest"  # the digest a passing worker prints


def config_map(attestation: Attestation, metadata: dict[str, Any]) -> dict[str, Any]:
    annotations = {**metadata.get("annotations", {}), DIGEST_ANNOTATION: attestation.digest}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {**metadata, "name": attestation.config_map, "annotations": annotations},
            "immutable": True, "data": {"attest.py": script_text(), "expected.json": attestation.expected}}


def volume(attestation: Attestation) -> dict[str, Any]:
    return {"name": VOLUME, "configMap": {"name": attestation.config_map}}


def init_container(image: str, engine: dict[str, Any], comp: ComponentPlan) -> dict[str, Any]:
    """The check, with the engine container's image and mounts. It holds the pod's GPUs too, so that
    nvidia-smi sees them: the kubelet hands an init container's devices on to the app containers, and a
    pod's request is the larger of the two, so this costs no GPU."""
    resources_: dict[str, Any] = {k: dict(v) for k, v in RESOURCES.items()}
    if comp.gpus_per_pod:
        for part in ("requests", "limits"):
            resources_[part][GPU_RESOURCE] = str(comp.gpus_per_pod)
    mounts = [*engine.get("volumeMounts", []), {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}]
    # The engine's env too: FlashInfer's metadata probe reads LD_LIBRARY_PATH and the CUDA settings it sees.
    env = {"env": engine["env"]} if engine.get("env") else {}
    return {"name": CONTAINER, "image": image, "command": ["python3", f"{MOUNT}/attest.py", f"{MOUNT}/expected.json"],
            **env, "volumeMounts": mounts, "resources": resources_}
