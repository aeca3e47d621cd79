"""History under real processes: two writers at once lose and duplicate nothing, and a writer killed
(os._exit, as kill -9 leaves it: no cleanup, no finally) at either step leaves a readable history that
the next writer continues."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.history.listing import check_deployments, list_history
from stackpin.history.model import DeploymentKey
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import read_lock
from stackpin.yamlio import create_exclusive
from tests.helpers import ROOT

LAUNCH, TUNED = (ROOT / "lockfiles" / f"{n}.lock.yaml" for n in ("gb300-launch", "gb300-tuned"))
GB300 = DeploymentKey(namespace="dynamo", name="dsv41-flash", platform="gb300-nvl72")
ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600", "STACKPIN_AUTHOR": "test <test@example.org>"}
PROMOTES = 50

# A writer process: promotes LOCK N times as TAG, after waiting for GO (so both start together).
WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from stackpin.history.record import promote
    from stackpin.history.store import HistoryStore
    from stackpin.lock.lockfile import read_lock
    lock_path, tag, count, tmp = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    lock, store = read_lock(Path(lock_path)), HistoryStore(tmp / "history")
    (tmp / f"ready-{tag}").touch()
    while not (tmp / "go").exists():
        time.sleep(0.005)
    for i in range(count):
        promote(lock, f"{tag} {i}", store, tmp / "deployments", allow_same=True)  # interleaved, often the same
""")


def _start(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_processes_promoting_at_once_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    writers = [_start(WRITER, str(lock), tag, str(PROMOTES), str(tmp_path))
               for lock, tag in ((LAUNCH, "launch"), (TUNED, "tuned"))]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{tag}").exists() for tag in ("launch", "tuned")):
        assert time.monotonic() < deadline and all(w.poll() is None for w in writers), [
            w.communicate() for w in writers if w.poll() is not None]
        time.sleep(0.01)
    (tmp_path / "go").touch()
    for writer in writers:
        _, err = writer.communicate(timeout=600)
        assert writer.returncode == 0, err
    store = HistoryStore(tmp_path / "history")
    entries = list_history(store, GB300)  # verifies every file and the chain
    assert [e.revision.revision for e in entries] == list(range(1, 2 * PROMOTES + 1))
    messages = [e.revision.message for e in entries]
    assert sorted(messages) == sorted(f"{tag} {i}" for tag in ("launch", "tuned") for i in range(PROMOTES))
    for tag in ("launch", "tuned"):  # each writer's revisions in the order it made them
        assert [m for m in messages if m.startswith(tag)] == [f"{tag} {i}" for i in range(PROMOTES)]
    interleaved = sum(1 for a, b in zip(messages, messages[1:], strict=False) if a.split()[0] != b.split()[0])
    assert interleaved >= 1, "the writers never overlapped: the test did not test concurrency"
    [check] = check_deployments(store, tmp_path / "deployments", [GB300])
    assert check.current, check.drift  # the directory holds the newest revision, not one a loser wrote late
    assert sorted(p.name for p in store.directory(GB300).iterdir()) == [
        *(f"{n:06d}.yaml" for n in range(1, 101)), "HEAD"]
    assert (store.directory(GB300) / "HEAD").read_text().startswith("100 sha256:")


# A writer killed at one step of a promote: `os.link` (the staged revision is complete and fsynced, the
# name not yet taken) or the deployment write (the revision recorded, the directory not yet switched).
KILLED = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    import stackpin.history.record as record
    from stackpin.history.store import HistoryStore
    from stackpin.lock.lockfile import read_lock
    lock_path, tmp, where = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    def die(*args, **kwargs):
        os._exit(9)
    if where == "link":
        os.link = die
    else:
        record.write_deployment = die
    record.promote(read_lock(lock_path), "killed", HistoryStore(tmp / "history"), tmp / "deployments")
""")


def _cli(tmp: Path, *args: str) -> tuple[int, str, str]:
    where = ["--history", str(tmp / "history"), "--deployments", str(tmp / "deployments")]
    result = CliRunner().invoke(main, [*args, *where])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def two_revisions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HistoryStore:
    for name in ("SOURCE_DATE_EPOCH", "STACKPIN_AUTHOR"):
        monkeypatch.setenv(name, ENV[name])
    assert _cli(tmp_path, "promote", str(LAUNCH), "-m", "one")[0] == 0
    assert _cli(tmp_path, "promote", str(TUNED), "-m", "two")[0] == 0
    return HistoryStore(tmp_path / "history")


def test_a_process_killed_between_write_and_rename_leaves_history_readable(tmp_path: Path,
                                                                           two_revisions: HistoryStore) -> None:
    store = two_revisions
    directory = store.directory(GB300)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    proc = subprocess.run([sys.executable, "-c", KILLED, str(LAUNCH), str(tmp_path), "link"], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    [staged] = [p for p in directory.iterdir() if p.name not in before]
    assert staged.name.startswith(".000003.yaml.") and staged.name.endswith(".stackpin-tmp")
    assert "kind: StackRevision" in staged.read_text()  # complete, just never named
    code, out, err = _cli(tmp_path, "history", "dsv41-flash")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[2:] if not line.startswith("(stand-in)")] == ["1", "2"]
    assert _cli(tmp_path, "history", "--check")[0] == 0  # the directory still holds revision 2
    code, out, err = _cli(tmp_path, "promote", str(LAUNCH), "-m", "three")
    assert code == 0, err
    assert sorted(p.name for p in directory.iterdir()) == ["000001.yaml", "000002.yaml", "000003.yaml",
                                                           "HEAD"]  # swept
    assert [r.message for r in store.revisions(GB300)] == ["one", "two", "three"]


def test_a_process_killed_between_revision_and_deployment_is_caught_up(tmp_path: Path,
                                                                       two_revisions: HistoryStore) -> None:
    store = two_revisions
    proc = subprocess.run([sys.executable, "-c", KILLED, str(LAUNCH), str(tmp_path), "deployment"], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    assert [r.message for r in store.revisions(GB300)] == ["one", "two", "killed"]  # recorded: it is the record
    code, out, err = _cli(tmp_path, "history", "--check")
    directory = tmp_path / "deployments" / "dynamo" / "dsv41-flash@gb300-nvl72"
    assert code == 1
    assert out.splitlines()[0] == f"stale    {directory}/  (holds revision 2, newest is 3)"
    assert "run stackpin history --render" in err
    code, out, err = _cli(tmp_path, "history", "--render")
    assert code == 0, err
    assert _cli(tmp_path, "history", "--check")[0] == 0
    newest = store.newest(GB300)
    assert newest is not None and newest.lock == read_lock(LAUNCH)


def test_create_exclusive_never_replaces_a_file(tmp_path: Path) -> None:
    target = tmp_path / "000001.yaml"
    create_exclusive(target, "first\n")
    with pytest.raises(FileExistsError):
        create_exclusive(target, "second\n")
    assert target.read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.yaml"]  # no staged file left behind
