"""`stackpin rollout start|status|resume` against three real kube-apiservers (devkit/envtest.py), one per
rack: a revision in two waves, the canary's bench gate failing and rolled back, a kill -9 mid wave 2 and
resume, a second start refused, a rack whose API server is down.

There is no Dynamo operator and no controller manager: devkit/fleetbed.py's stand-ins do what the tests
need of them (the operator marking DynamoGraphDeployments ready, the garbage collector finishing
foreground deletions; a launch -> tuned change recreates the DynamoGraphDeployment).

The canary's endpoint is devkit.livesim's bed: it serves, on loopback, the simulator of whichever stack is
live on rack-a's API server, as the Dynamo operator and frontend would serve the applied
DynamoGraphDeployment on a real rack; the new stack's simulator is made slower (`--fault slow=4`), so the
real bench gate (stackpin.rollout.benchgate: bench runs, then bench compare) measures a regression.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit.envtest import Envtest
from devkit.fleetbed import FleetBed
from stackpin.cli.main import main
from tests.kube import DGD, ROOT, dead_kubeconfig, fleet_or_skip, lockfile

RACKS = ("rack-a", "rack-b", "rack-c")
_ns = itertools.count(1)


@pytest.fixture(scope="module")
def fleet_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetBed]:
    """Three API servers, each with the CRDs and rack nodes, the operator and garbage collector stand-ins."""
    with fleet_or_skip(tmp_path_factory, RACKS) as bed:
        yield bed


@dataclasses.dataclass
class Site:
    """One test's working directory: a history with revisions 1 and 2, a fleet file, a namespace per rack."""

    path: Path
    servers: FleetBed
    namespace: str
    deployment: str  # the history key, NAMESPACE/NAME@PLATFORM

    @property
    def fleet(self) -> Path:
        return self.path / "fleet.yaml"

    def write_fleet(self, *, kubeconfigs: dict[str, Path] | None = None, on_failure: str = "rollback",
                    bench: str | None = None, soak: float = 0.5) -> Path:
        """`bench`: the canary's endpoint, benched by the gate (None: no bench gate)."""
        racks = []
        for rack, env in zip(RACKS, self.servers.envs, strict=True):
            entry = {"name": rack, "kubeconfig": str((kubeconfigs or {}).get(rack, env.kubeconfig)),
                     "platform": "gb300-nvl72", "namespace": self.namespace}
            if rack == "rack-a":
                entry["endpoint"] = bench or "http://127.0.0.1:9"
            racks.append(entry)
        gates: dict[str, Any] = {"ready": {"timeoutSeconds": 60}, "soakSeconds": soak}
        if bench:
            from devkit.demorun import short_trace_text

            (self.path / "agents.jsonl").write_text(short_trace_text(), encoding="utf-8")
            # Short runs: one agent, answers back to back; the live bed serves a share of the rack.
            gates["bench"] = {"trace": "agents.jsonl", "runs": 2, "threshold": "5%", "lagLimit": "50ms"}
        self.fleet.write_text(yaml.safe_dump({
            "apiVersion": "stackpin.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "west"},
            "spec": {"racks": racks, "waves": {"canary": "rack-a", "batchSize": 2}, "gates": gates,
                     "onFailure": on_failure}}), encoding="utf-8")
        return self.fleet

    def dirs(self) -> list[str]:
        return ["--rollouts", str(self.path / "rollouts"), "--history", str(self.path / "history")]

    def cli(self, *args: str) -> Result:
        result = CliRunner().invoke(main, list(args))
        assert "Traceback" not in result.output + result.stderr, result.output + result.stderr
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    def rollout(self, command: str, *args: str) -> Result:
        extra = self.dirs() if command in ("start", "resume") else ["--rollouts", str(self.path / "rollouts")]
        if command == "start":  # the site's revisions are locked against the demo mirror: stand-ins
            extra.append("--allow-stand-ins")
        return self.cli("rollout", command, *args, *extra)

    def apply_everywhere(self, revision: int) -> None:
        for env in self.servers.envs:
            done = self.cli("apply", f"{self.deployment}@{revision}", "--history", str(self.path / "history"),
                            "--kubeconfig", str(env.kubeconfig), "-n", self.namespace, "--allow-recreate",
                            "--allow-stand-ins")
            assert done.exit_code == 0, done.output + done.stderr

    def record(self, rollout_id: str = "000001") -> dict[str, Any]:
        data = yaml.safe_load((self.path / "rollouts" / "west" / f"{rollout_id}.yaml").read_text(encoding="utf-8"))
        assert isinstance(data, dict)
        return data

    def applied(self, env: Envtest) -> list[dict[str, Any]]:
        """The rack's in-cluster record (the ApplySet parent's entries), oldest first."""
        parent = env.ok("GET", f"/api/v1/namespaces/{self.namespace}/configmaps/stackpin-dsv41-flash")
        return list(json.loads(parent["data"]["revisions.json"]))

    def dgd(self, env: Envtest) -> dict[str, Any]:
        return dict(env.ok("GET", f"{DGD}/namespaces/{self.namespace}/dynamographdeployments/dsv41-flash"))


