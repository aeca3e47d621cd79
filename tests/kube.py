"""Pytest fixtures for the cluster tests: one real kube-apiserver + etcd for the whole run
(devkit/envtest.py: token auth, RBAC on, the bundled CRDs with the DynamoGraphDeployment CRD stored as
v1beta1), and a namespace of its own for each test.

Where no server binary is found the cluster tests skip and say why. With STACKPIN_REQUIRE_ENVTEST=1
(`.ci/run` sets it when ../shared/envtest/kube-apiserver.gz exists) they fail instead, so CI cannot
pass by skipping them.

There is no Dynamo operator and no controller manager. Where a test needs what they do, the test
does it itself, the way they would, and says so:

- `operator_status` writes a DynamoGraphDeployment's `status` through the status subresource, as
  the Dynamo operator reports readiness;
- `garbage_collector` removes the `foregroundDeletion` finalizer from objects being deleted in the
  foreground, as kube-controller-manager's garbage collector does once their dependents are gone
  (these objects have none: no operator made pods).
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from devkit.envtest import Envtest, EnvtestUnavailable, GarbageCollector, start_envtest
from devkit.fleetbed import FleetBed, add_rack_nodes, fleet_bed, ready_status  # noqa: F401 (the cluster tests import them from here)
from stackpin.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "lockfiles"
DGD = "/apis/nvidia.com/v1beta1"
CD = "/apis/resource.nvidia.com/v1beta1"
_counter = itertools.count(1)


@pytest.fixture(scope="session")
def envtest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Envtest]:
    starting = start_envtest(tmp_path_factory.mktemp("envtest"))
    reason = None
    try:
        env = starting.__enter__()
    except EnvtestUnavailable as exc:
        reason = str(exc)
    if reason is not None:
        no_cluster(reason)
    try:
        add_rack_nodes(env)
        yield env
    finally:
        starting.__exit__(None, None, None)


def no_cluster(reason: object) -> None:
    """A cluster test without an API server: skipped, saying why, or failed where CI requires one."""
    if os.environ.get("STACKPIN_REQUIRE_ENVTEST") == "1":
        pytest.fail(f"cluster tests cannot run (STACKPIN_REQUIRE_ENVTEST=1): {reason}", pytrace=False)
    pytest.skip(f"no Kubernetes API server for the cluster tests: {reason}")


@contextmanager
def fleet_or_skip(factory: pytest.TempPathFactory, racks: Sequence[str]) -> Iterator[FleetBed]:
    """One API server per rack (devkit/fleetbed.py), or the test skipped as no_cluster says."""
    try:
        with fleet_bed([factory.mktemp(f"envtest-{rack}") for rack in racks]) as bed:
            yield bed
    except EnvtestUnavailable as exc:
        no_cluster(exc)


def dead_kubeconfig(directory: Path) -> tuple[Path, int]:
    """A token kubeconfig whose server is a closed loopback port (no API server at all), and the port."""
    import json

    from devkit.process import free_port

    config, port = directory / "kubeconfig", free_port()
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token-0123456789"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return config, port


def lockfile(stack: str) -> str:
    return str(LOCKS / f"{stack}.lock.yaml")


def with_stand_ins(args: Sequence[str]) -> list[str]:
    """`args` with --allow-stand-ins where they write a cluster (apply, rollback --apply): every lock the tests
    apply is the demo mirror's, whose stand-in pins stackpin refuses to send to a cluster without it
    (tests/test_stand_ins.py holds the refusal)."""
    writes = bool(args) and (args[0] == "apply" or (args[0] == "rollback" and "--apply" in args))
    return [*args, "--allow-stand-ins"] if writes and "--allow-stand-ins" not in args else list(args)


def attestation(stack: str) -> str:
    """`configmap/<name>` of the runtime-attestation ConfigMap a shipped stack renders (named by what it
    holds, so two stacks with the same engines, cache and GPU share it); apply applies it first."""
    from stackpin.lock.lockfile import read_lock
    from stackpin.render.build import build_objects

    [cm] = [o for o in build_objects(read_lock(Path(lockfile(stack)))) if o["kind"] == "ConfigMap"]
    return f"configmap/{cm['metadata']['name']}"


@dataclass
class Kube:
    """One test's namespace on the shared server, and ways to act on it."""

    env: Envtest
    namespace: str
    kubeconfig: Path
    runs: list[Result] = field(default_factory=list)

    def stackpin(self, *args: str, kubeconfig: Path | None = None, namespace: bool = True,
                 stand_ins: bool = True) -> Result:
        """`stackpin ARGS --kubeconfig K -n NS`, in process; no credential may reach its output. A command that
        writes the cluster gets --allow-stand-ins unless `stand_ins` is False (see `with_stand_ins`)."""
        extra = ["--kubeconfig", str(kubeconfig or self.kubeconfig)] + (["-n", self.namespace] if namespace else [])
        result = CliRunner().invoke(main, [*(with_stand_ins(args) if stand_ins else args), *extra])
        self.runs.append(result)
        text = result.stdout + result.stderr
        leaked = [user for user, token in self.env.tokens.items() if token in text]
        assert not leaked, f"the token of {leaked} appears in the output"
        assert "Traceback" not in text, text
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    def apply(self, stack: str, *flags: str) -> Result:
        return self.stackpin("apply", lockfile(stack), *flags)

    def path(self, base: str, plural: str, name: str = "") -> str:
        return f"{base}/namespaces/{self.namespace}/{plural}" + (f"/{name}" if name else "")

    def dgd(self, name: str = "dsv41-flash") -> dict[str, Any] | None:
        status, data = self.env.request("GET", self.path(DGD, "dynamographdeployments", name))
        return data if status == 200 else None

    def compute_domain(self, name: str = "dsv41-flash-compute-domain") -> dict[str, Any] | None:
        status, data = self.env.request("GET", self.path(CD, "computedomains", name))
        return data if status == 200 else None

    def parent(self, deployment: str = "dsv41-flash") -> dict[str, Any] | None:
        status, data = self.env.request("GET", f"/api/v1/namespaces/{self.namespace}/configmaps/stackpin-{deployment}")
        return data if status == 200 else None

    def everything(self) -> dict[str, str]:
        """Every DynamoGraphDeployment, ComputeDomain and ConfigMap in the namespace: subject -> resourceVersion."""
        out = {}
        for base, plural in ((DGD, "dynamographdeployments"), (CD, "computedomains"), ("/api/v1", "configmaps")):
            for item in self.env.ok("GET", self.path(base, plural))["items"]:
                out[f"{plural}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
        return {k: v for k, v in out.items() if k != "configmaps/kube-root-ca.crt"}

    def operator_status(self, status: dict[str, Any], name: str = "dsv41-flash") -> None:
        """Write `status` as the Dynamo operator would (the status subresource, its own field manager)."""
        self.env.ok("PATCH", self.path(DGD, "dynamographdeployments", name) + "/status?fieldManager=dynamo-operator",
                    {"status": status}, content_type="application/merge-patch+json")

    def kubectl(self, *args: str, check: bool = True) -> Any:
        return self.env.kubectl(*args, "-n", self.namespace, check=check)


@pytest.fixture
def kube(envtest: Envtest, request: pytest.FixtureRequest) -> Kube:
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")
    namespace = f"t{next(_counter)}-{slug}"[:63].rstrip("-")
    envtest.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # Namespaces are left behind: deleting one needs the namespace controller, which envtest does not run.
    return Kube(envtest, namespace, envtest.kubeconfig)


@contextmanager
def garbage_collector(kube: Kube) -> Iterator[list[tuple[int, str, str, str]]]:
    """Stand in for kube-controller-manager's garbage collector in `kube`'s namespace (see the module
    docstring and devkit.envtest.GarbageCollector), and record every event of DynamoGraphDeployments and
    ComputeDomains there as (resourceVersion, type, kind, name). Sorted by resourceVersion they are in
    the order the server made the changes: this server's resourceVersions are etcd revisions, one
    counter for all writes (opaque to clients in general; a test of this server may compare them)."""
    collector = GarbageCollector(kube.env, kube.namespace).start()
    try:
        yield collector.events
    finally:
        time.sleep(0.5)  # let the last events of the run arrive (loopback: milliseconds)
        collector.stop()
    assert not collector.errors, collector.errors
