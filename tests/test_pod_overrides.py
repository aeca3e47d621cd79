"""spec.placement.podOverrides and spec.placement.sharedMemory (issue 36): a strategic merge patch of a
component's pod template, applied last by render, the same in both DynamoGraphDeployment versions.

The merge semantics are held to the real kube-apiserver's own strategic merge patch (a PodTemplate patched on
the tests' server against the same patch applied by stackpin), and the merge-key data file to the server's
/openapi/v2; both skip with the reason where no server binary is found."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.lock.lockfile import effective_profile
from stackpin.profile.loader import load_profile
from stackpin.profile.podpatch import apply_patch, merge_metadata
from stackpin.render.build import dynamo_graph_deployment, plan_stack
from stackpin.render.output import render_stack
from tests.kube import DGD, Kube
from tests.lockkit import PROFILES_DIR, lock_files

ROOT = Path(__file__).resolve().parent.parent
GPU = "nvidia.com/gpu"

DECODE_PATCH: dict[str, Any] = {
    "metadata": {"annotations": {"site.example/team": "serving"}},
    "spec": {
        "tolerations": [{"key": "rdma", "operator": "Exists"}],
        "containers": [{
            "name": "main",
            "resources": {"limits": {"rdma/ib": "1", "cpu": 128, "memory": "100Gi", "hugepages-2Mi": "1Gi"},
                          "requests": {"cpu": "16", "memory": "20Gi"}},
            "envFrom": [{"secretRef": {"name": "hf-token"}}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        }],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}],
    },
}
FRONTEND_PATCH: dict[str, Any] = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "4"}}}]}}


def _variant(directory: Path, name: str, placement: dict[str, Any], base: str = "gb300-launch.yaml") -> Path:
    """A profile beside the shipped ones (extends may not leave their directory) is copied with its base."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / base).write_bytes((PROFILES_DIR / base).read_bytes())
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "stackpin.dev/v1", "kind": "StackProfile", "extends": base,
                                    "metadata": {"name": name}, "spec": {"placement": placement}}), encoding="utf-8")
    return path


PLACEMENT = {"sharedMemory": {"frontend": "40Gi", "decode": "100Gi"},
             "podOverrides": {"decode": DECODE_PATCH, "frontend": FRONTEND_PATCH}}


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("po")
    [lock] = lock_files([_variant(directory / "profiles", "po", PLACEMENT)], directory / "lockfiles")
    return lock


def _component(dgd: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in dgd["spec"]["components"] if c["name"] == name)


