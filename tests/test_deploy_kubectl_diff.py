"""What `stackpin apply` adds to the rendered objects, pinned with the real kubectl against the real
kube-apiserver: the rendered directory (`stackpin render`, in a kustomize overlay that sets the test's
namespace, as a GitOps repository would) diffed against what apply left live.

- as the GitOps tools apply it, under a field manager of their own: no difference (exit 0);
- as field manager `stackpin`: exactly the ApplySet label `applyset.kubernetes.io/part-of`, which only
  apply writes (its value hashes the parent's namespace, which the rendered files cannot know), shown
  as removed from each object, and nothing else (docs/deploy.md, "What apply adds")."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from stackpin.cli.main import main
from tests.kube import Kube, lockfile


def overlay(kube: Kube, tmp_path: Path, stack: str) -> Path:
    rendered = CliRunner().invoke(main, ["render", lockfile(stack), "--output-dir", str(tmp_path / "manifests")])
    assert rendered.exit_code == 0, rendered.output
    directory = tmp_path / "overlay"
    directory.mkdir()
    (directory / "kustomization.yaml").write_text(f"namespace: {kube.namespace}\nresources: [../manifests/{stack}]\n",
                                                  encoding="utf-8")
    return directory


def test_kubectl_diff_of_the_rendered_directory_after_apply(kube: Kube, tmp_path: Path) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    directory = overlay(kube, tmp_path, "gb300-disagg-wide-ep")
    as_gitops = kube.kubectl("diff", "--server-side", "--field-manager=argocd-controller", "-k", str(directory),
                             check=False)
    assert as_gitops.returncode == 0, as_gitops.stdout + as_gitops.stderr
    assert as_gitops.stdout == ""

    as_stackpin = kube.kubectl("diff", "--server-side", "--field-manager=stackpin", "-k", str(directory), check=False)
    assert as_stackpin.returncode == 1, as_stackpin.stderr
    parent = kube.parent()
    assert parent is not None
    set_id = parent["metadata"]["labels"]["applyset.kubernetes.io/id"]
    changed = [line for line in as_stackpin.stdout.splitlines()
               if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))]
    # One removed line per object (the attestation ConfigMap, the ComputeDomain, the DynamoGraphDeployment).
    assert changed == [f"-    applyset.kubernetes.io/part-of: {set_id}"] * 3, as_stackpin.stdout
