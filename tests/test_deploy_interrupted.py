"""The API server killed (SIGKILL, as a crash would) in the middle of an apply: the apply fails with
one line, and once the server is back a re-run converges with nothing orphaned.

The kill happens at a step the apply reports through its `progress` callback (the one the CLI prints
on a terminal), so the point of interruption is exact, not a race."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devkit.envtest import Envtest
from stackpin.deploy.apply import ApplyOptions, apply_stack
from stackpin.deploy.kube import Unreachable, connect
from stackpin.deploy.source import resolve_source
from tests.kube import LOCKS, Kube, attestation, dead_kubeconfig, garbage_collector, lockfile

CD_SUBJECT = "computedomain.resource.nvidia.com/dsv41-flash-compute-domain"
DGD_SUBJECT = "dynamographdeployment.nvidia.com/dsv41-flash"


@pytest.fixture
def server_back(envtest: Envtest) -> object:
    """Whatever a test does to the server, it is running again afterwards for the tests after it."""
    yield None
    if envtest.apiserver is None:
        envtest.start_apiserver()


def apply_killed_after(kube: Kube, stack: str, step: str, **options: object) -> Unreachable:
    """Run the library apply and SIGKILL the API server right after the progress line `step`."""
    source = resolve_source(lockfile(stack), LOCKS)
    cluster = connect(str(kube.kubeconfig), None)

    def progress(message: str) -> None:
        if message == step:
            kube.env.kill_apiserver()

    chosen = ApplyOptions(namespace=kube.namespace, allow_stand_ins=True, **options)  # type: ignore[arg-type]
    with pytest.raises(Unreachable) as caught:
        apply_stack(cluster, source, chosen, progress=progress)
    return caught.value


def members_and_strays(kube: Kube) -> tuple[dict[str, str], list[str]]:
    """Every DynamoGraphDeployment and ComputeDomain in the namespace; the ones that are not a member
    of the deployment's ApplySet or not in its record are strays (orphans)."""
    parent = kube.parent()
    assert parent is not None
    set_id = parent["metadata"]["labels"]["applyset.kubernetes.io/id"]
    recorded = json.loads(parent["data"]["revisions.json"])[-1]["objects"]
    found, strays = {}, []
    for path, subject in (("/apis/nvidia.com/v1beta1", "dynamographdeployment.nvidia.com"),
                          ("/apis/resource.nvidia.com/v1beta1", "computedomain.resource.nvidia.com")):
        plural = subject.split(".")[0] + "s"
        for item in kube.env.ok("GET", f"{path}/namespaces/{kube.namespace}/{plural}")["items"]:
            name = f"{subject}/{item['metadata']['name']}"
            found[name] = item["metadata"]["annotations"]["stackpin.dev/stack-digest"]
            if item["metadata"]["labels"].get("applyset.kubernetes.io/part-of") != set_id or name not in recorded:
                strays.append(name)
    return found, strays


@pytest.mark.usefixtures("server_back")
def test_killed_between_the_computedomain_and_its_deployment(kube: Kube) -> None:
    error = apply_killed_after(kube, "gb300-disagg-wide-ep", f"{CD_SUBJECT} created")
    # Where it stopped: the parent, the attestation ConfigMap and the ComputeDomain written, of 5.
    assert error.lines() == [f"lost the API server {kube.env.url} during PATCH of {DGD_SUBJECT}: connection refused;"
                             f" the apply stopped after 3 of its 5 writes (the last: {CD_SUBJECT} created) (hint: "
                             "run it again once the server answers: it converges)"]

    down = kube.apply("gb300-disagg-wide-ep")  # the CLI, while the server is still down: never reached
    assert down.exit_code == 2
    assert down.stderr.splitlines() == [f"error: could not reach the API server {kube.env.url}: connection refused "
                                        "(it never answered; nothing was read or written)"]

    kube.env.start_apiserver()
    # The killed run could not release its Lease (the server was gone): the re-run waits for it to expire.
    again = kube.apply("gb300-disagg-wide-ep", "--lock-timeout", "40")
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[:3] == [f"{attestation('gb300-disagg-wide-ep')} unchanged",
                                             f"{CD_SUBJECT} unchanged", f"{DGD_SUBJECT} created"]
    found, strays = members_and_strays(kube)
    assert sorted(found) == [CD_SUBJECT, DGD_SUBJECT] and strays == []


@pytest.mark.usefixtures("server_back")
def test_killed_before_the_prune_of_a_switch_to_colocated(kube: Kube) -> None:
    """The new DynamoGraphDeployment is in, the old ComputeDomain (and attestation ConfigMap) not yet
    pruned: the parent still lists their kinds (the superset written first), so the re-run finds and
    prunes them."""
    assert kube.apply("gb300-disagg-wide-ep").exit_code == 0
    with garbage_collector(kube):
        error = apply_killed_after(kube, "gb300-tuned", f"{DGD_SUBJECT} recreated", allow_recreate=True)
    # The first prune is the old stack's attestation ConfigMap (no pod of the recreated deployment names it).
    old_cm = attestation("gb300-disagg-wide-ep")
    assert error.lines() == [f"lost the API server {kube.env.url} during DELETE of {old_cm}: connection refused; "
                             f"the apply stopped after 4 of its 7 writes (the last: {DGD_SUBJECT} recreated) "
                             "(hint: run it again once the server answers: it converges)"]
    kube.env.start_apiserver()
    # No recreate left to do (the live DGD is already colocated); the killed run's Lease expires first.
    again = kube.apply("gb300-tuned", "--lock-timeout", "40")
    assert again.exit_code == 0, again.output
    lines = again.stdout.splitlines()
    assert lines[:2] == [f"{attestation('gb300-tuned')} unchanged", f"{DGD_SUBJECT} unchanged"]
    assert sorted(lines[2:4]) == sorted([f"{CD_SUBJECT} pruned", f"{old_cm} pruned"])
    found, strays = members_and_strays(kube)
    assert list(found) == [DGD_SUBJECT] and strays == []
    record = json.loads(kube.parent()["data"]["revisions.json"])  # type: ignore[index]
    assert [e["stack"] for e in record] == ["gb300-disagg-wide-ep", "gb300-tuned"]


def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    """No server at all (a closed loopback port): one line, exit 2, whatever the command."""
    from click.testing import CliRunner

    from stackpin.cli.main import main

    config, port = dead_kubeconfig(tmp_path)
    for args in (["apply", lockfile("gb300-tuned"), "--allow-stand-ins"], ["status", "dsv41-flash"]):
        result = CliRunner().invoke(main, [*args, "--kubeconfig", str(config)])
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == [
            f"error: could not reach the API server https://127.0.0.1:{port}: connection refused (it never answered; "
            "nothing was read or written)"]
        assert "not-a-real-token" not in result.output