# --- merge semantics -------------------------------------------------------------------------------

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "x", "tier": "a"}},
    "spec": {
        "containers": [{"name": "main", "image": "img",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "resources": {"requests": {"cpu": "8"}, "limits": {GPU: "4"}},
                        "volumeMounts": [{"name": "m", "mountPath": "/m"}]}],
        "tolerations": [{"key": "t1", "operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "volumes": [{"name": "m", "emptyDir": {}}],
    },
}

CASES: dict[str, dict[str, Any]] = {
    "containers and env merge by name": {"spec": {"containers": [
        {"name": "main", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]},
        {"name": "sidecar", "image": "side"}]}},
    "null deletes a key": {"metadata": {"labels": {"tier": None}}, "spec": {"nodeSelector": None}},
    "$patch: replace replaces a map": {"spec": {"containers": [
        {"name": "main", "resources": {"requests": {"$patch": "replace", "memory": "1Gi"}}}]}},
    "$patch: replace item replaces a merging list": {"spec": {"volumes": [
        {"$patch": "replace"}, {"name": "n", "emptyDir": {}}, {"name": "m", "emptyDir": {"medium": "Memory"}}]}},
    "$patch: delete removes an item by key": {"spec": {"containers": [
        {"name": "main", "env": [{"name": "A", "$patch": "delete"}]}]}},
    "a list without a merge key replaces": {"spec": {"tolerations": [{"key": "t2", "operator": "Exists"}]}},
    "an added item alone goes first": {"spec": {"containers": [{"name": "sidecar", "image": "side"}],
                                                "volumes": [{"name": "n", "emptyDir": {}}]}},
    "$patch: delete removes a map": {"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"$patch": "delete"}}}]}},
    "a nested null in a new value means nothing": {"spec": {"securityContext": {"runAsUser": 1000, "fsGroup": None}}},
    "volumeMounts merge by mountPath": {"spec": {"containers": [
        {"name": "main", "volumeMounts": [{"name": "n", "mountPath": "/n"}, {"name": "m2", "mountPath": "/m"}]}],
        "volumes": [{"name": "n", "emptyDir": {}}, {"name": "m2", "emptyDir": {}}]}},
}


def test_merge_semantics_by_hand() -> None:
    out = apply_patch(TEMPLATE, CASES["containers and env merge by name"])
    # The server's order (normalizeElementOrder): the patch's items in its order, the others in theirs,
    # an item of the original before a patched one that came after it there.
    assert [c["name"] for c in out["spec"]["containers"]] == ["main", "sidecar"]
    main = out["spec"]["containers"][0]
    assert main["image"] == "img" and main["resources"]["limits"] == {GPU: "4"}
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"}, {"name": "C", "value": "3"}]
    out = apply_patch(TEMPLATE, CASES["null deletes a key"])
    assert out["metadata"]["labels"] == {"app": "x"} and "nodeSelector" not in out["spec"]
    out = apply_patch(TEMPLATE, CASES["$patch: replace replaces a map"])
    assert out["spec"]["containers"][0]["resources"] == {"requests": {"memory": "1Gi"}, "limits": {GPU: "4"}}
    assert apply_patch(TEMPLATE, CASES["$patch: replace item replaces a merging list"])["spec"]["volumes"] == [
        {"name": "n", "emptyDir": {}}, {"name": "m", "emptyDir": {"medium": "Memory"}}]
    assert apply_patch(TEMPLATE, CASES["$patch: delete removes an item by key"])["spec"]["containers"][0]["env"] == [
        {"name": "B", "value": "2"}]
    assert apply_patch(TEMPLATE, CASES["a list without a merge key replaces"])["spec"]["tolerations"] == [
        {"key": "t2", "operator": "Exists"}]
    mounts = apply_patch(TEMPLATE, CASES["volumeMounts merge by mountPath"])["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [{"name": "n", "mountPath": "/n"}, {"name": "m2", "mountPath": "/m"}]
    assert TEMPLATE["spec"]["containers"][0]["env"][1]["value"] == "2"  # the input is left as it was


def _server_patched(kube: Kube, name: str, template: dict[str, Any], patch: dict[str, Any] | None) -> Any:
    path = kube.path("/api/v1", "podtemplates")
    kube.env.ok("POST", path, {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
                               "template": template})
    if patch is not None:
        kube.env.ok("PATCH", f"{path}/{name}", {"template": patch},
                    content_type="application/strategic-merge-patch+json")
    return kube.env.ok("GET", f"{path}/{name}")["template"]


def test_merge_is_the_api_servers_strategic_merge_patch(kube: Kube) -> None:
    """Each case: the server patches a stored PodTemplate; stackpin's result, stored as it is, must read
    back the same (both go through the server's defaulting, so only the merge can differ)."""
    for n, (label, patch) in enumerate(sorted(CASES.items())):
        theirs = _server_patched(kube, f"server-{n}", copy.deepcopy(TEMPLATE), copy.deepcopy(patch))
        ours = _server_patched(kube, f"stackpin-{n}", apply_patch(TEMPLATE, patch), None)
        assert ours == theirs, label


def test_merge_keys_file_is_the_live_servers(kube: Kube) -> None:
    spec = importlib.util.spec_from_file_location("gen_pod_merge_keys", ROOT / "scripts" / "gen_pod_merge_keys.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = script.from_server(kube.env)
    assert text == (ROOT / "stackpin" / "profile" / "pod_merge_keys.yaml").read_text(encoding="utf-8"), \
        "regenerate it: python scripts/gen_pod_merge_keys.py"
    data = merge_metadata()
    assert data["kubernetesVersion"].startswith("v1.") and "openapi" in data["source"]
    assert data["types"]["io.k8s.api.core.v1.Container"]["env"] == {"key": "name", "strategy": "merge"}


# --- render ----------------------------------------------------------------------------------------

def _as_template(service: dict[str, Any]) -> dict[str, Any]:
    """A v1alpha1 service's pieces put back into a pod template (Dynamo's Resources as Kubernetes')."""
    spec = dict(service["extraPodSpec"])
    main = dict(spec.pop("mainContainer"))
    names = {"cpu": "cpu", "memory": "memory", "gpu": GPU}
    resources: dict[str, Any] = {}
    for side in ("requests", "limits"):
        if side in service.get("resources", {}):
            amounts = dict(service["resources"][side])
            custom = amounts.pop("custom", {})
            resources[side] = {**{names[k]: v for k, v in amounts.items()}, **custom}
    if "claims" in service.get("resources", {}):
        resources["claims"] = service["resources"]["claims"]
    if resources:
        main["resources"] = resources
    spec["containers"] = [main, *spec.get("containers", [])]
    return {"metadata": service["extraPodMetadata"], "spec": spec}


def test_both_crd_versions_render_the_same_pods(locked: Any) -> None:
    plan = plan_stack(locked)
    beta = dynamo_graph_deployment(msgspec.structs.replace(plan, crd_version="v1beta1"))
    alpha = dynamo_graph_deployment(msgspec.structs.replace(plan, crd_version="v1alpha1"))
    for name in ("frontend", "prefill", "decode"):
        assert _as_template(alpha["spec"]["services"][name]) == _component(beta, name)["podTemplate"], name
    decode = _component(beta, "decode")["podTemplate"]
    main = decode["spec"]["containers"][0]
    assert main["name"] == "main" and main["resources"]["limits"] == {
        "cpu": "128", "memory": "100Gi", "rdma/ib": "1", "hugepages-2Mi": "1Gi", GPU: "4"}
    assert main["resources"]["requests"] == {"cpu": "16", "memory": "20Gi", GPU: "4"}  # the GPUs still the topology's
    assert main["envFrom"][-1] == {"secretRef": {"name": "hf-token"}}
    assert decode["spec"]["tolerations"] == [{"key": "rdma", "operator": "Exists"}]
    assert decode["metadata"]["annotations"] == {"site.example/team": "serving"}
    assert alpha["spec"]["services"]["decode"]["resources"]["limits"]["custom"] == {"rdma/ib": "1",
                                                                                   "hugepages-2Mi": "1Gi"}
    # Shared memory as each version spells it; prefill keeps the catalog's default.
    assert _component(beta, "frontend")["sharedMemorySize"] == "40Gi"
    assert _component(beta, "decode")["sharedMemorySize"] == "100Gi"
    assert alpha["spec"]["services"]["frontend"]["sharedMemory"] == {"size": "40Gi"}
    prefill = _component(beta, "prefill")["podTemplate"]["spec"]["containers"][0]
    assert "rdma/ib" not in prefill["resources"]["limits"]


def test_shared_memory_zero_mounts_none_in_either_version(tmp_path: Path) -> None:
    [lock] = lock_files([_variant(tmp_path / "p", "shm", {"sharedMemory": {"frontend": "0"}})], tmp_path / "l")
    plan = plan_stack(lock)
    beta = dynamo_graph_deployment(plan)
    alpha = dynamo_graph_deployment(msgspec.structs.replace(plan, crd_version="v1alpha1"))
    assert _component(beta, "frontend")["sharedMemorySize"] == "0"
    assert alpha["spec"]["services"]["frontend"]["sharedMemory"] == {"disabled": True}


def test_lock_and_render_are_deterministic(tmp_path: Path, locked: Any) -> None:
    [again] = lock_files([_variant(tmp_path / "profiles", "po", PLACEMENT)], tmp_path / "lockfiles")
    assert again.stack_digest == locked.stack_digest
    assert render_stack(again).files == render_stack(locked).files


def test_an_unset_pass_through_leaves_the_locked_document_as_it_was() -> None:
    placement = effective_profile(load_profile(PROFILES_DIR / "gb300-launch.yaml").profile)["spec"]["placement"]
    assert "podOverrides" not in placement and "sharedMemory" not in placement


def test_the_render_passes_the_api_servers_dry_run(kube: Kube, locked: Any) -> None:
    files = render_stack(locked).files  # render itself checks both CRD versions' bundled schemas
    dgd = next(yaml.safe_load(t) for n, t in files.items() if n.startswith("dynamographdeployment"))
    dgd["metadata"]["namespace"] = kube.namespace
    status, data = kube.env.request("POST", kube.path(DGD, "dynamographdeployments") + "?dryRun=All", dgd)
    assert status in (200, 201), data
    # The patched pods as Pods: the server's own PodSpec validation (resource names, quantities, volumes).
    for name in ("frontend", "decode"):
        template = _component(dgd, name)["podTemplate"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"dry-{name}", **template["metadata"]},
               "spec": template["spec"]}
        status, data = kube.env.request("POST", kube.path("/api/v1", "pods") + "?dryRun=All", pod)
        assert status in (200, 201), (name, data)


# --- refusals ----------------------------------------------------------------------------------------

REFUSED = [
    ("gpu", {"podOverrides": {"decode": {"spec": {"containers": [
        {"name": "main", "resources": {"limits": {GPU: "8"}}}]}}}},
     "spec.containers[main].resources.limits.nvidia.com/gpu", "tensorParallel"),
    ("command", {"podOverrides": {"decode": {"spec": {"containers": [{"name": "main", "command": ["sh"]}]}}}},
     "spec.containers[main].command", "not a patch"),
    ("args", {"podOverrides": {"frontend": {"spec": {"containers": [{"name": "main", "args": ["--x"]}]}}}},
     "spec.containers[main].args", "frontendArgs"),
    ("replicas", {"podOverrides": {"decode": {"replicas": 3}}}, "decode.replicas", "pools.decode.replicas"),
    ("claim", {"podOverrides": {"decode": {"spec": {"resourceClaims": [{"name": "x"}]}}}},
     "spec.resourceClaims", "topology"),
    ("component", {"podOverrides": {"worker": {"spec": {}}}}, "spec.placement.podOverrides", "runs no such"),
    ("shm-component", {"sharedMemory": {"worker": "1Gi"}}, "spec.placement.sharedMemory", "runs no such"),
    ("directive", {"podOverrides": {"decode": {"spec": {"volumes": [
        {"name": "v", "$retainKeys": ["name"]}]}}}}, "$retainKeys", "not supported"),
    ("merge-key", {"podOverrides": {"decode": {"spec": {"volumes": [{"emptyDir": {}}]}}}},
     "spec.volumes[0]", "merges by 'name'"),
    ("yaml-1.1", {"podOverrides": {"decode": {"metadata": {"labels": {"rdma": True}}}}},
     "metadata.labels.rdma", "quote it"),
    ("main-replaced", {"podOverrides": {"decode": {"spec": {"containers": [{"$patch": "replace"}]}}}},
     "spec.containers", "main container"),
]


@pytest.mark.parametrize(("placement", "field", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_a_patch_may_not_change_is_one_line_exit_2(tmp_path: Path, placement: dict[str, Any], field: str,
                                                         words: str) -> None:
    path = _variant(tmp_path, "bad", placement)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert str(path) in lines[0] and field in lines[0] and words in lines[0], lines[0]


def test_validate_names_each_patched_component(tmp_path: Path) -> None:
    path = _variant(tmp_path, "po", PLACEMENT)
    result = CliRunner().invoke(main, ["validate", str(path)])
    notes = [line for line in result.output.splitlines() if "SP271" in line]
    assert len(notes) == 2, result.output
    assert any("podOverrides.decode" in n and "spec.containers[main] (envFrom, resources, volumeMounts)" in n
               for n in notes)


def test_show_and_diff_carry_it(tmp_path: Path) -> None:
    path = _variant(tmp_path, "po", PLACEMENT)
    shown = CliRunner().invoke(main, ["show", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "podOverrides:" in shown.output and "rdma/ib" in shown.output and "sharedMemory:" in shown.output
    other = _variant(tmp_path, "po2", {"sharedMemory": PLACEMENT["sharedMemory"], "podOverrides": {
        "decode": {**DECODE_PATCH, "metadata": {"annotations": {"site.example/team": "research"}}},
        "frontend": FRONTEND_PATCH}})
    diffed = CliRunner().invoke(main, ["diff", str(path), str(other)])
    assert "spec.placement.podOverrides.decode" in diffed.output and "research" in diffed.output, diffed.output
    assert "restart (decode)" in diffed.output, diffed.output
