"""The pure parts of stackpin.deploy (no cluster): drift paths from managedFields, which changes need
a recreate, readiness from a DynamoGraphDeployment's status, the record, and the CLI's one-line
refusals that need no server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.deploy.applyset import (
    MAX_ENTRIES,
    MAX_LOCKS,
    TOOLING,
    AppliedRevision,
    applyset_id,
    parent_object,
    read_parent,
    with_entry,
)
from stackpin.deploy.drift import drifted_fields, leaf_paths
from stackpin.deploy.kube import ClusterError
from stackpin.deploy.readiness import readiness
from stackpin.deploy.recreate import recreate_reasons

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"


def dgd(stack: str) -> dict[str, Any]:
    [path] = (MANIFESTS / stack).glob("dynamographdeployment-*.yaml")
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


def test_leaf_paths_spell_fields_as_the_api_server_does() -> None:
    fields = {"f:metadata": {"f:labels": {"f:team": {}}, "f:finalizers": {".": {}, 'v:"x/y"': {}}},
              "f:spec": {"f:components": {'k:{"name":"worker"}': {".": {}, "f:replicas": {}},
                                          'k:{"name":"frontend","type":"frontend"}': {".": {}}},
                         "f:list": {"i:0": {}}}}
    assert list(leaf_paths(fields)) == [
        ".metadata.finalizers[=\"x/y\"]", ".metadata.labels.team",
        '.spec.components[name="frontend",type="frontend"]', '.spec.components[name="worker"].replicas',
        ".spec.list[0]"]


def test_drift_is_what_others_own_under_spec_labels_and_annotations_that_stackpin_does_not() -> None:
    obj = {"metadata": {"managedFields": [
        {"manager": "stackpin", "operation": "Apply", "fieldsV1": {"f:spec": {"f:a": {}, "f:shared": {}}}},
        {"manager": "gitops", "operation": "Apply", "fieldsV1": {"f:spec": {"f:shared": {}}}},
        {"manager": "kubectl-edit", "operation": "Update", "time": "t1",
         "fieldsV1": {"f:spec": {"f:b": {}}, "f:metadata": {"f:finalizers": {'v:"f"': {}}}}},
        {"manager": "dynamo-operator", "operation": "Update", "subresource": "status",
         "fieldsV1": {"f:status": {"f:state": {}}}},
    ]}}
    [drift] = drifted_fields(obj, "x/y")
    assert drift.as_dict() == {"object": "x/y", "path": ".spec.b", "manager": "kubectl-edit", "operation": "Update",
                               "time": "t1"}


@pytest.mark.parametrize(("before", "after", "reasons"), [
    ("gb300-tuned", "vera-rubin-tuned", []),
    ("gb300-tuned", "gb300-tuned", []),
    ("gb300-disagg-wide-ep", "gb300-tuned", ["components frontend, prefill, decode -> frontend, worker"]),
    ("gb300-launch", "gb300-disagg-wide-ep", ["component decode single-node -> multi-node (4 nodes)"]),
    ("gb300-disagg-wide-ep", "gb300-launch", ["component decode multi-node (4 nodes) -> single-node"]),
])
def test_recreate_reasons(before: str, after: str, reasons: list[str]) -> None:
    assert recreate_reasons(dgd(before), dgd(after)) == reasons


def test_recreate_reasons_of_v1alpha1_services_and_backend() -> None:
    live = {"kind": "DynamoGraphDeployment", "spec": {"backendFramework": "vllm", "services": {
        "Frontend": {"componentType": "frontend"}, "VllmDecodeWorker": {"componentType": "worker",
                                                                         "subComponentType": "decode"}}}}
    new = json.loads(json.dumps(live))
    new["spec"]["backendFramework"] = "sglang"
    new["spec"]["services"]["VllmDecodeWorker"]["multinode"] = {"nodeCount": 2}
    assert recreate_reasons(live, new) == ["component VllmDecodeWorker single-node -> multi-node (2 nodes)",
                                           "backendFramework vllm -> sglang"]


def test_recreate_reasons_follow_the_webhook_on_node_count_backend_and_type() -> None:
    # The roles-era webhook refuses any multinode.nodeCount change (docs/facts.md#admission-and-rollouts);
    # backendFramework unset -> vllm is a change; a component's type is immutable nowhere.
    live = dgd("gb300-disagg-wide-ep")
    new = json.loads(json.dumps(live))
    [decode] = [c for c in new["spec"]["components"] if c["name"] == "decode"]
    decode["multinode"]["nodeCount"] = 2
    assert recreate_reasons(live, new) == ["component decode multinode.nodeCount 4 -> 2 (immutable)"]
    del live["spec"]["backendFramework"]
    assert recreate_reasons(live, dgd("gb300-disagg-wide-ep")) == ["backendFramework unset -> vllm"]
    typed = dgd("gb300-disagg-wide-ep")
    [decode] = [c for c in typed["spec"]["components"] if c["name"] == "decode"]
    decode["type"] = "worker"
    assert recreate_reasons(dgd("gb300-disagg-wide-ep"), typed) == []


def status_of(**status: Any) -> dict[str, Any]:
    obj = dgd("gb300-tuned")
    obj["metadata"]["generation"] = 2
    obj["status"] = status
    return obj


@pytest.mark.parametrize(("status", "ready", "waiting"), [
    ({}, False, ["state not reported", "frontend -/1 ready", "worker -/18 ready"]),
    ({"state": "successful", "observedGeneration": 2,
      "components": {"frontend": {"readyReplicas": 1}, "worker": {"readyReplicas": 18}}}, True, []),
    ({"state": "successful", "observedGeneration": 1,
      "components": {"frontend": {"readyReplicas": 1}, "worker": {"readyReplicas": 18}}},
     False, ["status not yet observed for this generation"]),
    ({"state": "pending", "conditions": [{"type": "Ready", "status": "False", "reason": "Scaling"}],
      "components": {"frontend": {"readyReplicas": 1}, "worker": {"availableReplicas": 4}}},
     False, ["state pending", "Ready=False (Scaling)", "worker 4/18 ready"]),
])
def test_readiness(status: dict[str, Any], ready: bool, waiting: list[str]) -> None:
    state = readiness(status_of(**status))
    assert state.ready is ready and state.waiting_on() == waiting


def entry(i: int) -> AppliedRevision:
    return AppliedRevision(stack="s", stack_digest=f"sha256:{i}", applied_at="t", applied_by="u", lock={"i": i})


def test_the_record_keeps_the_newest_entries_and_their_locks() -> None:
    record: tuple[AppliedRevision, ...] = ()
    for i in range(MAX_ENTRIES + 5):
        record = with_entry(record, entry(i))
    assert len(record) == MAX_ENTRIES and record[-1].stack_digest == f"sha256:{MAX_ENTRIES + 4}"
    assert [e.lock is not None for e in record].count(True) == MAX_LOCKS and record[-1].lock == {"i": MAX_ENTRIES + 4}


def test_a_parent_that_is_not_an_applyset_or_has_a_wrong_id_is_refused() -> None:
    with pytest.raises(ClusterError, match="exists but is no ApplySet parent"):
        read_parent({"metadata": {"name": "stackpin-d"}}, "d", "ns")
    wrong = {"metadata": {"annotations": {"applyset.kubernetes.io/tooling": "stackpin/v0.1.0"},
                          "labels": {"applyset.kubernetes.io/id": "applyset-x-v1"}}}
    with pytest.raises(ClusterError, match="has applyset.kubernetes.io/id='applyset-x-v1'"):
        read_parent(wrong, "d", "ns")
    broken = {"metadata": {"annotations": {"applyset.kubernetes.io/tooling": "stackpin/v0.1.0"},
                           "labels": {"applyset.kubernetes.io/id": applyset_id("stackpin-d", "ns")}},
              "data": {"revisions.json": "{not json"}}
    with pytest.raises(ClusterError, match="revisions.json is not a stackpin record"):
        read_parent(broken, "d", "ns")


def test_the_record_is_read_and_written_back_byte_for_byte() -> None:
    """An older or newer stackpin reads the same revisions.json: camelCase keys, sorted, no revision or
    lock key when unset, a newer stackpin's keys dropped, null inside a lock kept."""
    text = ('[{"appliedAt":"t1","appliedBy":"u","objects":["configmap/a"],"stack":"s","stackDigest":"sha256:1",'
            '"newerKey":{"x":1}},{"appliedAt":"t2","appliedBy":"v","lock":{"a":null,"b":[1]},"objects":[],'
            '"revision":3,"stack":"s","stackDigest":"sha256:2"}]')
    live = {"metadata": {"annotations": {"applyset.kubernetes.io/tooling": TOOLING},
                         "labels": {"applyset.kubernetes.io/id": applyset_id("stackpin-d", "ns")}},
            "data": {"revisions.json": text}}
    parent = read_parent(live, "d", "ns")
    assert parent.record[1] == AppliedRevision(revision=3, stack="s", stack_digest="sha256:2", applied_at="t2",
                                               applied_by="v", objects=(), lock={"a": None, "b": [1]})
    written = parent_object(parent, "d", ["ConfigMap"], parent.record, pin_version=False)["data"]["revisions.json"]
    assert written == text.replace(',"newerKey":{"x":1}', "")
    for bad in ('{"stack":"s"}', '[{"stack":"s"}]', '[{"stack":"s","stackDigest":1,"appliedAt":"t","appliedBy":"u"}]'):
        with pytest.raises(ClusterError, match="revisions.json is not a stackpin record"):
            read_parent({**live, "data": {"revisions.json": bad}}, "d", "ns")


