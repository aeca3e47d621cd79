"""`stackpin status` against a real kube-apiserver: the live digest and record, the lock comparison,
drift from managedFields, readiness; and the three kinds of kubeconfig credentials."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stackpin.lock.lockfile import read_lock
from tests.kube import LOCKS, Kube, attestation, lockfile, ready_status

DGD_SUBJECT = "dynamographdeployment.nvidia.com/dsv41-flash"
TUNED_DIGEST = read_lock(Path(lockfile("gb300-tuned"))).stack_digest


def status(kube: Kube, *args: str, **kwargs: object) -> tuple[int, dict]:
    result = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS), "-o", "json", *args, **kwargs)
    return result.exit_code, json.loads(result.stdout)


def test_status_in_sync_shows_digest_record_lock_and_readiness(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    kube.operator_status(ready_status({"frontend": 1, "worker": 17}, state="pending", ready="False"))
    code, data = status(kube)
    assert code == 0
    assert data["stack"] == "gb300-tuned" and data["stackDigest"] == TUNED_DIGEST and data["revision"] is None
    assert data["lock"] == {"path": str(LOCKS / "gb300-tuned.lock.yaml"), "stack": "gb300-tuned",
                            "stackDigest": TUNED_DIGEST, "matches": True}
    assert data["lastApplied"]["appliedBy"] == "admin" and data["revisions"] == 1
    assert data["drift"] == [] and data["problems"] == [] and data["inSync"] is True
    assert data["objects"] == [{"object": attestation("gb300-tuned"), "stackDigest": TUNED_DIGEST, "revision": None},
                               {"object": DGD_SUBJECT, "stackDigest": TUNED_DIGEST, "revision": None}]
    assert data["readiness"]["ready"] is False
    assert data["readiness"]["components"][1] == {"name": "worker", "desired": 18, "ready": 17}
    text = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS))
    assert text.exit_code == 0
    assert "ready       no: state pending; Ready=False (ComponentsNotReady); frontend 1/1, worker 17/18 ready" in (
        text.stdout)


def test_status_against_another_lock_is_a_mismatch(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    code, data = status(kube, "--lock", lockfile("gb300-launch"))
    assert code == 1 and data["lock"]["matches"] is False and data["lock"]["stack"] == "gb300-launch"


def test_drift_names_the_field_and_the_manager_that_changed_it(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    patch = '[{"op":"replace","path":"/spec/components/1/replicas","value":12}]'
    kube.kubectl("patch", "dgd", "dsv41-flash", "--type=json", "-p", patch)
    kube.kubectl("label", "dgd", "dsv41-flash", "team=inference")
    code, data = status(kube)
    assert code == 1 and data["inSync"] is False
    drift = [(d["path"], d["manager"], d["operation"]) for d in data["drift"]]
    assert drift == [('.metadata.labels.team', "kubectl-label", "Update"),
                     ('.spec.components[name="worker"].replicas', "kubectl-patch", "Update")]
    text = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS))
    assert text.exit_code == 1
    assert f'  {DGD_SUBJECT} .spec.components[name="worker"].replicas  by kubectl-patch (Update ' in text.stdout
    assert text.stderr.splitlines() == [f"error: {kube.namespace}/dsv41-flash is not in sync: 2 drifted field(s)"]
    # Applying again takes the replicas back (stackpin's value differs: a conflict, so force); the label
    # is not stackpin's and stays someone else's.
    assert kube.apply("gb300-tuned", "--force-conflicts").exit_code == 0
    code, data = status(kube)
    assert [d["path"] for d in data["drift"]] == [".metadata.labels.team"]


def test_a_field_set_to_the_same_value_by_another_manager_is_not_drift(kube: Kube, tmp_path: Path) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    manifest = tmp_path / "same.json"
    dgd = kube.dgd()
    assert dgd is not None
    same = {"apiVersion": dgd["apiVersion"], "kind": dgd["kind"],
            "metadata": {"name": "dsv41-flash", "namespace": kube.namespace},
            "spec": {"components": [{"name": "worker", "replicas": 18}]}}
    manifest.write_text(json.dumps(same), encoding="utf-8")
    kube.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", str(manifest))
    code, data = status(kube)
    assert code == 0 and data["drift"] == []


@pytest.mark.parametrize("credential", ["token", "client-certificate", "exec-plugin"])
def test_every_kind_of_kubeconfig_credential_works(kube: Kube, credential: str) -> None:
    env = kube.env
    config = {"token": env.kubeconfig, "client-certificate": env.cert_kubeconfig(),
              "exec-plugin": env.exec_kubeconfig()}[credential]
    applied = kube.stackpin("apply", lockfile("gb300-tuned"), kubeconfig=config)
    assert applied.exit_code == 0, applied.output
    code, data = status(kube, kubeconfig=config)
    assert code == 0 and data["stackDigest"] == TUNED_DIGEST
    assert data["lastApplied"]["appliedBy"] == ("cert-admin" if credential == "client-certificate" else "admin")


def test_the_namespace_comes_from_the_kubeconfig_context_when_not_given(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    config = kube.env.token_kubeconfig("admin", namespace=kube.namespace)
    result = kube.stackpin("status", "dsv41-flash", "--lockdir", str(LOCKS), "-o", "json", kubeconfig=config,
                           namespace=False)
    assert result.exit_code == 0 and json.loads(result.stdout)["namespace"] == kube.namespace


def test_status_of_a_deployment_stackpin_never_applied(kube: Kube, tmp_path: Path) -> None:
    """A real process, through a context that skips TLS verification: one line, no warnings."""
    config = json.loads(kube.kubeconfig.read_text())
    config["clusters"][0]["cluster"] = {"server": kube.env.url, "insecure-skip-tls-verify": True}
    insecure = tmp_path / "kubeconfig"
    insecure.write_text(json.dumps(config))
    stackpin = Path(sys.executable).with_name("stackpin")
    result = subprocess.run([str(stackpin), "status", "nothing-here", "--kubeconfig", str(insecure), "-n",
                             kube.namespace], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: no stackpin deployment nothing-here in namespace {kube.namespace} "
        "(no configmap/stackpin-nothing-here): apply it with stackpin apply, or name another namespace with -n"]


def test_an_object_deleted_behind_stackpins_back_is_reported(kube: Kube) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    kube.kubectl("delete", "computedomain", "dsv41-flash-compute-domain")
    code, data = status(kube)
    assert code == 1
    assert data["problems"] == ["computedomain.resource.nvidia.com/dsv41-flash-compute-domain is missing "
                                "(deleted outside stackpin?)"]
