"""Runtime attestation: the script each worker's init container runs, exactly as the rendered ConfigMap
ships it, run with this Python against site-packages, autotune caches and an nvidia-smi the tests build;
and the ConfigMap and init containers render puts around it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stackpin.lock.lockfile import StackLock
from stackpin.render.build import build_objects
from stackpin.render.output import render_stack
from stackpin.validate.manifests import validate_objects
from tests.lockkit import shipped_locks, with_profile_value

LOCKED = {"vllm": "0.31.0", "flashinfer-python": "0.7.0.post1", "ai-dynamo": "1.6.1", "nixl": "1.4.1"}
# Relative to the writable copy the engine reads (VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR): <config hash>/<file>.
CACHE_FILE = "c" * 64 + "/autotune_configs.json"
# What FlashInfer's _collect_metadata() reports in the pretend GB300 runtime image.
RUNTIME = {"flashinfer_version": "0.7.0.post1", "cuda_version": "13.0", "cublas_version": "13.0.2.14",
           "cudnn_version": "91400", "cudnn_frontend_version": "1.16.0",
           "cutlass_dsl_version": "nvidia-cutlass-dsl==4.7.1", "gpu": "NVIDIA GB300"}
MATCHING = json.dumps({"_metadata": RUNTIME, "k": ["Runner", 3]}).encode()
# Stands in for the runtime image's FlashInfer 0.7.0.post1, which needs a GPU to report its environment:
# _collect_metadata() gives RUNTIME, and _classify_metadata_mismatches applies the rule autotuner.py states
# (a saved value passes when it equals the runtime's or is "*"; a missing or indeterminate one is a soft
# mismatch, any other a hard one). tests/test_engine_check.py runs the script against the real FlashInfer.
FLASHINFER_STAND_IN = f"""
RUNTIME = {RUNTIME!r}


def _collect_metadata():
    return dict(RUNTIME)


def _classify_metadata_mismatches(saved_meta, current_meta):
    saved_meta = saved_meta if isinstance(saved_meta, dict) else {{}}
    hard, soft = {{}}, {{}}
    for key, current in current_meta.items():
        saved = saved_meta.get(key)
        if saved in (current, "*"):
            continue
        (soft if saved in (None, "unknown", "None") else hard)[key] = (saved, current)
    return hard, soft
