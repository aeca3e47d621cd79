"""The rollout under kill -9, on the fleet bed's real API servers (devkit/fleetbed.py, two racks): the
invariants of docs/rollout.md's state machine checked after every kill and every resume.

- a rack marked done is in sync per `stackpin status` (exit 0);
- the record names only racks of the fleet it started with;
- the record is never shown running without a live runner (`rollout status` says interrupted);
- resumed to the end, every rack runs the revision, in sync, with one record entry for it and no stale
  ComputeDomain (the launch stack has one, the tuned stack none: a launch -> tuned change recreates the
  DynamoGraphDeployment and prunes the ComputeDomain).

The kills come from the engine's test seam (stackpin.rollout.engine.FAULT_ENV): the rollout CLI, run as a
subprocess, SIGKILLs itself at a chosen fault point (a record write, a write of an apply). A killed apply
leaves its Lease until it expires (30 s, waited out by resume: tests/test_rollout.py's kill test); here
the test deletes it after each kill, standing in for that wait, to keep the run short.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit.envtest import Envtest
from devkit.fleetbed import FleetBed
from stackpin.cli.main import main
from stackpin.rollout.engine import FAULT_ENV
from tests.kube import CD, DGD, ROOT, fleet_or_skip, lockfile

RACKS = ("rack-a", "rack-b")
_ns = itertools.count(1)
KILLED = -9


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetBed]:
    with fleet_or_skip(tmp_path_factory, RACKS) as servers:
        yield servers


def cli(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output + result.stderr, result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@dataclasses.dataclass
class Site:
    path: Path
    bed: FleetBed
    namespace: str
    deployment: str

    @property
    def fleet(self) -> Path:
        return self.path / "fleet.yaml"

    def dirs(self) -> list[str]:
        return ["--rollouts", str(self.path / "rollouts"), "--history", str(self.path / "history"),
                "--lockdir", str(ROOT / "lockfiles")]

    def spawn(self, command: str, fault: str | None = None) -> subprocess.Popen[str]:
        args = [str(self.fleet), f"{self.deployment}@2", "--allow-recreate", "--allow-stand-ins"] \
            if command == "start" else [str(self.fleet)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop(FAULT_ENV, None)
        if fault is not None:
            env[FAULT_ENV] = fault
        return subprocess.Popen([sys.executable, "-m", "stackpin", "rollout", command, *args, *self.dirs()],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def run(self, command: str, fault: str | None = None) -> tuple[int, str]:
        proc = self.spawn(command, fault)
        out, _ = proc.communicate(timeout=240)
        return proc.returncode, out

    def record(self) -> dict[str, Any]:
        data = yaml.safe_load((self.path / "rollouts" / "west" / "000001.yaml").read_text(encoding="utf-8"))
        assert isinstance(data, dict)
        return data

    def status(self, env: Envtest) -> Result:
        return cli("status", "dsv41-flash", "-n", self.namespace, "--kubeconfig", str(env.kubeconfig),
                   "--lockdir", str(ROOT / "lockfiles"))

    def applied(self, env: Envtest) -> list[int]:
        parent = env.ok("GET", f"/api/v1/namespaces/{self.namespace}/configmaps/stackpin-dsv41-flash")
        return [e["revision"] for e in json.loads(parent["data"]["revisions.json"])]

    def compute_domains(self, env: Envtest) -> list[str]:
        items = env.ok("GET", f"{CD}/namespaces/{self.namespace}/computedomains")["items"]
        return [i["metadata"]["name"] for i in items]

    def drop_leases(self) -> None:
        """Stand in for waiting out the Lease a killed apply left (it expires unrenewed in 30 s)."""
        for env in self.bed.envs:
            env.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/"
                        "stackpin-dsv41-flash")

    def check_invariants(self) -> dict[str, Any]:
        """After a kill or a resume, with no runner left: what docs/rollout.md says always holds."""
        record = self.record()
        assert {r["name"] for r in record["racks"]} <= set(RACKS), record["racks"]
        shown = json.loads(cli("rollout", "status", "west", "--rollouts", str(self.path / "rollouts"),
                               "-o", "json").stdout)
        assert shown["runnerAlive"] is False and shown["state"] != "running", shown
        if record["state"] == "running":
            assert shown["state"] == "interrupted"
        for entry, env in zip(record["racks"], self.bed.envs, strict=True):
            if entry["step"] == "done":
                status = self.status(env)
                assert status.exit_code == 0, (entry, status.output)
        return record

    def check_final(self) -> None:
        record = self.check_invariants()
        assert record["state"] == "succeeded", record
        assert [r["step"] for r in record["racks"]] == ["done", "done"]
        for env in self.bed.envs:
            assert self.status(env).exit_code == 0
            dgd = env.ok("GET", f"{DGD}/namespaces/{self.namespace}/dynamographdeployments/dsv41-flash")
            assert dgd["metadata"]["annotations"]["stackpin.dev/stack-digest"] == record["stackDigest"]
            assert self.applied(env) == [1, 2]  # revision 2 recorded once, whatever the kills
            assert self.compute_domains(env) == []  # the launch stack's ComputeDomain pruned


@pytest.fixture
def site(bed: FleetBed, tmp_path: Path) -> Site:
    namespace = f"rf{next(_ns)}"
    for env in bed.envs:
        env.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": namespace}})
    history = str(tmp_path / "history")
    for stack in ("gb300-launch", "gb300-tuned"):
        done = cli("promote", lockfile(stack), "-m", stack, "--history", history, "--deployments",
                   str(tmp_path / "deployments"))
        assert done.exit_code == 0, done.output
    from stackpin.history.store import HistoryStore

    [key] = HistoryStore(Path(history)).keys()
    site = Site(tmp_path, bed, namespace, str(key))
    for env in bed.envs:
        done = cli("apply", f"{key}@1", "--history", history, "--kubeconfig", str(env.kubeconfig), "-n", namespace,
                   "--allow-stand-ins")
        assert done.exit_code == 0, done.output + done.stderr
        assert site.compute_domains(env) == ["dsv41-flash-compute-domain"]
    racks = [{"name": r, "kubeconfig": str(env.kubeconfig), "platform": "gb300-nvl72", "namespace": namespace}
             for r, env in zip(RACKS, bed.envs, strict=True)]
    site.fleet.write_text(yaml.safe_dump({
        "apiVersion": "stackpin.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "west"},
        "spec": {"racks": racks, "waves": {"canary": "rack-a", "batchSize": 1},
                 "gates": {"ready": {"timeoutSeconds": 60}, "soakSeconds": 0}}}), encoding="utf-8")
    return site


def test_resume_after_a_kill_between_the_new_dgd_and_the_prune_applies_the_rack_again(site: Site) -> None:
    """Issue 37: the killed apply had created the new DynamoGraphDeployment but neither pruned the old objects
    nor written its record entry; resume skipped the rack ("already runs"), said succeeded, and `stackpin
    status` on it exited 1 with the old ComputeDomain still there."""
    a = site.bed.envs[0]
    rc, out = site.run("start", fault="after:dsv41-flash recreated")
    assert rc == KILLED, out
    site.drop_leases()
    killed = site.check_invariants()
    assert killed["racks"][0]["step"] == "applying"
    dgd = a.ok("GET", f"{DGD}/namespaces/{site.namespace}/dynamographdeployments/dsv41-flash")
    assert dgd["metadata"]["annotations"]["stackpin.dev/stack-digest"] == killed["stackDigest"]  # the new DGD
    assert site.compute_domains(a) == ["dsv41-flash-compute-domain"] and site.applied(a) == [1]  # not pruned
    assert site.status(a).exit_code == 1
    rc, out = site.run("resume")
    assert rc == 0, out
    assert "rack-a: already runs" not in out
    site.check_final()


def test_kill_9_at_fault_points_through_a_recorded_run_then_resume_keeps_the_invariants(site: Site) -> None:
    """A chain of runners, each SIGKILLed at a fault point chosen (seeded) among its next few, until one
    finishes: the invariants after each kill, the final state at the end."""
    rng = random.Random(37)
    kills: list[int] = []
    command = "start"
    for _ in range(30):
        point = rng.randint(2, 7)  # the first is the runner's own record write
        rc, out = site.run(command, fault=str(point))
        command = "resume"
        if rc == 0:
            break
        assert rc == KILLED, out
        kills.append(point)
        site.drop_leases()
        site.check_invariants()
    else:
        pytest.fail(f"no runner finished after {len(kills)} kills")
    assert len(kills) >= 4, kills  # killed at enough points to mean something
    site.check_final()


def test_two_resumes_at_once_one_drives_the_other_is_refused_in_one_line(site: Site) -> None:
    a = site.bed.envs[0]
    rc, out = site.run("start", fault="3")  # killed once rack-a is marked applying, before its apply
    assert rc == KILLED, out
    site.drop_leases()
    site.bed.operator.held.add((a.port, site.namespace))  # the driver waits on rack-a's readiness
    try:
        procs = [site.spawn("resume"), site.spawn("resume")]
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        refused = next(p for p in procs if p.poll() is not None)
        assert refused.stdout is not None
        line = refused.stdout.read()
        assert refused.returncode == 1, line
        assert line.startswith("error: fleet west: its runner (") and " rollout 000001) still runs: one runner " \
            "per fleet" in line and len(line.splitlines()) == 1, line
        shown = json.loads(cli("rollout", "status", "west", "--rollouts", str(site.path / "rollouts"),
                               "-o", "json").stdout)
        assert (shown["state"], shown["runnerAlive"]) == ("running", True)
    finally:
        site.bed.operator.held.clear()
    [driver] = [p for p in procs if p is not refused]
    out, _ = driver.communicate(timeout=240)
    assert driver.returncode == 0, out
    site.check_final()
