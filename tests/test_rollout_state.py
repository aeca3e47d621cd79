"""The rollout's record and runner claim without a cluster (issue 37's reproductions): ids and the ACTIVE
file never make a path outside rollouts/, a bad ACTIVE is one line in every command, a resume over an
edited fleet file is refused before anything is written, the runner claim is a lock a dead process does
not hold, and `rollout status` says a rollout whose runner died is interrupted, not running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.errors import StackpinError
from stackpin.rollout.record import Refused, RolloutStore, State, Step
from tests.kube import lockfile

COMMANDS = ("status", "resume", "abort", "pause")


def cli(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output + result.stderr, result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def write_fleet(path: Path, racks: list[str], canary: str | None = None, batch: int = 1) -> Path:
    spec = {"racks": [{"name": r, "platform": "gb300-nvl72", "kubeconfig": "nowhere.yaml"} for r in racks],
            "waves": {"batchSize": batch, **({"canary": canary} if canary else {})}}
    path.write_text(yaml.safe_dump({"apiVersion": "stackpin.dev/v1alpha1", "kind": "Fleet",
                                    "metadata": {"name": "west"}, "spec": spec}), encoding="utf-8")
    return path


@pytest.fixture
def started(tmp_path: Path) -> tuple[Path, RolloutStore, str]:
    """A history with revision 1, a three-rack fleet file and the record of a rollout of it whose runner died
    (state running, racks pending; the fleet's ACTIVE file names it)."""
    from stackpin.deploy.source import resolve_source
    from stackpin.history.store import HistoryStore
    from stackpin.rollout.engine import new_record
    from stackpin.rollout.fleet import load_fleet

    done = cli("promote", lockfile("gb300-tuned"), "-m", "tuned", "--history", str(tmp_path / "history"),
               "--deployments", str(tmp_path / "deployments"))
    assert done.exit_code == 0, done.output
    [key] = HistoryStore(tmp_path / "history").keys()
    fleet = write_fleet(tmp_path / "fleet.yaml", ["rack-a", "rack-b", "rack-c"])
    source = resolve_source(f"{key}@1", Path("lockfiles"), tmp_path / "history")
    store = RolloutStore(tmp_path / "rollouts", "west")
    record = new_record(load_fleet(fleet), source, store.acquire(), allow_stand_ins=True)
    store.write(record)
    return tmp_path, store, record.id


def dirs(root: Path) -> list[str]:
    return ["--rollouts", str(root / "rollouts"), "--history", str(root / "history")]


@pytest.mark.parametrize("content", [b"\xff\xfe\x00bad\n", b"../../x\n", b"/var/tmp/evil\n", b"1\n", b"0000001\n"])
@pytest.mark.parametrize("command", COMMANDS)
def test_an_active_file_not_holding_an_id_is_one_line_exit_2_in_every_command(
        tmp_path: Path, command: str, content: bytes) -> None:
    active = tmp_path / "rollouts" / "west" / "ACTIVE"
    active.parent.mkdir(parents=True)
    active.write_bytes(content)
    extra = ["--history", str(tmp_path / "history")] if command == "resume" else []
    result = cli("rollout", command, "west", "--rollouts", str(tmp_path / "rollouts"), *extra)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {active}: ")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ACTIVE", "rollouts", "west"]  # nothing written


def test_start_with_a_bad_active_file_is_one_line_exit_2(started: tuple[Path, RolloutStore, str]) -> None:
    root, store, _ = started
    (store.directory / "ACTIVE").write_bytes(b"\xff\n")
    result = cli("rollout", "start", str(root / "fleet.yaml"),
                 f"{yaml.safe_load(store.path('000001').read_text())['deployment']}@1", *dirs(root),
                 "--allow-stand-ins")
    assert (result.exit_code, result.stderr) == (2, f"error: {store.directory / 'ACTIVE'}: not UTF-8 text: it "
                                                    "should hold a rollout id (six digits)\n")
    assert sorted(p.name for p in store.directory.iterdir()) == ["000001.yaml", "ACTIVE"]