def test_status_imports_neither_the_renderer_nor_pydantic_of_its_own() -> None:
    """`stackpin status` reads labels and the record; rendering is apply's (objects.py spells render's
    label prefix for that)."""
    from stackpin.deploy.objects import LABEL_PREFIX
    from stackpin.render.build import LABEL_PREFIX as RENDERED

    assert LABEL_PREFIX == RENDERED
    code = "import sys, stackpin.deploy.status; print(sorted(m for m in sys.modules if 'stackpin.render' in m))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


# --- the CLI, no server needed ---------------------------------------------------------------------

def invoke(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stderr.splitlines()


def test_cluster_commands_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    lock = str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")
    missing = str(tmp_path / "nope")
    assert invoke("apply", lock, "--allow-stand-ins", "--kubeconfig", missing) == (
        2, [f"error: kubeconfig {missing}: no such file"])
    config = tmp_path / "config"
    config.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "a",
                                  "clusters": [{"name": "a", "cluster": {"server": "https://127.0.0.1:1"}}],
                                  "users": [{"name": "a", "user": {"token": "t"}}],
                                  "contexts": [{"name": "a", "context": {"cluster": "a", "user": "a"}}]}))
    assert invoke("status", "d", "--kubeconfig", str(config), "--context", "b") == (
        2, [f"error: kubeconfig {config}: no context 'b' (contexts: a)"])
    empty = tmp_path / "history"
    assert invoke("apply", "dsv41-flash@3", "--history", str(empty), "--kubeconfig", str(config)) == (
        2, [f"error: no history of deployment dsv41-flash in {empty}/; no deployment has one yet (stackpin promote "
            "LOCK -m MESSAGE records the first revision)"])
    assert invoke("apply", "dsv41-flash@gb300-nvl72@9", "--kubeconfig", str(config)) == (
        2, ["error: revision 9 of dynamo/dsv41-flash@gb300-nvl72 is out of range: it has revisions 1 to 3"])
    assert invoke("apply", str(ROOT / "lockfiles"), "--kubeconfig", str(config)) == (
        2, [f"error: {ROOT / 'lockfiles'}: holds {len(list((ROOT / 'lockfiles').glob('*.lock.yaml')))} stacks; "
            "apply one lockfile at a time"])