@pytest.fixture
def site(fleet_servers: FleetBed, tmp_path: Path) -> Site:
    namespace = f"ro{next(_ns)}"
    for env in fleet_servers.envs:
        env.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": namespace}})
    history = str(tmp_path / "history")
    for stack in ("gb300-launch", "gb300-tuned"):
        done = CliRunner().invoke(main, ["promote", lockfile(stack), "-m", stack, "--history", history,
                                         "--deployments", str(tmp_path / "deployments")])
        assert done.exit_code == 0, done.output
    from stackpin.history.store import HistoryStore

    [key] = HistoryStore(Path(history)).keys()
    return Site(tmp_path, fleet_servers, namespace, str(key))


@contextmanager
def slow_canary(site: Site) -> Iterator[str]:
    """Rack-a's live endpoint: the stack live on its API server, revision 2's simulator four-fold slower: about
    2.8 times slower than revision 1 (the tuned stack is ~1.4x the launch one), a fall no busy host hides in
    the gate's two short runs (at two-fold, a loaded 2-core host once measured -0.9% +- 16%, inconclusive)."""
    from devkit.livesim import serve_live
    from stackpin.history.store import HistoryStore

    store = HistoryStore(site.path / "history")
    tuned = store.read(store.resolve(site.deployment), 2).lock.stack_digest
    with serve_live(site.servers.envs[0].kubeconfig, site.namespace, "dsv41-flash", site.path / "history",
                    {tuned: "slow=4"}, share=2) as url:
        yield url


def stacks_of(files: Sequence[str]) -> list[str]:
    from stackpin.bench.resultfile import read_result

    return [read_result(Path(f)).stack.name for f in files]


def test_a_good_revision_rolls_to_three_racks_in_two_waves(site: Site) -> None:
    site.apply_everywhere(1)
    site.write_fleet()
    done = site.rollout("start", str(site.fleet), f"{site.deployment}@2", "--allow-recreate")
    for _ in range(2):  # a gate a busy host left inconclusive pauses the rollout (never a pass): resume it
        if "bench gate inconclusive" not in done.stderr:
            break
        assert site.record()["state"] == "paused" and [r["applies"] for r in site.record()["racks"]] == [1, 0, 0]
        done = site.rollout("resume", str(site.fleet))
    assert done.exit_code == 0, done.output + done.stderr
    record = site.record()
    assert record["state"] == "succeeded"
    assert [(r["name"], r["wave"], r["step"], r["applies"], r["previousRevision"]) for r in record["racks"]] == [
        ("rack-a", 0, "done", 1, 1), ("rack-b", 1, "done", 1, 1), ("rack-c", 1, "done", 1, 1)]
    for env in site.servers.envs:  # every rack's in-cluster record shows revision 2 live
        assert [e["revision"] for e in site.applied(env)] == [1, 2]
        assert site.dgd(env)["metadata"]["annotations"]["stackpin.dev/stack-digest"] == record["stackDigest"]
    assert not (site.path / "rollouts" / "west" / "ACTIVE").exists()  # the fleet is free again
    assert "wave 2: rack-b, rack-c" in done.stderr
    status = site.rollout("status", "west")
    assert status.exit_code == 0
    assert status.stdout.splitlines()[1].split() == ["RACK", "WAVE", "LIVE", "STEP", "APPLIES", "GATE"]
    assert status.stdout.splitlines()[3].split()[:5] == ["rack-b", "2", "2", "done", "1"]
    as_json = json.loads(site.rollout("status", "west", "-o", "json").stdout)
    assert as_json["state"] == "succeeded" and as_json["revision"] == 2


