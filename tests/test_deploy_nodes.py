"""Node labels as checked facts (issue 19, item 5), against the real kube-apiserver (tests/kube.py, whose
session adds one Node per shipped platform, labelled as the catalog says: a stand-in for the racks, no
kubelet runs): apply says before writing which pool's nodeSelector matches no node (a warning; with
--strict an error and nothing written); a site's own labels (spec.target.nodeLabels) replace the catalog's;
the rendered DynamoGraphDeployment names the estimate it rests on."""

from __future__ import annotations

from pathlib import Path

from stackpin.catalog import load_catalog
from stackpin.deploy.clusterfacts import _minor
from stackpin.lock.lockfile import write_locks
from tests.helpers import base_doc, load_doc
from tests.kube import Kube
from tests.lockkit import lock_loaded

SITE = {"example.com/gpu-pool": "agents-a"}


def site_lock(tmp_path: Path, labels: dict[str, str]) -> str:
    """The tuned GB300 stack with the site's node labels, locked against the stand-in mirror."""
    doc = base_doc("gb300-tuned")
    doc["spec"]["target"]["nodeLabels"] = labels
    loaded = load_doc(tmp_path, doc, "gb300-tuned.yaml")
    [path] = write_locks(lock_loaded([loaded], tmp_path / "lockfiles"), tmp_path / "lockfiles")
    return str(path)


def test_a_pool_no_node_can_run_is_named_before_anything_is_written(kube: Kube, tmp_path: Path) -> None:
    lock = site_lock(tmp_path, SITE)
    strict = kube.stackpin("apply", lock, "--strict")
    assert strict.exit_code == 2, strict.output
    [line] = strict.stderr.splitlines()
    assert line.startswith("error: worker: no node matches its nodeSelector example.com/gpu-pool=agents-a,"
                           "kubernetes.io/arch=arm64: its pods would stay Pending")
    assert kube.dgd() is None and kube.parent() is None  # nothing written
    warned = kube.stackpin("apply", lock)
    assert warned.exit_code == 0, warned.output
    [line] = [x for x in warned.stderr.splitlines() if "no node matches" in x]
    assert line.startswith("warning: worker: no node matches its nodeSelector example.com/gpu-pool=agents-a")
    # Once the site's nodes carry the label, nothing to say.
    kube.env.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": f"site-node-{kube.namespace}", "labels": {**SITE, "kubernetes.io/arch": "arm64"}}})
    try:
        again = kube.stackpin("apply", lock, "--strict")
        assert again.exit_code == 0, again.output
        assert "no node matches" not in again.stderr
        dgd = kube.dgd()
        assert dgd is not None
        selectors = {c["name"]: c["podTemplate"]["spec"]["nodeSelector"] for c in dgd["spec"]["components"]}
        assert selectors["worker"] == {**SITE, "kubernetes.io/arch": "arm64"}
        assert "stackpin.dev/estimates" not in dgd["metadata"]["annotations"]  # the site's own labels
    finally:
        kube.env.request("DELETE", f"/api/v1/nodes/site-node-{kube.namespace}")


def test_the_catalogs_estimated_label_is_named_on_the_object(kube: Kube) -> None:
    result = kube.apply("gb300-tuned", "--strict")  # the session's stand-in GB300 node matches
    assert result.exit_code == 0, result.output
    assert "no node matches" not in result.stderr
    dgd = kube.dgd()
    assert dgd is not None
    assert dgd["metadata"]["annotations"]["stackpin.dev/estimates"] == (
        "nodeSelector nvidia.com/gpu.product=NVIDIA-GB300: the catalog's estimate for gb300-nvl72 "
        "(set spec.target.nodeLabels to your nodes')")
    assert load_catalog().platforms["gb300-nvl72"].is_estimate("node_labels")


def test_image_volume_releases_are_versions() -> None:
    facts = load_catalog().engine.image_volume
    assert _minor(facts.since) == (1, 31) and _minor(facts.default_on) == (1, 35)
    assert _minor("v1.36.2") == (1, 36) and _minor("v1.34.0-gke.1") == (1, 34) and _minor("dev") is None
