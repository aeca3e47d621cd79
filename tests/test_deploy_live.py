"""The live side of a deployment against a real kube-apiserver (tests/kube.py): `stackpin diff
DEPLOYMENT@live B` (what applying B would change: server-side dry run, semantic and per-object diff),
`stackpin rollback DEPLOYMENT --apply` (history written only once the cluster holds the revision) and
`stackpin history DEPLOYMENT --cluster` (the in-cluster record, the live entry marked)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers import ROOT
from tests.kube import Kube, attestation, dead_kubeconfig, garbage_collector, lockfile

CD_SUBJECT = "computedomain.resource.nvidia.com/dsv41-flash-compute-domain"
DGD_SUBJECT = "dynamographdeployment.nvidia.com/dsv41-flash"
GB300 = "dsv41-flash@gb300-nvl72"
LIVE = "dsv41-flash@live"


def live_diff(kube: Kube, b: str, *args: str) -> tuple[int, dict]:
    result = kube.stackpin("diff", LIVE, b, "-o", "json", *args)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def actions(data: dict) -> list[tuple[str, str]]:
    return [(o["object"], o["action"]) for o in data["objects"]]


def the(data: dict, subject: str) -> dict:
    [found] = [o for o in data["objects"] if o["object"] == subject]
    return found


# --- diff DEPLOYMENT@live B ------------------------------------------------------------------------


def test_diff_live_against_what_is_applied_is_no_change_and_writes_nothing(kube: Kube) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    before = kube.everything()
    code, data = live_diff(kube, lockfile("gb300-disagg-wide-ep"))
    assert code == 0
    assert actions(data) == [(attestation("gb300-disagg-wide-ep"), "unchanged"), (CD_SUBJECT, "unchanged"),
                             (DGD_SUBJECT, "unchanged")]
    assert all(o["diff"] == "" and o["conflicts"] == [] for o in data["objects"])
    assert data["changed"] is False and data["stackDiff"]["equal"] is True
    assert data["live"]["stack"] == "gb300-disagg-wide-ep" and data["live"]["appliedBy"] == "admin"
    text = kube.stackpin("diff", LIVE, lockfile("gb300-disagg-wide-ep"))
    assert text.exit_code == 0, text.output
    assert "objects 0 configured, 0 created, 0 recreated, 0 pruned, 3 unchanged (server dry run)" in text.stdout
    assert text.stdout.splitlines()[-1].endswith("no changes: applying it changes nothing")
    assert kube.everything() == before  # dry runs only


def test_diff_live_shows_a_restart_class_change_as_the_server_would_make_it(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    before = kube.everything()
    code, data = live_diff(kube, lockfile("vera-rubin-tuned"))
    assert code == 1 and data["changed"] is True
    assert data["stackDiff"]["impact"] == "restart" and "worker" in data["stackDiff"]["restarts"]
    # The runtime-attestation ConfigMap is named by what it holds: another GPU, another ConfigMap.
    assert actions(data) == [(attestation("vera-rubin-tuned"), "created"), (DGD_SUBJECT, "configured"),
                             (attestation("gb300-tuned"), "pruned")]
    obj = the(data, DGD_SUBJECT)
    diff = obj["diff"].splitlines()
    assert diff[:2] == [f"--- live/{DGD_SUBJECT}", f"+++ dry-run/{DGD_SUBJECT}"]
    assert any(line.startswith("-") and "NVIDIA-GB300" in line for line in diff[2:])
    assert any(line.startswith("+") and "NVIDIA-Rubin" in line for line in diff[2:])
    # The noise of every write is left out; the stack digest annotation is a real change.
    for noise in ("managedFields", "resourceVersion", "generation:", "uid:", "creationTimestamp"):
        assert noise not in obj["diff"], noise
    assert any(line.startswith("+") and "stackpin.dev/stack-digest" in line for line in diff)
    assert kube.everything() == before


def test_diff_live_shows_the_prune_and_the_recreate_of_a_switch_to_colocated(kube: Kube) -> None:
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    code, data = live_diff(kube, lockfile("gb300-tuned"))
    assert code == 1
    assert actions(data) == [(attestation("gb300-tuned"), "created"), (DGD_SUBJECT, "recreated"),
                             (attestation("gb300-disagg-wide-ep"), "pruned"), (CD_SUBJECT, "pruned")]
    assert data["stackDiff"]["impact"] == "recreate"
    recreated, pruned = the(data, DGD_SUBJECT), the(data, CD_SUBJECT)
    assert "components frontend, prefill, decode -> frontend, worker" in recreated["note"]
    assert recreated["diff"].splitlines()[:2] == [f"--- live/{DGD_SUBJECT}", f"+++ rendered/{DGD_SUBJECT}"]
    lines = pruned["diff"].splitlines()
    assert lines[:2] == [f"--- live/{CD_SUBJECT}", "+++ /dev/null"]
    assert all(line.startswith(("-", "@@")) for line in lines[2:]) and "-kind: ComputeDomain" in lines
    text = kube.stackpin("diff", LIVE, lockfile("gb300-tuned"))
    assert text.exit_code == 1
    assert f"pruned {CD_SUBJECT}" in text.stdout and f"recreated {DGD_SUBJECT}" in text.stdout
    assert "rollout recreate" in text.stdout


def test_diff_live_shows_a_new_computedomain_created(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0  # colocated on one tray: no ComputeDomain
    code, data = live_diff(kube, lockfile("gb300-disagg-wide-ep"))
    assert code == 1
    assert actions(data) == [(attestation("gb300-disagg-wide-ep"), "created"), (CD_SUBJECT, "created"),
                             (DGD_SUBJECT, "recreated"), (attestation("gb300-tuned"), "pruned")]
    lines = the(data, CD_SUBJECT)["diff"].splitlines()
    assert lines[:2] == ["--- /dev/null", f"+++ dry-run/{CD_SUBJECT}"]
    assert "+kind: ComputeDomain" in lines and f"+  namespace: {kube.namespace}" in lines
    assert kube.compute_domain() is None


def test_diff_live_names_conflicts_apply_would_stop_on(kube: Kube) -> None:
    assert kube.apply("gb300-tuned").exit_code == 0
    patch = '[{"op":"replace","path":"/spec/components/1/replicas","value":12}]'
    kube.kubectl("patch", "dgd", "dsv41-flash", "--type=json", "-p", patch, "--field-manager=sre-oncall")
    code, data = live_diff(kube, lockfile("gb300-tuned"))
    assert code == 1  # applying with --force-conflicts would take the replicas back
    obj = the(data, DGD_SUBJECT)
    assert obj["conflicts"] == [{"manager": "sre-oncall", "field": '.spec.components[name="worker"].replicas'}]
    assert "-  - name: worker" not in obj["diff"] and "+    replicas: 18" in obj["diff"]


def test_diff_live_errors_are_one_line(kube: Kube, tmp_path: Path) -> None:
    nothing = kube.stackpin("diff", LIVE, lockfile("gb300-tuned"))
    assert nothing.exit_code == 2
    assert nothing.stderr.splitlines() == [
        f"error: nothing live for deployment dsv41-flash in namespace {kube.namespace} (no stackpin record "
        "configmap/stackpin-dsv41-flash): nothing to diff against (hint: apply it first, or name its namespace "
        "with -n)"]
    other = kube.stackpin("diff", "no-such-deployment@live", lockfile("gb300-tuned"))
    assert other.exit_code == 2
    [line] = other.stderr.splitlines()
    assert line.startswith(f"error: {lockfile('gb300-tuned')} deploys dsv41-flash, not no-such-deployment")
    missing = kube.stackpin("diff", LIVE, str(tmp_path / "nope.lock.yaml"))
    assert missing.exit_code == 2 and len(missing.stderr.splitlines()) == 1


# --- rollback --apply --------------------------------------------------------------------------------


def history_copy(tmp_path: Path) -> tuple[Path, Path]:
    """The committed demo history (1 gb300-launch, 2 gb300-tuned, 3 rollback to 1) and its
    deployment directory, copied: rollback writes to them."""
    history, deployments = tmp_path / "history", tmp_path / "deployments"
    shutil.copytree(ROOT / "history", history)
    shutil.copytree(ROOT / "deployments", deployments)
    return history, deployments


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_rollback_apply_refuses_a_recreate_writing_nothing_then_records_and_applies(kube: Kube, tmp_path: Path) -> None:
    history, deployments = history_copy(tmp_path)
    dirs = ("--history", str(history), "--deployments", str(deployments))
    assert kube.stackpin("apply", GB300, "--history", str(history)).exit_code == 0  # revision 3: gb300-launch
    before, files = kube.everything(), tree(tmp_path)

    refused = kube.stackpin("rollback", GB300, "--to", "2", "--apply", *dirs)
    assert refused.exit_code == 1
    [line] = refused.stderr.splitlines()
    assert f"error: {DGD_SUBJECT} in namespace {kube.namespace} needs delete and recreate" in line
    assert "--allow-recreate" in line
    assert kube.everything() == before and tree(tmp_path) == files  # neither cluster nor history changed

    dry = kube.stackpin("rollback", GB300, "--to", "2", "--apply", "--allow-recreate", "--dry-run", *dirs)
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines()[-1] == (f"dry run: revision 4 of dynamo/{GB300} (roll back to revision 2) would be "
                                           "recorded; nothing written")
    assert kube.everything() == before and tree(tmp_path) == files

    with garbage_collector(kube):  # stands in for the controller that finishes a foreground deletion
        done = kube.stackpin("rollback", GB300, "--to", "2", "--apply", "--allow-recreate", "--timeout", "60",
                             "-o", "json", *dirs)
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["history"]["revision"] == 4 and data["history"]["recorded"] is True
    assert data["history"]["action"] == {"kind": "rollback", "revision": 2}
    assert data["apply"]["revision"] == 4 and data["apply"]["stack"] == "gb300-tuned"
    # The launch stack's ComputeDomain (disaggregated across trays) goes with it: the tuned stack has none.
    assert actions(data["apply"]) == [(attestation("gb300-tuned"), "created"), (DGD_SUBJECT, "recreated"),
                                      (attestation("gb300-launch"), "pruned"), (CD_SUBJECT, "pruned")]
    assert (history / "dynamo" / GB300 / "000004.yaml").is_file()
    dgd = kube.dgd()
    assert dgd is not None and dgd["metadata"]["annotations"]["stackpin.dev/revision"] == "4"
    entries = json.loads(kube.parent()["data"]["revisions.json"])  # type: ignore[index]
    assert [(e["stack"], e.get("revision")) for e in entries] == [("gb300-launch", 3), ("gb300-tuned", 4)]
    assert "# Revision 4 of deployment" in (deployments / "dynamo" / GB300 / "kustomization.yaml").read_text()


def test_a_failed_rollback_apply_leaves_the_history_as_it_was_and_a_re_run_converges(kube: Kube,
                                                                                    tmp_path: Path) -> None:
    """The recreate's old object is never gone (no garbage collector runs): the write phase fails after
    the check passed, and the revision written for it is taken back."""
    history, deployments = history_copy(tmp_path)
    dirs = ("--history", str(history), "--deployments", str(deployments))
    assert kube.stackpin("apply", GB300, "--history", str(history)).exit_code == 0
    files = tree(tmp_path)
    failed = kube.stackpin("rollback", GB300, "--to", "2", "--apply", "--allow-recreate", "--timeout", "1", *dirs)
    assert failed.exit_code == 1
    warning, first, second = failed.stderr.splitlines()
    assert warning == (f"warning: {DGD_SUBJECT}: the new object cannot be dry-run while the old one exists; only "
                       "its deletion was")
    assert first.startswith(f"error: timed out after 1s waiting for {DGD_SUBJECT}")
    assert second == (f"error: history unchanged: revision 4 of dynamo/{GB300} (roll back to revision 2) was taken "
                      "back because the apply did not complete; the cluster may hold part of it: run the same "
                      "stackpin rollback --apply again, it converges")
    assert tree(tmp_path) == files
    stuck = kube.dgd()
    assert stuck is not None and stuck["metadata"]["deletionTimestamp"]  # the cluster holds part of it
    # The garbage collector catches up: it removes the finalizer of the foreground deletion.
    kube.env.ok("PATCH", kube.path("/apis/nvidia.com/v1beta1", "dynamographdeployments", "dsv41-flash"),
                {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
    again = kube.stackpin("rollback", GB300, "--to", "2", "--apply", "--timeout", "60", *dirs)
    assert again.exit_code == 0, again.output
    assert f"{DGD_SUBJECT} created" in again.stdout and "revision 4" in again.stdout
    assert sorted(p.name for p in (history / "dynamo" / GB300).glob("0*.yaml"))[-1] == "000004.yaml"


def test_apply_flags_need_apply_and_an_unknown_deployment_is_one_line(tmp_path: Path) -> None:
    from stackpin.cli.main import main

    history, deployments = history_copy(tmp_path)
    result = CliRunner().invoke(main, ["rollback", GB300, "--allow-recreate", "--history", str(history),
                                       "--deployments", str(deployments)])
    assert result.exit_code == 2 and "--allow-recreate only with --apply" in result.stderr
    assert not (history / "dynamo" / GB300 / "000004.yaml").exists()
    unknown = CliRunner().invoke(main, ["rollback", "no-such-deployment", "--apply", "--history", str(history),
                                        "--deployments", str(deployments)])
    assert unknown.exit_code == 2
    [line] = unknown.stderr.splitlines()
    assert line.startswith("error: ") and "no-such-deployment" in line


# --- history --cluster -------------------------------------------------------------------------------


def test_history_cluster_lists_the_applied_revisions_and_marks_the_live_one(kube: Kube, tmp_path: Path) -> None:
    history, _ = history_copy(tmp_path)
    assert kube.stackpin("apply", f"{GB300}@1", "--history", str(history)).exit_code == 0
    with garbage_collector(kube):
        assert kube.stackpin("apply", f"{GB300}@2", "--history", str(history), "--allow-recreate",
                             "--timeout", "60").exit_code == 0
    assert kube.apply("vera-rubin-tuned").exit_code == 0
    assert kube.apply("gb300-tuned").exit_code == 0  # from a lockfile: the same stack as revision 2, no revision
    # From anywhere: no local history is read (an empty directory as --history changes nothing).
    result = kube.stackpin("history", "dsv41-flash", "--cluster", "--history", str(tmp_path / "empty"), "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = [(r["stack"], r["revision"], r["live"]) for r in data["revisions"]]
    assert rows == [("gb300-launch", 1, False), ("gb300-tuned", 2, False), ("vera-rubin-tuned", None, False),
                    ("gb300-tuned", None, True)]
    assert all(r["appliedBy"] == "admin" and r["appliedAt"].endswith("Z") for r in data["revisions"])
    assert data["problems"] == []
    text = kube.stackpin("history", "dsv41-flash", "--cluster")
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0] == (f"deployment {kube.namespace}/dsv41-flash: 4 applied revision(s) in "
                        "configmap/stackpin-dsv41-flash")
    assert lines[1].split() == ["LIVE", "REVISION", "STACK", "DIGEST", "APPLIED", "BY"]
    assert lines[-1].startswith("*") and " gb300-tuned " in lines[-1]
    assert not any(line.startswith("*") for line in lines[2:-1])


@pytest.mark.parametrize("name", ["dsv41-flash", "dsv41-flash@gb300-nvl72"])
def test_history_cluster_errors_are_one_line(kube: Kube, name: str) -> None:
    result = kube.stackpin("history", name, "--cluster")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    if "@" in name:
        assert "--cluster takes the deployment's name (metadata.deployment" in line
    else:
        assert line.startswith(f"error: no stackpin deployment dsv41-flash in namespace {kube.namespace}")


def test_an_unreachable_server_is_one_line_for_the_live_commands(tmp_path: Path) -> None:
    from stackpin.cli.main import main

    history, deployments = history_copy(tmp_path)
    config, port = dead_kubeconfig(tmp_path)
    files = tree(tmp_path)
    for args in (["diff", LIVE, lockfile("gb300-tuned")], ["history", "dsv41-flash", "--cluster"],
                 ["rollback", GB300, "--apply", "--history", str(history), "--deployments", str(deployments)]):
        result = CliRunner().invoke(main, [*args, "--kubeconfig", str(config)])
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == [
            f"error: could not reach the API server https://127.0.0.1:{port}: connection refused (it never "
            "answered; nothing was read or written)"]
        assert "not-a-real-token" not in result.output
    assert tree(tmp_path) == files