def test_b_a_slower_canary_fails_its_bench_gate_stops_the_rollout_and_is_rolled_back(site: Site) -> None:
    site.apply_everywhere(1)
    with slow_canary(site) as url:
        site.write_fleet(bench=url)
        done = site.rollout("start", str(site.fleet), f"{site.deployment}@2", "--allow-recreate")
    assert done.exit_code == 1, done.output + done.stderr
    record = site.record()
    assert record["state"] == "stopped", record["racks"][0]["messages"]
    assert record["reason"].startswith("rack rack-a: bench gate fail: "), record["reason"]
    assert "(2 runs, simulated)" in record["reason"] and record["reason"].endswith("rolled back to revision 1")
    canary = record["racks"][0]
    assert canary["step"] == "rolled-back" and canary["applies"] == 2
    gate = canary["gate"]
    assert gate["verdict"] == "fail"
    # before on the rack's own previous stack, after on the new one, then again after the rollback
    assert stacks_of(gate["before"]) == ["gb300-launch"] * 2
    assert stacks_of(gate["after"]) == ["gb300-tuned"] * 2
    assert stacks_of(gate["afterRollback"]) == ["gb300-launch"] * 2
    a, b, c = site.servers.envs
    assert [e["revision"] for e in site.applied(a)] == [1, 2, 1]  # the canary runs revision 1 again
    for env in (b, c):  # the next wave never started
        assert [e["revision"] for e in site.applied(env)] == [1]
    assert [r["step"] for r in record["racks"][1:]] == ["pending", "pending"]
    assert not (site.path / "rollouts" / "west" / "ACTIVE").exists()
    assert "reason: rack rack-a: bench gate fail" in done.stdout


def test_b_with_on_failure_pause_a_failed_gate_pauses_rolling_nothing_back_until_abort_rollback(
        site: Site) -> None:
    site.apply_everywhere(1)
    with slow_canary(site) as url:
        site.write_fleet(bench=url, on_failure="pause")
        paused = site.rollout("start", str(site.fleet), f"{site.deployment}@2", "--allow-recreate")
        assert paused.exit_code == 1, paused.output + paused.stderr
        record = site.record()
        assert record["state"] == "paused"
        assert record["reason"].startswith("rack rack-a: bench gate fail: ")
        assert record["racks"][0]["step"] == "soaked" and record["racks"][0]["applies"] == 1
        a, b, _ = site.servers.envs
        assert [e["revision"] for e in site.applied(a)] == [1, 2]  # nothing rolled back
        assert [e["revision"] for e in site.applied(b)] == [1]
        aborted = site.cli("rollout", "abort", "west", "--rollback", *site.dirs())  # benched again after it
    assert aborted.exit_code == 0, aborted.output + aborted.stderr
    record = site.record()
    assert record["state"] == "aborted" and record["racks"][0]["step"] == "rolled-back"
    assert [e["revision"] for e in site.applied(a)] == [1, 2, 1]
    assert not (site.path / "rollouts" / "west" / "ACTIVE").exists()


def test_c_kill_9_in_wave_two_then_resume_applies_no_rack_twice(site: Site) -> None:
    site.apply_everywhere(1)
    site.write_fleet()
    a, b, c = site.servers.envs
    # Hold wave 2's racks not ready so the process is surely still in wave 2 when it is killed.
    site.servers.operator.held |= {(b.port, site.namespace), (c.port, site.namespace)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "stackpin", "rollout", "start", str(site.fleet),
                                 f"{site.deployment}@2", "--allow-recreate", "--allow-stand-ins", *site.dirs()],
                                cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        record_file = site.path / "rollouts" / "west" / "000001.yaml"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if record_file.is_file():
                steps = {r["name"]: r["step"] for r in site.record()["racks"]}
                if steps["rack-b"] in ("applying", "applied") or steps["rack-c"] in ("applying", "applied"):
                    break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[0].decode()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        site.servers.operator.held.clear()
    killed = site.record()
    assert killed["state"] == "running"  # as it was when killed
    assert killed["racks"][0]["step"] == "done"
    canary_version = site.dgd(a)["metadata"]["resourceVersion"]
    versions_before = {env.port: [e["revision"] for e in site.applied(env)] for env in (b, c)}

    done = site.rollout("resume", str(site.fleet))
    assert done.exit_code == 0, done.output + done.stderr
    record = site.record()
    assert record["state"] == "succeeded"
    assert site.dgd(a)["metadata"]["resourceVersion"] == canary_version  # the done canary was not touched
    for entry, env in zip(record["racks"], site.servers.envs, strict=True):
        assert entry["step"] == "done" and entry["applies"] <= 1, entry
        assert [e["revision"] for e in site.applied(env)] == [1, 2]  # one apply of revision 2 per rack
        managers = {m["manager"] for m in site.dgd(env)["metadata"]["managedFields"]}
        assert managers <= {"stackpin", "dynamo-operator"}
    # a rack the killed process had applied kept its one apply
    for env, name in ((b, "rack-b"), (c, "rack-c")):
        if versions_before[env.port] == [1, 2]:
            assert killed["racks"][RACKS.index(name)]["step"] in ("applying", "applied")