def test_cluster_commands_help_does_not_load_the_cluster_client() -> None:
    for command in ("apply", "status"):
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "stackpin", command, "--help"],
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0 and "--kubeconfig" in result.stdout and "--context" in result.stdout
        loaded = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if "|" in line}
        assert not {m for m in loaded if m.split(".")[0] in ("kubernetes", "lightkube", "httpx2", "msgspec")}, command


# --- where the test API server comes from (devkit/envtest.py) -------------------------------------

def test_the_server_binary_is_looked_for_in_order_and_the_reason_given(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import devkit.envtest as envtest

    monkeypatch.setattr(envtest, "SHARED_SERVER", tmp_path / "absent.gz")
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("STACKPIN_ENVTEST_BIN", str(tmp_path / "nowhere"))
    with pytest.raises(envtest.EnvtestUnavailable) as caught:
        envtest.find_apiserver()
    assert str(caught.value) == (
        f"no kube-apiserver binary: looked at STACKPIN_ENVTEST_BIN={tmp_path / 'nowhere'} (no kube-apiserver there); "
        "KUBEBUILDER_ASSETS (unset); ../shared/envtest/kube-apiserver.gz beside the repository (absent)")
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "kube-apiserver").write_bytes(b"")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    assert envtest.find_apiserver() == assets / "kube-apiserver"
    monkeypatch.setenv("STACKPIN_ENVTEST_BIN", str(assets))  # a directory holding it, or the file itself
    assert envtest.find_apiserver() == assets / "kube-apiserver"


def test_a_shared_server_with_the_wrong_checksum_is_not_unpacked(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    import devkit.envtest as envtest

    fake = tmp_path / "kube-apiserver.gz"
    fake.write_bytes(gzip.compress(b"#!/bin/sh\necho not the server\n"))
    monkeypatch.setattr(envtest, "SHARED_SERVER", fake)
    monkeypatch.setattr(envtest, "UNPACKED", tmp_path / "bin" / "kube-apiserver")
    monkeypatch.delenv("STACKPIN_ENVTEST_BIN", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    with pytest.raises(envtest.EnvtestUnavailable, match="not the published 62a2cf99"):
        envtest.find_apiserver()
    assert list((tmp_path / "bin").iterdir()) == []