def test_a_record_id_or_fleet_name_that_is_a_path_never_becomes_one(started: tuple[Path, RolloutStore, str],
                                                                    ) -> None:
    root, store, rollout_id = started
    data = yaml.safe_load(store.path(rollout_id).read_text(encoding="utf-8"))
    for bad in ("../../x", "/var/tmp/stackpin-evil-x", "1"):
        store.path(rollout_id).write_text(yaml.safe_dump({**data, "id": bad}), encoding="utf-8")
        for command in ("resume", "abort"):
            result = cli("rollout", command, "west", *dirs(root))
            assert result.exit_code == 2, result.output
            [line] = result.stderr.splitlines()
            assert line.startswith(f"error: {store.path(rollout_id)}:"), line
            assert line.endswith(": id: must match the pattern ^[0-9]{6}$"), line
    assert not list(root.rglob("x.yaml")) and not Path("/var/tmp/stackpin-evil-x.yaml").exists()
    with pytest.raises(StackpinError, match="not a rollout id"):
        store.path("../x")
    for name in ("../x", "/tmp", "West"):
        result = cli("rollout", "status", name, "--rollouts", str(root / "rollouts"))
        assert result.exit_code == 2 and result.stderr.startswith(f"error: fleet {name!r}: not a fleet name")


@pytest.mark.parametrize(("racks", "canary", "batch", "what"), [
    (["rack-b", "rack-a", "rack-c"], None, 1, "the canary is rack-b, the rollout's is rack-a"),
    (["rack-a", "rack-b", "rack-c", "rack-z"], "rack-z", 1, "rack rack-z added"),
    (["rack-a", "rack-b"], None, 1, "rack rack-c removed"),
    (["rack-a", "rack-b", "rack-c"], None, 2, "rack rack-c is in wave 2, the rollout's wave 3"),
    (["rack-a", "rack-c", "rack-b"], None, 1, "rack rack-b is in wave 3, the rollout's wave 2"),
])
@pytest.mark.parametrize("state", [State.running, State.paused])
def test_resume_refuses_a_fleet_file_whose_racks_or_waves_changed(
        started: tuple[Path, RolloutStore, str], racks: list[str], canary: str | None, batch: int, what: str,
        state: State) -> None:
    root, store, rollout_id = started
    store.write(store.read(rollout_id).with_state(state, "why"))
    before = store.path(rollout_id).read_bytes()
    fleet = write_fleet(root / "fleet.yaml", racks, canary, batch)
    result = cli("rollout", "resume", str(fleet), *dirs(root))
    assert (result.exit_code, result.stderr) == (
        2, f"error: {fleet}: its racks and waves are not rollout {rollout_id}'s ({what}): resume with the fleet file "
           f"it started with ({fleet}), or abort it\n")
    assert store.path(rollout_id).read_bytes() == before  # not left (or made) running by the refusal
    assert not store.runner_alive()


def test_the_runner_claim_is_a_lock_one_holder_and_gone_with_its_process(tmp_path: Path) -> None:
    store = RolloutStore(tmp_path / "rollouts", "west")
    with store.claim("rollout 000001"):
        assert store.runner_alive()
        with pytest.raises(Refused, match=r"its runner \(\S+:\d+ rollout 000001\) still runs"):
            store.claim("rollout 000001")
    assert not store.runner_alive()
    # a process holding it and killed with SIGKILL: the kernel drops the lock, the claim is free
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom stackpin.rollout.record import "
         f"RolloutStore\nc = RolloutStore(Path({str(tmp_path / 'rollouts')!r}), 'west').claim('x')\n"
         "print('held', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert store.runner_alive()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    finally:
        holder.kill()
        holder.wait()
    assert not store.runner_alive()
    store.claim("rollout 000002").release()


def test_status_says_interrupted_when_the_runner_died_and_what_resume_would_do(
        started: tuple[Path, RolloutStore, str]) -> None:
    root, store, rollout_id = started
    record = store.read(rollout_id)
    store.write(record.with_rack("rack-a", step=Step.done).with_rack("rack-b", step=Step.applying))
    shown = cli("rollout", "status", "west", "--rollouts", str(root / "rollouts"))
    assert shown.exit_code == 0
    first, *rest = shown.stdout.splitlines()
    assert "  interrupted  " in first and " running" not in first
    assert rest[-1] == ("runner: " + record.runner if record.runner else "runner: its process") + \
        " is gone (killed or crashed); `stackpin rollout resume west`: it would carry on at rack rack-b (step " \
        "applying: applied again unless its status is in sync on the revision)"
    as_json = yaml.safe_load(cli("rollout", "status", "west", "--rollouts", str(root / "rollouts"),
                                 "-o", "json").stdout)
    assert (as_json["state"], as_json["recordState"], as_json["runnerAlive"]) == ("interrupted", "running", False)
    with store.claim(f"rollout {rollout_id}"):  # while a runner holds the claim: running
        shown = cli("rollout", "status", "west", "--rollouts", str(root / "rollouts"))
        assert "  running (runner " in shown.stdout.splitlines()[0]
        assert "is gone" not in shown.stdout