def test_d_a_second_start_is_refused_naming_the_first(site: Site, tmp_path: Path) -> None:
    dead, _ = dead_kubeconfig(tmp_path)
    site.write_fleet(kubeconfigs={"rack-a": dead})
    first = site.rollout("start", str(site.fleet), f"{site.deployment}@2")
    assert first.exit_code == 1
    assert site.record()["state"] == "paused"
    second = site.rollout("start", str(site.fleet), f"{site.deployment}@2")
    assert second.exit_code == 1
    [line] = second.stderr.splitlines()
    assert line.startswith("error: fleet west already has rollout 000001 (paused, ")
    assert not (site.path / "rollouts" / "west" / "000002.yaml").exists()
    assert site.rollout("pause", "west").exit_code == 1  # only a running rollout pauses
    aborted = site.rollout("abort", "west")
    assert aborted.exit_code == 0 and site.record()["state"] == "aborted"
    assert not (site.path / "rollouts" / "west" / "ACTIVE").exists()
    third = site.rollout("start", str(site.fleet), f"{site.deployment}@2")
    assert third.exit_code == 1 and site.record("000002")["state"] == "paused"  # a new rollout, a new record


def test_pause_stops_a_running_rollout_between_steps_and_resume_carries_on(site: Site,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import stackpin.cli.rollout_run as run

    site.apply_everywhere(1)
    site.write_fleet()
    heard: list[str] = []

    def note(message: str) -> None:  # a person runs `rollout pause` as wave 2 begins
        heard.append(message)
        if message.startswith("wave 2") and heard.count(message) == 1:
            assert site.rollout("pause", "west").exit_code == 0

    monkeypatch.setattr(run, "note", note)
    paused = site.rollout("start", str(site.fleet), f"{site.deployment}@2", "--allow-recreate")
    assert paused.exit_code == 1, paused.output + paused.stderr
    record = site.record()
    assert (record["state"], record["reason"]) == ("paused", "paused by rollout pause")
    assert [r["step"] for r in record["racks"]] == ["done", "pending", "pending"]
    assert [e["revision"] for e in site.applied(site.servers.envs[1])] == [1]
    done = site.rollout("resume", "west")
    assert done.exit_code == 0, done.output + done.stderr
    assert [(r["step"], r["applies"]) for r in site.record()["racks"]] == [("done", 1)] * 3


def test_e_a_rack_whose_api_server_is_down_pauses_the_rollout_with_nothing_half_applied(site: Site) -> None:
    site.apply_everywhere(1)
    site.write_fleet()
    a, b, c = site.servers.envs
    before_b = site.applied(b)
    spec_of = lambda env: {k: v for k, v in site.dgd(env)["metadata"].items() if k in ("generation", "annotations")}  # noqa: E731
    before_c, before_b_spec = spec_of(c), spec_of(b)
    b.kill_apiserver()
    try:
        paused = site.rollout("start", str(site.fleet), f"{site.deployment}@2", "--allow-recreate")
    finally:
        site.servers.restart(b)
    assert paused.exit_code == 1, paused.output + paused.stderr
    record = site.record()
    assert record["state"] == "paused"
    assert record["reason"].startswith("rack rack-b: its API server did not answer (")
    assert "\n" not in record["reason"]
    assert [r["step"] for r in record["racks"]] == ["done", "pending", "pending"]
    assert site.applied(b) == before_b and spec_of(b) == before_b_spec  # nothing written on the rack that was down
    assert spec_of(c) == before_c and [e["revision"] for e in site.applied(c)] == [1]  # nor the next
    assert (site.path / "rollouts" / "west" / "ACTIVE").read_text(encoding="utf-8").strip() == "000001"
    assert "reason: rack rack-b: its API server did not answer" in paused.stdout

    done = site.rollout("resume", "west")
    assert done.exit_code == 0, done.output + done.stderr
    assert [(r["step"], r["applies"]) for r in site.record()["racks"]] == [("done", 1)] * 3


def test_bad_input_is_one_line_exit_2_and_nothing_is_locked(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("apiVersion: stackpin.dev/v1alpha1\nkind: Fleet\nmetadata: {name: west}\nspec:\n"
                     "  racks: [{name: rack-a, platform: gb300-nvl72}]\n  waves: {canary: rack-z}\n", encoding="utf-8")
    rollouts = str(tmp_path / "rollouts")
    bad = CliRunner().invoke(main, ["rollout", "start", str(fleet), "dsv41-flash@1", "--rollouts", rollouts,
                                    "--history", str(tmp_path / "history")])
    assert bad.exit_code == 2, bad.output
    [line] = bad.stderr.splitlines()
    assert line.startswith(f"error: {fleet}:") and "rack-z" in line
    assert not (tmp_path / "rollouts").exists()
    for command in ("pause", "resume", "abort"):
        none = CliRunner().invoke(main, ["rollout", command, "west", "--rollouts", rollouts])
        assert (none.exit_code, none.stderr) == (1, f"error: fleet west has no active rollout in {rollouts}/west\n")
    empty = CliRunner().invoke(main, ["rollout", "status", "--rollouts", rollouts])
    assert (empty.exit_code, empty.stdout) == (0, f"no rollouts in {rollouts}\n")


def hold_runner_lock(directory: Path) -> subprocess.Popen[str]:
    """A process holding the fleet's runner claim (its flock on RUNNER), as a live runner does."""
    directory.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(directory / 'RUNNER')!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'elsewhere:1 rollout 000001'); print('held', flush=True)\n"
         "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def a_record(tmp_path: Path) -> tuple[Any, str]:
    from stackpin.rollout.record import RackRecord, Rollout, RolloutStore

    store = RolloutStore(tmp_path / "rollouts", "west")
    rollout_id = store.acquire()
    store.write(Rollout(id=rollout_id, fleet="west", fleet_file="fleet.yaml", deployment="dynamo/x@gb300-nvl72",
                        revision=2, stack_digest="sha256:0", runner="elsewhere:1",
                        started_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z",
                        racks=(RackRecord(name="rack-a", wave=0),)))
    return store, rollout_id


def test_resume_is_refused_while_the_process_running_the_rollout_lives(tmp_path: Path) -> None:
    store, rollout_id = a_record(tmp_path)
    holder = hold_runner_lock(store.directory)
    try:
        refused = CliRunner().invoke(main, ["rollout", "resume", "west", "--rollouts", str(tmp_path / "rollouts")])
    finally:
        holder.kill()
        holder.wait()
    assert refused.exit_code == 1
    assert refused.stderr == "error: fleet west: its runner (elsewhere:1 rollout 000001) still runs: one runner " \
        f"per fleet ({store.directory / 'RUNNER'}); wait for it to stop (rollout pause stops it after its current " \
        "step)\n"
    assert store.read(rollout_id).state == "running"  # nothing written


def test_a_paused_rollout_whose_process_still_finishes_its_step_is_not_resumed_or_rolled_back(
        tmp_path: Path) -> None:
    """`rollout pause` only marks the record: its process stops after the step it is in (a ready wait can
    last minutes). A second runner, or a rollback under it, must wait until it has stopped."""
    from stackpin.rollout.record import State

    store, rollout_id = a_record(tmp_path)
    store.write(store.read(rollout_id).with_state(State.paused, "paused"))
    rollouts = str(tmp_path / "rollouts")
    holder = hold_runner_lock(store.directory)
    try:
        resumed = CliRunner().invoke(main, ["rollout", "resume", "west", "--rollouts", rollouts])
        rolled = CliRunner().invoke(main, ["rollout", "abort", "west", "--rollback", "--rollouts", rollouts])
        shown = CliRunner().invoke(main, ["rollout", "status", "west", "--rollouts", rollouts])
    finally:
        holder.kill()
        holder.wait()
    assert resumed.exit_code == 1 and "its runner (elsewhere:1 rollout 000001) still runs" in resumed.stderr
    assert rolled.exit_code == 1 and "its runner (elsewhere:1 rollout 000001) still runs" in rolled.stderr
    assert "paused (its runner still finishes its step)" in shown.stdout.splitlines()[0]
    assert store.read(rollout_id).state == State.paused  # neither wrote anything
    assert (tmp_path / "rollouts" / "west" / "ACTIVE").is_file()