"""


def _rendered(name: str = "gb300-tuned") -> dict[str, Any]:
    files = render_stack(shipped_locks()[name]).files
    return {n: yaml.safe_load(t) for n, t in files.items()}


def _config_map(objects: dict[str, Any]) -> dict[str, Any]:
    [cm] = [o for o in objects.values() if o["kind"] == "ConfigMap"]
    return cm


def _site(root: Path, versions: dict[str, str]) -> Path:
    """A site-packages holding only the .dist-info of each distribution, as pip leaves them."""
    site = root / "site-packages"
    for dist, version in versions.items():
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    if "flashinfer-python" in versions:
        tuner = site / "flashinfer" / "autotuner"
        tuner.mkdir(parents=True)
        (site / "flashinfer" / "__init__.py").write_text("")
        (tuner / "__init__.py").write_text("")
        (tuner / "autotuner.py").write_text(FLASHINFER_STAND_IN)
    return site


def _cache(root: Path, files: dict[str, bytes]) -> Path:
    cache = root / "flashinfer-autotune"
    for rel, data in files.items():
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache / rel).write_bytes(data)
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def _nvidia_smi(root: Path, lines: list[str], exit_code: int = 0) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    body = "".join(f"echo '{line}'\n" for line in lines)
    smi.write_text(f"#!/bin/sh\n[ \"$1 $2\" = '--query-gpu=name --format=csv,noheader' ] || exit 64\n{body}"
                   f"exit {exit_code}\n")
    smi.chmod(0o755)
    return bin_dir


class Pod:
    """The init container's view, built under tmp_path: the rendered script and expectation, with the
    cache directory pointed at a tree the test writes."""

    def __init__(self, tmp_path: Path, packages: dict[str, str] | None = None,
                 cache: dict[str, bytes] | None = None, gpus: list[str] | None = None, smi_exit: int = 0,
                 expected: dict[str, Any] | None = None) -> None:
        cm = _config_map(_rendered())
        self.script = tmp_path / "attest.py"
        self.script.write_text(cm["data"]["attest.py"])
        self.expected = json.loads(cm["data"]["expected.json"]) if expected is None else expected
        content = MATCHING
        files = {CACHE_FILE: content} if cache is None else cache
        cache_dir = _cache(tmp_path, files)
        if self.expected.get("autotuneCache"):
            self.expected["autotuneCache"]["dir"] = str(cache_dir)
            if self.expected["autotuneCache"]["files"] is not None:
                self.expected["autotuneCache"]["files"] = {CACHE_FILE: hashlib.sha256(content).hexdigest()}
        self.site = _site(tmp_path, LOCKED if packages is None else packages)
        self.path = str(_nvidia_smi(tmp_path, ["NVIDIA GB300"] * 4 if gpus is None else gpus, smi_exit)) \
            if gpus != [] else str(tmp_path / "no-bin")
        self.file = tmp_path / "expected.json"

    def run(self) -> subprocess.CompletedProcess[str]:
        self.file.write_text(json.dumps(self.expected))
        # -S: no site-packages but the one built here (PYTHONPATH), as in a runtime image.
        env = {"PYTHONPATH": str(self.site), "PATH": f"{self.path}:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        return subprocess.run([sys.executable, "-S", str(self.script), str(self.file)], capture_output=True,
                              text=True, env=env, timeout=60, check=False)


def _failed(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith("attestation failed for sha256:") and " (dsv41-flash): " in line
    return line


def test_a_matching_pod_prints_the_attested_digest(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    run = pod.run()
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    digest = hashlib.sha256(pod.file.read_bytes()).hexdigest()  # of the expectation the pod was given
    assert run.stdout == (f"attested sha256:{digest} (dsv41-flash): ai-dynamo 1.6.1, flashinfer-python "
                          "0.7.0.post1, nixl 1.4.1, vllm 0.31.0, autotune cache 1 file(s), FlashInfer accepts 1 "
                          "cache file(s), GPU 4x NVIDIA GB300\n")


@pytest.mark.parametrize(("content", "says"), [
    (json.dumps({"_metadata": {**RUNTIME, "cuda_version": "12.9"}}).encode(),
     f"FlashInfer ignores autotune cache file {CACHE_FILE}: cuda_version saved '12.9' vs '13.0' here"),
    (json.dumps({"_metadata": {k: v for k, v in RUNTIME.items() if k != "cutlass_dsl_version"}}).encode(),
     f"FlashInfer ignores autotune cache file {CACHE_FILE}: cutlass_dsl_version saved None vs "
     "'nvidia-cutlass-dsl==4.7.1' here"),
    (json.dumps({"_metadata": RUNTIME, "_records": []}).encode(),
     f"autotune cache file {CACHE_FILE}: FlashInfer's load_configs raises on it"),
], ids=["other-cuda", "no-cute-dsl-field", "records-list"])
def test_a_cache_flashinfer_would_ignore_or_raise_on_fails_the_pod(tmp_path: Path, content: bytes,
                                                                   says: str) -> None:
    pod = Pod(tmp_path, cache={CACHE_FILE: content})
    pod.expected["autotuneCache"]["files"] = {CACHE_FILE: hashlib.sha256(content).hexdigest()}
    assert _failed(pod.run()).endswith(says)


def test_a_read_only_cache_directory_fails_the_pod(tmp_path: Path) -> None:
    """vLLM writes into the directory it reads at every start: the seed's copy must be writable. Root writes
    through file modes, so the copy is made read-only the way an image volume is, by a read-only mount."""
    pod = Pod(tmp_path)
    pod.file.write_text(json.dumps(pod.expected))
    cache = pod.expected["autotuneCache"]["dir"]
    script = (f"mount --bind {cache} {cache} && mount -o remount,bind,ro {cache} && "
              f"exec env -i PYTHONPATH={pod.site} PATH={pod.path}:/usr/bin:/bin LC_ALL=C.UTF-8 "
              f"{sys.executable} -S {pod.script} {pod.file}")
    run = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                         check=False)
    if "unshare" in run.stderr and run.returncode != 1:
        pytest.skip(f"no mount namespace here for a read-only mount: {run.stderr.strip()}")
    assert run.returncode == 1 and f"autotune cache directory {cache} is not writable" in run.stderr


@pytest.mark.parametrize(("packages", "says"), [
    ({**LOCKED, "vllm": "0.33.0"}, "vllm 0.33.0 is installed, the lock pins 0.31.0"),
    ({**LOCKED, "flashinfer-python": "0.7.2.post1"}, "flashinfer-python 0.7.2.post1 is installed, the lock pins "
     "0.7.0.post1"),
    ({**LOCKED, "ai-dynamo": "1.6.0"}, "ai-dynamo 1.6.0 is installed, the lock pins 1.6.1"),
    ({k: v for k, v in LOCKED.items() if k != "nixl"}, "nixl is not installed (the lock pins 1.4.1)"),
], ids=["vllm", "flashinfer", "dynamo", "nixl-missing"])
def test_a_package_that_differs_fails_the_pod_naming_it(tmp_path: Path, packages: dict[str, str], says: str) -> None:
    line = _failed(Pod(tmp_path, packages=packages).run())
    assert line.endswith(f"(dsv41-flash): {says}")


@pytest.mark.parametrize(("cache", "says"), [
    ({CACHE_FILE: json.dumps({"_metadata": RUNTIME, "tampered": ["Runner", 1]}).encode()},
     f"autotune cache file {CACHE_FILE} differs from the locked "
     "digest"),
    ({}, f"autotune cache file {CACHE_FILE} is missing"),
    ({CACHE_FILE: MATCHING, "extra.json": MATCHING}, "autotune cache file extra.json is not in the lock"),
], ids=["differs", "missing", "unexpected"])
def test_a_cache_file_that_differs_fails_the_pod(tmp_path: Path, cache: dict[str, bytes], says: str) -> None:
    assert _failed(Pod(tmp_path, cache=cache).run()).endswith(says)


def test_an_unmounted_cache_fails_the_pod(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    pod.expected["autotuneCache"]["dir"] = str(tmp_path / "not-mounted")
    assert _failed(pod.run()).endswith(f"autotune cache {tmp_path / 'not-mounted'} is not mounted")


def test_a_lock_without_per_file_digests_attests_the_rest(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    pod.expected["autotuneCache"]["files"] = None
    run = pod.run()
    assert run.returncode == 0 and "autotune cache mounted (the lock records no per-file digests)" in run.stdout


@pytest.mark.parametrize(("gpus", "smi_exit", "says"), [
    (["NVIDIA GB300", "NVIDIA H200"], 0, "GPU NVIDIA H200 is not the rack's NVIDIA GB300"),
    (["Failed to initialize NVML: Driver/library version mismatch"], 9,
     "nvidia-smi failed (exit 9: Failed to initialize NVML: Driver/library version mismatch)"),
    ([""], 0, "nvidia-smi reports no GPU"),
], ids=["other-model", "smi-fails", "no-gpu"])
def test_a_gpu_that_is_not_the_racks_fails_the_pod(tmp_path: Path, gpus: list[str], smi_exit: int,
                                                   says: str) -> None:
    assert _failed(Pod(tmp_path, gpus=gpus, smi_exit=smi_exit).run()).endswith(says)


def test_without_nvidia_smi_the_gpu_goes_unchecked_and_says_so(tmp_path: Path) -> None:
    run = Pod(tmp_path, gpus=[]).run()
    assert run.returncode == 0 and run.stdout.rstrip().endswith("GPU not checked (no nvidia-smi)")


def test_every_difference_is_on_the_one_line(tmp_path: Path) -> None:
    line = _failed(Pod(tmp_path, packages={**LOCKED, "vllm": "0.33.0"}, cache={},
                       gpus=["NVIDIA H200"]).run())
    assert line.endswith(f"vllm 0.33.0 is installed, the lock pins 0.31.0; autotune cache file {CACHE_FILE} is "
                         "missing; GPU NVIDIA H200 is not the rack's NVIDIA GB300")


def test_an_unreadable_expectation_is_exit_2(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    pod.file.write_text("{")
    run = subprocess.run([sys.executable, "-S", str(pod.script), str(pod.file)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and run.stdout == ""


def test_the_script_imports_only_the_standard_library() -> None:
    import ast

    cm = _config_map(_rendered())
    tree = ast.parse(cm["data"]["attest.py"])
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules


# --- what render emits around it -----------------------------------------------------------------

def _workers(objects: dict[str, Any]) -> list[dict[str, Any]]:
    [dgd] = [o for o in objects.values() if o["kind"] == "DynamoGraphDeployment"]
    return [c for c in dgd["spec"]["components"] if c["name"] != "frontend"]


@pytest.mark.parametrize("name", sorted(shipped_locks()))
def test_every_worker_attests_with_the_engines_image_and_mounts(name: str) -> None:
    objects = _rendered(name)
    cm = _config_map(objects)
    lock = shipped_locks()[name]
    deployment = lock.stack_profile.metadata.deployment
    assert cm["immutable"] is True and cm["metadata"]["name"].startswith(f"{deployment}-attestation-")
    # What a passing worker prints, and the stack it belongs to, side by side on the ConfigMap.
    annotations = cm["metadata"]["annotations"]
    assert annotations["stackpin.dev/attestation-digest"] == "sha256:" + hashlib.sha256(
        cm["data"]["expected.json"].encode()).hexdigest()
    assert annotations["stackpin.dev/stack-digest"] == lock.stack_digest
    expected = json.loads(cm["data"]["expected.json"])
    assert expected["deployment"] == deployment and expected["packages"]["vllm"] == lock.resolved.engines.vllm
    cache = lock.resolved.autotune_cache
    assert (expected["autotuneCache"] is None) == (cache is None)
    for comp in _workers(objects):
        spec = comp["podTemplate"]["spec"]
        [engine] = spec["containers"]
        # The cache's seed copies it into the writable directory first; the check then reads that copy.
        *seed, init = spec["initContainers"]
        assert [c["name"] for c in seed] == (["autotune-seed"] if cache else [])
        assert init["image"] == engine["image"] and init["env"] == engine["env"]
        assert init["volumeMounts"][:-1] == engine.get("volumeMounts", [])
        assert init["volumeMounts"][-1]["mountPath"] == "/opt/stackpin/attestation"
        assert init["resources"]["requests"]["cpu"] == "100m"
        assert init["resources"]["limits"]["nvidia.com/gpu"] == engine["resources"]["limits"]["nvidia.com/gpu"]
        assert {"name": "stackpin-attestation", "configMap": {"name": cm["metadata"]["name"]}} in spec["volumes"]
    [dgd] = [o for o in objects.values() if o["kind"] == "DynamoGraphDeployment"]
    [frontend] = [c for c in dgd["spec"]["components"] if c["name"] == "frontend"]
    assert "initContainers" not in frontend["podTemplate"]["spec"]



def test_attestation_off_renders_no_configmap_and_no_init_container() -> None:
    off = with_profile_value(shipped_locks()["gb300-tuned"], ("spec", "attestation"), False)
    objects = {str(i): o for i, o in enumerate(build_objects(off))}
    assert [o["kind"] for o in objects.values()] == ["DynamoGraphDeployment"]
    # Only the autotune seed is left: the engine still needs its writable copy of the cache.
    assert all([c["name"] for c in w["podTemplate"]["spec"]["initContainers"]] == ["autotune-seed"]
               for w in _workers(objects))


def test_configmap_and_init_containers_pass_manifest_validation_v1alpha1_too(tmp_path: Path) -> None:
    from tests.lockkit import dynamo_142_variant, lock_files

    variant = dynamo_142_variant(tmp_path)
    [lock] = lock_files([variant], tmp_path / "lockfiles")
    objects = build_objects(lock)
    assert validate_objects((o["kind"], o) for o in objects) == []
    [dgd] = [o for o in objects if o["kind"] == "DynamoGraphDeployment"]
    decode = dgd["spec"]["services"]["decode"]["extraPodSpec"]
    assert decode["initContainers"][0]["image"] == decode["mainContainer"]["image"]


def test_the_configmap_is_the_same_bytes_on_every_render() -> None:
    lock = shipped_locks()["vera-rubin-disagg-wide-ep"]
    first = render_stack(lock).files
    assert render_stack(lock).files == first
    name = next(n for n in first if n.startswith("configmap-"))
    cm = yaml.safe_load(first[name])
    assert os.path.basename(name) == f"configmap-{cm['metadata']['name']}.yaml"


def _config_map_name(lock: StackLock) -> str:
    [cm] = [o for o in build_objects(lock) if o["kind"] == "ConfigMap"]
    name: str = cm["metadata"]["name"]
    return name


def test_the_configmap_changes_with_what_workers_attest_and_nothing_else() -> None:
    """Named by its content, not the stack digest: a change the workers do not see leaves their pod
    templates (which name the ConfigMap) alone; a pinned version they check renames it."""
    lock = shipped_locks()["gb300-tuned"]
    name = _config_map_name(lock)
    pool = ("spec", "placement", "pools", "worker")
    for unseen in (with_profile_value(lock, ("metadata", "labels"), {"team": "serving"}),
                   with_profile_value(lock, (*pool, "replicas"), 9),
                   with_profile_value(lock, (*pool, "maxNumSeqs"), 32)):
        assert unseen.stack_profile != lock.stack_profile and _config_map_name(unseen) == name
    assert _config_map_name(with_profile_value(lock, ("spec", "versions", "nixl"), "1.4.2")) != name
