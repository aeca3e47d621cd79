"""stackpin render: golden manifests, determinism, CRD version choice, multi-node, autotune cache,
--check drift, input errors, and hostile strings that must never change the YAML structure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from msgspec import ValidationError

from stackpin.cli.main import main as cli_main
from stackpin.cli.render import render
from stackpin.lock.lockfile import StackLock
from stackpin.profile.identifiers import model_id_problem
from stackpin.profile.k8s_names import label_problems
from stackpin.render.build import RenderError, build_objects
from stackpin.render.output import render_stack, render_stacks, write_stacks
from stackpin.render.pod import kubelet_value
from tests.lockkit import (
    PROFILES_DIR,
    ROOT,
    dynamo_142_variant,
    lock_files,
    lock_paths,
    shipped_locks,
    with_profile_value,
)

# The committed manifests are the golden files: the shipped stacks, locked from a fresh demo mirror
# (tests/lockkit.py), must render to exactly them.
GOLDEN = Path(__file__).resolve().parent.parent / "manifests"
UPDATE = os.environ.get("STACKPIN_UPDATE_GOLDEN") == "1"
SHIPPED_NAMES = sorted(shipped_locks())


def _objects(files: dict[str, str]) -> dict[str, Any]:
    return {name: yaml.safe_load(text) for name, text in files.items()}


def _dgd(files: dict[str, str]) -> dict[str, Any]:
    [obj] = [o for o in _objects(files).values() if o["kind"] == "DynamoGraphDeployment"]
    return obj


def _components(dgd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in dgd["spec"]["components"]}


# --- golden ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_golden(name: str) -> None:
    stack = render_stack(shipped_locks()[name])
    directory = GOLDEN / name
    if UPDATE:
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("*.yaml"):
            old.unlink()
        for file, text in stack.files.items():
            (directory / file).write_text(text, encoding="utf-8")
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.yaml"))}
    assert on_disk, f"no manifests for {name}: run make demo"
    assert stack.files == on_disk, "rendered output changed; review, then `make demo` (or STACKPIN_UPDATE_GOLDEN=1)"


def test_launch_is_v1beta1_disaggregated_and_tuned_colocated() -> None:
    launch = _dgd(render_stack(shipped_locks()["gb300-launch"]).files)
    assert launch["apiVersion"] == "nvidia.com/v1beta1" and "services" not in launch["spec"]
    comps = _components(launch)
    assert list(comps) == ["frontend", "prefill", "decode"]
    assert [comps[n]["type"] for n in comps] == ["frontend", "prefill", "decode"]
    args = {n: comps[n]["podTemplate"]["spec"]["containers"][0]["args"] for n in ("prefill", "decode")}
    spec = {n: a[a.index("--speculative-config") + 1] for n, a in args.items()}
    assert spec["prefill"] == spec["decode"]
    for n, a in args.items():
        assert a[a.index("--kv-transfer-config") + 1] == '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
        assert a[a.index("--disaggregation-mode") + 1] == n
        assert "--no-enable-flashinfer-autotune" in a  # launch runs autotune off
    tuned = _components(_dgd(render_stack(shipped_locks()["gb300-tuned"]).files))
    assert list(tuned) == ["frontend", "worker"]
    worker = tuned["worker"]["podTemplate"]["spec"]["containers"][0]
    assert worker["args"][worker["args"].index("--disaggregation-mode") + 1] == "agg"
    assert worker["command"] == ["python3", "-m", "dynamo.vllm"] and worker["name"] == "main"


def test_pinned_image_placement_and_labels() -> None:
    lock = shipped_locks()["gb300-tuned"]
    dgd = _dgd(render_stack(lock).files)
    meta = dgd["metadata"]
    assert meta["labels"]["app.kubernetes.io/part-of"] == "dsv41-flash"
    assert meta["labels"]["stackpin.dev/profile"] == "gb300-tuned"
    assert meta["labels"]["stackpin.dev/stack-digest"] == lock.stack_digest.removeprefix("sha256:")[:12]
    assert meta["labels"]["stackpin.dev/stand-in"] == "true"
    assert meta["annotations"]["stackpin.dev/stack-digest"] == lock.stack_digest
    assert meta["annotations"]["stackpin.dev/model-revision"] == lock.resolved.model.revision
    worker = _components(dgd)["worker"]
    pod = worker["podTemplate"]["spec"]
    main = pod["containers"][0]
    assert main["image"] == lock.resolved.images["runtime"].pinned and "@sha256:" in main["image"]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64", "nvidia.com/gpu.product": "NVIDIA-GB300"}
    assert pod["tolerations"] == [{"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64",
                                   "effect": "NoSchedule"}]
    assert worker["replicas"] == 18 and "multinode" not in worker and worker["sharedMemorySize"] == "200Gi"
    budget = main["startupProbe"]["periodSeconds"] * main["startupProbe"]["failureThreshold"]
    env = {e["name"]: e["value"] for e in main["env"]}
    assert budget >= int(env["VLLM_ENGINE_READY_TIMEOUT_S"]) > 475  # at least the checkpoint load
    assert {"readinessProbe", "livenessProbe"} <= set(main)


def test_multinode_decode_gets_compute_domain_claims_and_node_count() -> None:
    files = render_stack(shipped_locks()["gb300-disagg-wide-ep"]).files
    objs = _objects(files)
    [cd] = [o for o in objs.values() if o["kind"] == "ComputeDomain"]
    assert cd["apiVersion"] == "resource.nvidia.com/v1beta1"
    template = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert template == f"{cd['metadata']['name']}-channel"
    assert f"computedomain-{cd['metadata']['name']}.yaml" in files
    assert yaml.safe_load(files["kustomization.yaml"])["resources"] == sorted(
        n for n in files if n != "kustomization.yaml")
    comps = _components(_dgd(files))
    decode = comps["decode"]
    assert decode["multinode"] == {"nodeCount": 4}  # TP2 x DP8 = 16 GPUs over 4-GPU trays
    pod = decode["podTemplate"]["spec"]
    assert pod["resourceClaims"] == [{"name": "compute-domain-channel", "resourceClaimTemplateName": template}]
    main = pod["containers"][0]
    assert main["resources"]["claims"] == [{"name": "compute-domain-channel"}]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_CUMEM_ENABLE"] == "1"
    assert env["UCX_CUDA_IPC_ENABLE_MNNVL"] == "y"
    term = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "nvidia.com/gpu.clique"
    # Scoped to one replica (its Grove scaling group and replica index), not to every decode pod of the pool.
    assert term["matchLabelKeys"] == ["grove.io/podcliquescalinggroup",
                                      "grove.io/podcliquescalinggroup-replica-index"]
    assert "multinode" not in comps["prefill"]  # TP4 fits one tray
    assert "resourceClaims" not in comps["frontend"]["podTemplate"]["spec"]
    # Single-node stacks need no ComputeDomain.
    assert not any(o["kind"] == "ComputeDomain" for o in _objects(render_stack(shipped_locks()["gb300-tuned"]).files)
                   .values())


def test_autotune_cache_is_an_image_volume_copied_where_vllm_reads_and_writes() -> None:
    """vLLM 0.31.0 reads <VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR>/<config hash>/autotune_configs.json and writes
    there at every start: the engine gets a writable copy of the image's <fi>/<arch> directory, never the
    read-only image itself (tests/test_engine_check.py runs vLLM's own resolver over this layout)."""
    lock = shipped_locks()["vera-rubin-tuned"]
    cache = lock.resolved.autotune_cache
    assert cache is not None and cache.tree() == "0.7.0.post1/107a"
    pod = _components(_dgd(render_stack(lock).files))["worker"]["podTemplate"]["spec"]
    [volume] = [v for v in pod["volumes"] if "image" in v]  # beside the model store's PVC
    assert volume["image"]["reference"] == cache.pinned and "@sha256:" in cache.pinned
    [work] = [v for v in pod["volumes"] if "emptyDir" in v]
    seed, attest = pod["initContainers"]
    assert seed["name"] == "autotune-seed" and attest["name"] == "attest"
    [image_mount] = [m for m in seed["volumeMounts"] if m["name"] == volume["name"]]
    [work_mount] = [m for m in seed["volumeMounts"] if m["name"] == work["name"]]
    assert image_mount["readOnly"] is True and "readOnly" not in work_mount
    assert seed["command"] == ["cp", "-R", f"{image_mount['mountPath']}/flashinfer_autotune_cache/{cache.tree()}/.",
                               work_mount["mountPath"]]
    main = pod["containers"][0]
    assert [m["name"] for m in main["volumeMounts"] if m["name"] in (volume["name"], work["name"])] == [work["name"]]
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"] == work_mount["mountPath"]
    assert not any("autotune" in arg for arg in main["args"])


def test_a_cache_without_one_flashinfer_arch_directory_does_not_render() -> None:
    lock = shipped_locks()["gb300-tuned"]
    cache = lock.resolved.autotune_cache
    assert cache is not None
    files = json.loads(cache.annotations["files"])
    two = {**files, **{path.replace("/103a/", "/100a/"): digest for path, digest in files.items()}}
    odd = cache.replace(annotations={**cache.annotations, "files": json.dumps(two)})
    bad = lock.replace(resolved=lock.resolved.replace(autotune_cache=odd))
    with pytest.raises(RenderError, match="exactly one <flashinfer version>/<arch list> directory"):
        build_objects(bad)


def test_v1alpha1_for_dynamo_before_1_5(tmp_path: Path) -> None:
    variant = dynamo_142_variant(tmp_path)
    [lock] = lock_files([variant], tmp_path / "lockfiles")
    dgd = _dgd(render_stack(lock).files)  # render validates against the v1alpha1 schema
    assert dgd["apiVersion"] == "nvidia.com/v1alpha1" and "components" not in dgd["spec"]
    services = dgd["spec"]["services"]
    assert set(services) == {"frontend", "prefill", "decode"}
    decode = services["decode"]
    assert decode["componentType"] == "worker" and decode["subComponentType"] == "decode"
    assert decode["resources"]["limits"] == {"gpu": "4"}
    assert decode["extraPodSpec"]["mainContainer"]["image"].endswith(lock.resolved.images["runtime"].digest)
    assert services["frontend"]["componentType"] == "frontend"


# --- determinism -----------------------------------------------------------------------------------

def _tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_rendering_is_deterministic_across_runs_hash_seeds_and_cwd(tmp_path: Path) -> None:
    lockdir = tmp_path / "lockfiles"
    lock_paths(lockdir)
    first = render_stacks(list(shipped_locks().values()))
    assert first == render_stacks(list(shipped_locks().values()))
    outs = []
    for seed, cwd in (("1", tmp_path), ("4242", ROOT)):
        out = tmp_path / f"out-{seed}"
        code = ("import sys; from stackpin.cli.render import render; "
                "render.main(sys.argv[1:], prog_name='stackpin render')")
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", code, "--lockdir", str(lockdir), "--output-dir", str(out)],
                              cwd=cwd, env=env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        outs.append(_tree(out))
    assert outs[0] == outs[1]
    in_process = {f"{s.name}/{f}": t.encode() for s in first for f, t in s.files.items()}
    assert outs[0] == in_process


# --- CLI -------------------------------------------------------------------------------------------

@pytest.fixture()
def lockdir(tmp_path: Path) -> Path:
    d = tmp_path / "lockfiles"
    lock_paths(d)
    return d


def test_render_writes_stacks_that_validate(tmp_path: Path, lockdir: Path) -> None:
    out = tmp_path / "manifests"
    result = CliRunner().invoke(render, ["--lockdir", str(lockdir), "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == SHIPPED_NAMES
    assert (out / "gb300-tuned" / "dynamographdeployment-dsv41-flash.yaml").is_file()
    checked = CliRunner().invoke(cli_main, ["validate", "--manifests", str(out)])
    assert checked.exit_code == 0, checked.output
    # Rendering one lockfile by path touches only its directory.
    again = CliRunner().invoke(render, [str(lockdir / "gb300-tuned.lock.yaml"), "--output-dir", str(out)])
    assert again.exit_code == 0, again.output


def test_check_reports_modified_missing_and_extra_files(tmp_path: Path, lockdir: Path) -> None:
    out = tmp_path / "manifests"
    assert CliRunner().invoke(render, ["--lockdir", str(lockdir), "--output-dir", str(out)]).exit_code == 0
    clean = CliRunner().invoke(render, ["--check", "--lockdir", str(lockdir), "--output-dir", str(out)])
    assert clean.exit_code == 0, clean.output
    modified = out / "gb300-tuned" / "dynamographdeployment-dsv41-flash.yaml"
    modified.write_text(modified.read_text().replace("replicas: 18", "replicas: 17"))
    missing = out / "gb300-disagg-wide-ep" / "computedomain-dsv41-flash-compute-domain.yaml"
    missing.unlink()
    # Files stackpin rendered that no lock produces any more are extra; a user's own files are not.
    extra = out / "gb300-launch" / "computedomain-old.yaml"
    extra.write_text(modified.read_text())
    own = out / "gb300-launch" / "notes.yaml"
    own.write_text("kind: ConfigMap\n")
    stray_stack = out / "old-stack"
    stray_stack.mkdir()
    (stray_stack / "kustomization.yaml").write_text(modified.read_text())
    own_dir = out / "my-own"
    own_dir.mkdir()
    (own_dir / "cm.yaml").write_text("kind: ConfigMap\n")
    before = _tree(out)
    result = CliRunner().invoke(render, ["--check", "--lockdir", str(lockdir), "--output-dir", str(out)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()  # the drift is the result: stdout; the verdict goes to stderr
    assert "4 file(s) differ" in result.stderr
    assert f"drifted  {modified}" in lines
    assert f"missing  {missing}" in lines
    assert f"extra    {extra}" in lines
    assert f"extra    {stray_stack}" in lines
    assert not [line for line in lines if str(own) in line or str(own_dir) in line]
    assert _tree(out) == before  # --check writes nothing
    # A render puts back what it owns and removes what it rendered before; the user's files stay.
    assert CliRunner().invoke(render, ["--lockdir", str(lockdir), "--output-dir", str(out)]).exit_code == 0
    assert not extra.exists() and missing.exists() and own.exists()
    assert "replicas: 18" in modified.read_text()


def _profile_copy(tmp_path: Path) -> Path:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    path = profiles / "gb300-tuned.yaml"
    path.write_text((PROFILES_DIR / "gb300-tuned.yaml").read_text())
    return path


@pytest.mark.parametrize("state", ["missing", "stale"])
def test_profile_without_a_current_lock_is_refused(tmp_path: Path, state: str) -> None:
    profile = _profile_copy(tmp_path)
    lockdir = tmp_path / "lockfiles"
    if state == "stale":
        lock_paths(lockdir, [profile])
        profile.write_text(profile.read_text().replace("maxNumSeqs: 64", "maxNumSeqs: 32"))
    out = tmp_path / "manifests"
    result = CliRunner().invoke(render, [str(profile), "--lockdir", str(lockdir), "--output-dir", str(out)])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.output
    assert state in result.stderr or "no lockfile" in result.stderr
    assert "stackpin lock" in result.stderr
    assert not out.exists()
    if state == "stale":
        lock_paths(lockdir, [profile])  # relocked: renders
        ok = CliRunner().invoke(render, [str(profile), "--lockdir", str(lockdir), "--output-dir", str(out)])
        assert ok.exit_code == 0, ok.output


def _relabel(lock: StackLock, path: tuple[str, ...], value: Any, also_model_id: bool = False) -> StackLock:
    data = lock.to_data()
    node = data["profile"]
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    if also_model_id:
        data["resolved"]["model"]["id"] = value
    return msgspec.convert(data, StackLock)


def test_render_refuses_an_empty_capture_list_with_graphs_on() -> None:
    """SP105 refuses `captureSizes: []` (vLLM asserts a size when graphs are on); a lock made around
    validation must not render `"cudagraph_capture_sizes":[]` either."""
    bad = _relabel(shipped_locks()["gb300-tuned"], ("spec", "cudaGraphs", "captureSizes"), [])
    with pytest.raises(RenderError, match=r"error SP105 spec\.cudaGraphs\.captureSizes: captureSizes is empty"):
        build_objects(bad)
    off = _relabel(_relabel(bad, ("spec", "cudaGraphs", "mode"), "NONE"), ("spec", "cudaGraphs", "maxCaptureSize"),
                   None)
    assert build_objects(off)  # graphs off: vLLM ignores the list (SP106 says so)


def test_nothing_is_written_when_any_stack_fails(tmp_path: Path) -> None:
    good = shipped_locks()["gb300-tuned"]
    # A value the profile model accepts but render refuses: env render derives from the stack.
    bad = _relabel(shipped_locks()["gb300-launch"], ("spec", "kernels", "env", "VLLM_ENGINE_READY_TIMEOUT_S"), "5")
    with pytest.raises(RenderError) as info:
        render_stacks([good, bad])
    assert "which render derives from the stack" in str(info.value)
    assert info.value.exit_code == 1
    out = tmp_path / "manifests"
    lockdir = tmp_path / "lockfiles"
    lockdir.mkdir()
    for lock in (good, bad):
        from stackpin.lock.lockfile import render_lock

        (lockdir / f"{lock.metadata.name}.lock.yaml").write_text(render_lock(lock))
    result = CliRunner().invoke(render, ["--lockdir", str(lockdir), "--output-dir", str(out)])
    # The hand-edited lock fails its digest check (exit 2) before anything renders.
    assert result.exit_code == 2 and "stackDigest" in result.stderr
    assert not out.exists()
    write_stacks(render_stacks([good]), out)
    assert sorted(p.name for p in out.iterdir()) == ["gb300-tuned"]


# --- hostile strings -------------------------------------------------------------------------------

HOSTILE = ['"', "'", "a\nb: c", "{{ .Values.x }}", "{% raw %}", "key: value", "# comment", "- item", "[1, 2]",
           "{a: b}", "&anchor *alias", "!!python/object:os.system", "null", "true", "0x1F", "---", "...", " lead",
           "trail ", "tab\there", "ünïcödé ∑ 😀", "x" * 5000, "line1\nline2\n", "\\", "%TAG", "`", "|", ">",
           "$(rm -rf /)", "a\r\nb", "\u2028sep", "\x00nul", "?", "@at", "nel\x85"]
STRINGS = st.one_of(st.sampled_from(HOSTILE),
                    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80))
BASE = "gb300-disagg-wide-ep"
DGD_FILE = "dynamographdeployment-dsv41-flash.yaml"


def _workers(dgd: dict[str, Any]) -> list[dict[str, Any]]:
    """The engine containers (prefill and decode): where the profile's model, kernels and env land."""
    return [c["podTemplate"]["spec"]["containers"][0] for c in dgd["spec"]["components"] if c["type"] != "frontend"]


def _flag(container: dict[str, Any], flag: str) -> str | None:
    """The flag's value as the container receives it (the kubelet reduces `$$` to `$`)."""
    args = container["args"]
    return kubelet_value(args[args.index(flag) + 1]) if flag in args else None


def _env_value(container: dict[str, Any], name: str) -> str | None:
    value = {e["name"]: e["value"] for e in container["env"]}.get(name)
    return None if value is None else kubelet_value(value)


def test_a_value_the_kubelet_would_expand_arrives_as_written() -> None:
    """Kubernetes expands `$(NAME)` in a container's args and env values (issue 18): `$(HF_TOKEN)` in an
    engine argument would become the token. Every `$` is doubled, which the kubelet reduces back."""
    lock = with_profile_value(shipped_locks()["gb300-tuned"], ("spec", "placement", "pools", "worker", "engineArgs"),
                              {"--served-model-name": "$(HF_TOKEN)"})
    lock = with_profile_value(lock, ("spec", "kernels", "env", "STACKPIN_NOTE"), "$$(literal) $(HOME)")
    [worker] = _workers(build_objects(lock)[0])
    assert _flag(worker, "--served-model-name") == "$(HF_TOKEN)"
    assert worker["args"][worker["args"].index("--served-model-name") + 1] == "$$(HF_TOKEN)"
    assert {e["name"]: e["value"] for e in worker["env"]}["STACKPIN_NOTE"] == "$$$$(literal) $$(HOME)"
    assert _env_value(worker, "STACKPIN_NOTE") == "$$(literal) $(HOME)"


@dataclass(frozen=True)
class Field:
    """Where a hostile string goes in the profile, and where it must come out in the DynamoGraphDeployment."""

    path: tuple[str, ...]
    slots: Callable[[dict[str, Any]], list[str | None]]  # the strings at the value's place (None: absent)
    adds: tuple[str, int] | None = None  # (container list, items) a field absent from the base adds to each engine
    default: str | None = None  # the value render leaves out (the engine's own default)


FIELDS = {
    # spec.model.id is not here: the profile refuses every id the Hub would not accept (a test below).
    "env-value": Field(("spec", "kernels", "env", "VLLM_DEEP_GEMM_WARMUP"),
                       lambda dgd: [_env_value(c, "VLLM_DEEP_GEMM_WARMUP") for c in _workers(dgd)]),
    "new-env-value": Field(("spec", "kernels", "env", "STACKPIN_TEST"),
                           lambda dgd: [_env_value(c, "STACKPIN_TEST") for c in _workers(dgd)], adds=("env", 1)),
    # Inside the --speculative-config JSON, so never a YAML string of its own: decoded, it must be the value.
    "draft-model": Field(("spec", "speculative", "draftModel"), lambda dgd: [
        json.loads(_flag(c, "--speculative-config") or "{}").get("model") for c in _workers(dgd)]),
    "attention": Field(("spec", "kernels", "attention"),
                       lambda dgd: [_flag(c, "--attention-backend") for c in _workers(dgd)]),
    "tokenizer-mode": Field(("spec", "model", "tokenizerMode"),
                            lambda dgd: [_flag(c, "--tokenizer-mode") for c in _workers(dgd)],
                            adds=("args", 2), default="auto"),
}


@pytest.mark.parametrize("value", [v for v in HOSTILE if label_problems({"k": v})])
def test_hostile_label_values_are_refused_by_the_profile(value: str) -> None:
    """Labels are the one string field with Kubernetes syntax: the profile refuses such values outright."""
    with pytest.raises(ValidationError, match="not a valid Kubernetes label value"):
        _relabel(shipped_locks()[BASE], ("metadata", "labels", "stackpin.dev/story"), value).stack_profile  # noqa: B018


@pytest.mark.parametrize("value", [v for v in HOSTILE if model_id_problem(v)])
def test_hostile_model_ids_are_refused_by_the_profile(value: str) -> None:
    """A model id becomes a cache path and a URL: the profile refuses anything the Hub would not accept."""
    with pytest.raises(ValidationError, match="is not a Hugging Face model id"):
        _relabel(shipped_locks()[BASE], ("spec", "model", "id"), value, also_model_id=True).stack_profile  # noqa: B018


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (k, *_strings(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


def _shape(obj: Any) -> Any:
    """Structure without string contents: keys and list lengths of dicts, types of leaves."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shape(v) for v in obj]
    return type(obj).__name__


@cache
def _base_objects() -> dict[str, Any]:
    """The base stack, rendered and parsed once for every example (treat as read-only)."""
    return _objects(render_stack(shipped_locks()[BASE]).files)


@cache
def _expected_shape(name: str, field: str, adds: bool) -> Any:
    """The base file's shape, with the items `field` adds to each engine container where it `adds` (it is absent
    from the base and the value is not the engine's default). Cached: treat as read-only."""
    base = _base_objects()[name]
    shape = _shape(base)
    if name == DGD_FILE and adds and FIELDS[field].adds:
        key, count = FIELDS[field].adds
        for i, component in enumerate(base["spec"]["components"]):
            if component["type"] != "frontend":
                pod = shape["spec"]["components"][i]["podTemplate"]["spec"]
                containers = [pod["containers"][0]]
                if key == "env":  # the attestation init container runs with the engine's env
                    containers += [pod["initContainers"][j] for j, c in enumerate(
                        component["podTemplate"]["spec"]["initContainers"]) if c["name"] == "attest"]
                for container in containers:
                    container[key] = container[key] + container[key][-1:] * count  # one shape: order is moot
    return shape


def test_hostile_string_expectations_hold_for_a_plain_value() -> None:
    """The reference the property test compares against: the base lacks every probe value, and a plain value
    lands in each slot with exactly the shape changes (adds) each field declares."""
    base = _base_objects()
    assert "probe" not in _strings(base) and DGD_FILE in base
    for field, spec in FIELDS.items():
        assert "probe" not in spec.slots(base[DGD_FILE])
        parsed = _objects(render_stack(_relabel(shipped_locks()[BASE], spec.path, "probe")).files)
        assert spec.slots(parsed[DGD_FILE]) == ["probe"] * len(spec.slots(base[DGD_FILE])), field
        assert (_shape(parsed[DGD_FILE]) != _shape(base[DGD_FILE])) is bool(spec.adds), field
        assert {n: _shape(o) for n, o in parsed.items()} == {n: _expected_shape(n, field, True) for n in base}, field
        if spec.default is not None:
            unset = _relabel(shipped_locks()[BASE], spec.path, spec.default)
            assert _objects(render_stack(unset).files) == base, field


@pytest.mark.parametrize("field", sorted(FIELDS))
@settings(max_examples=40, deadline=None)
@given(value=STRINGS)
@example(value="auto")  # tokenizer-mode's default, which render leaves out: STRINGS all but never draws it
def test_hostile_strings_never_change_the_structure(field: str, value: str) -> None:
    spec = FIELDS[field]
    try:
        lock = _relabel(shipped_locks()[BASE], spec.path, value)
        lock.stack_profile  # noqa: B018 - the profile model itself may refuse the value
    except ValidationError:
        assume(False)
    try:
        stack = render_stack(lock)
    except RenderError as exc:
        # NEL (U+0085) is refused, not written as another string: PyYAML emits it raw inside quotes.
        assert "\x85" in value and "round-trip" in str(exc), f"{field}={value!r} should render"
        return
    parsed = _objects(stack.files)
    built = {f"{o['kind'].lower()}-{o['metadata']['name']}.yaml": o for o in build_objects(lock)}
    for name, obj in built.items():
        assert parsed[name] == obj  # the text parses back to exactly what was built
    base = _base_objects()
    assert set(parsed) == set(base)
    for name in base:
        assert _shape(parsed[name]) == _expected_shape(name, field, value != spec.default), name
        assert parsed[name]["kind"] == base[name]["kind"]
    # The value comes out whole, at its own place (and nowhere, where it is the engine's default).
    expected = None if value == spec.default else value
    assert spec.slots(parsed[DGD_FILE]) == [expected] * len(spec.slots(base[DGD_FILE]))


def test_render_removes_only_files_it_wrote(tmp_path: Path) -> None:
    from stackpin.render.output import render_stacks, write_stacks

    locks = list(shipped_locks().values())
    [stack] = render_stacks([locks[0]])
    directory = tmp_path / stack.name
    directory.mkdir()
    (directory / "mine.yaml").write_text("# a user's own file\nkind: ConfigMap\n")
    (directory / "computedomain-old.yaml").write_text(next(iter(stack.files.values())))
    write_stacks([stack], tmp_path)
    assert (directory / "mine.yaml").exists()
    assert not (directory / "computedomain-old.yaml").exists()


def test_a_failed_write_changes_nothing(tmp_path: Path, lockdir: Path) -> None:
    """One stack directory cannot be written (a file stands where it should be): one line, exit 2,
    and no other stack's manifests are touched."""
    out = tmp_path / "manifests"
    assert CliRunner().invoke(render, ["--lockdir", str(lockdir), "--output-dir", str(out)]).exit_code == 0
    tuned = out / "gb300-tuned" / "dynamographdeployment-dsv41-flash.yaml"
    tuned.write_text("edited by hand\n")
    shutil.rmtree(out / "vera-rubin-tuned")
    (out / "vera-rubin-tuned").write_text("a file, not a directory\n")
    result = CliRunner().invoke(render, ["--lockdir", str(lockdir), "--output-dir", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "vera-rubin-tuned" in result.output
    assert tuned.read_text() == "edited by hand\n"
    assert not [p for p in out.rglob(".*.tmp")]


def test_model_store_reaches_every_pod_read_only() -> None:
    from stackpin.render.build import build_objects

    dgd = build_objects(shipped_locks()["gb300-tuned"])[0]
    for component in dgd["spec"]["components"]:
        pod = component["podTemplate"]["spec"]
        container = pod["containers"][0]
        assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache", "readOnly": True}} in (
            pod["volumes"])
        assert {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True} in container["volumeMounts"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["HF_HOME"] == "/model-cache" and env["HF_HUB_OFFLINE"] == "1"
        assert container["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]


def test_cpu_offload_is_rendered_as_sized() -> None:
    from stackpin.render.build import build_objects

    offloaded = with_profile_value(shipped_locks()["gb300-tuned"], ("spec", "fallbacks", "cpuOffloadGib"), 8)
    dgd = build_objects(offloaded)[0]
    [worker] = [c for c in dgd["spec"]["components"] if c["name"] == "worker"]
    args = worker["podTemplate"]["spec"]["containers"][0]["args"]
    assert args[args.index("--cpu-offload-gb") + 1] == "8"


def test_render_to_stdout_is_the_directories_as_one_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`render --stdout` (or `--output-dir -`, which once made a directory named `-`) prints what the
    directories would hold, object by object, as `helm template` does; it writes nothing."""
    root = Path(__file__).resolve().parent.parent
    locks = [str(root / "lockfiles" / f"{n}.lock.yaml") for n in ("gb300-tuned", "gb300-launch")]
    monkeypatch.chdir(tmp_path)
    written = CliRunner().invoke(cli_main, ["render", *locks, "--output-dir", "out"])
    assert written.exit_code == 0, written.output
    for flag in (["--stdout"], ["--output-dir", "-"]):
        printed = CliRunner().invoke(cli_main, ["render", *locks, *flag])
        assert printed.exit_code == 0, printed.output
        docs = [d for d in yaml.safe_load_all(printed.stdout) if d is not None]
        on_disk = [yaml.safe_load(p.read_text()) for stack in ("gb300-tuned", "gb300-launch")
                   for p in sorted((tmp_path / "out" / stack).glob("*.yaml")) if p.name != "kustomization.yaml"]
        assert docs == on_disk and all("apiVersion" in d and "kind" in d for d in docs)
        assert "# Source: gb300-launch/dynamographdeployment-" in printed.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no directory named "-"
    refused = CliRunner().invoke(cli_main, ["render", *locks, "--stdout", "--check"])
    assert refused.exit_code == 2 and "not with --check" in refused.output


def test_render_of_a_lock_stale_against_its_profile_warns(tmp_path: Path) -> None:
    """A lock named as a file renders as it is (it is what was reviewed), but a profile changed since it
    was locked is said, with the command that relocks it."""
    root = Path(__file__).resolve().parent.parent
    shutil.copytree(root / "profiles", tmp_path / "profiles")
    shutil.copytree(root / "lockfiles", tmp_path / "lockfiles")
    lock = tmp_path / "lockfiles" / "gb300-tuned.lock.yaml"
    current = CliRunner().invoke(cli_main, ["render", str(lock), "--output-dir", str(tmp_path / "a")])
    assert current.exit_code == 0 and "stale" not in current.stderr, current.output
    profile = tmp_path / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"
    profile.write_text(profile.read_text().replace("maxNumSeqs: 64", "maxNumSeqs: 32"))
    stale = CliRunner().invoke(cli_main, ["render", str(lock), "--output-dir", str(tmp_path / "b")])
    assert stale.exit_code == 0, stale.output
    assert f"warning: {lock} is stale: {profile} changed since it was locked" in stale.stderr
    assert f"(run stackpin lock {profile})" in stale.stderr
    assert (tmp_path / "b" / "gb300-tuned").is_dir()


def test_success_lines_are_answers_on_stdout(tmp_path: Path) -> None:
    """`render --check` and `validate --manifests` answer on stdout (a script reads it), as errors go to
    stderr."""
    root = Path(__file__).resolve().parent.parent
    lock = str(root / "lockfiles" / "gb300-tuned.lock.yaml")
    out = tmp_path / "m"
    assert CliRunner().invoke(cli_main, ["render", lock, "--output-dir", str(out)]).exit_code == 0
    checked = CliRunner().invoke(cli_main, ["render", lock, "--output-dir", str(out), "--check"])
    assert checked.exit_code == 0 and f"manifests current: 1 stack(s) in {out}" in checked.stdout
    valid = CliRunner().invoke(cli_main, ["validate", "--manifests", str(out / "gb300-tuned")])
    assert valid.exit_code == 0 and "manifests valid:" in valid.stdout


def test_a_lock_that_is_a_fifo_or_a_device_is_refused_not_read(tmp_path: Path) -> None:
    """The fast lock reader once blocked on a FIFO (read_text): regular files only, bounded."""
    fifo = tmp_path / "f.lock.yaml"
    os.mkfifo(fifo)
    device = tmp_path / "z.lock.yaml"
    device.symlink_to("/dev/zero")
    for path in (fifo, device):
        done = subprocess.run([sys.executable, "-m", "stackpin", "render", str(path), "--stdout"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "is not a regular file" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and not done.stdout
