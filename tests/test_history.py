"""`stackpin promote`, `history`, `rollback`: revisions recorded, listed, verified and rolled back, the
deployment directory rendered from the newest one, and every bad input one line with exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.diff.run import CHANGE_LINE, summarize_locks
from stackpin.history.deployed import deployment_dir, deployment_files
from stackpin.history.identity import author_of, created_at
from stackpin.history.listing import check_deployments, list_history
from stackpin.history.model import STAND_IN_NOTE, ActionKind, DeploymentKey, revision_text
from stackpin.history.record import promote, rollback
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import StackLock, read_lock, sha256
from stackpin.render.build import build_objects
from stackpin.render.output import render_stack
from tests.helpers import PROFILES_DIR, ROOT

LOCKS = ROOT / "lockfiles"
LAUNCH, TUNED, RUBIN = (LOCKS / f"{n}.lock.yaml" for n in ("gb300-launch", "gb300-tuned", "vera-rubin-tuned"))
GB300 = DeploymentKey(namespace="dynamo", name="dsv41-flash", platform="gb300-nvl72")
RUBIN_KEY = DeploymentKey(namespace="dynamo", name="dsv41-flash", platform="vera-rubin-nvl72")
ENV = {"SOURCE_DATE_EPOCH": "1767225600", "STACKPIN_AUTHOR": "Ada <ada@example.org>"}


@pytest.fixture(autouse=True)
def fixed_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def invoke(tmp: Path, *args: str) -> Result:
    where = ["--history", str(tmp / "history"), "--deployments", str(tmp / "deployments")]
    return CliRunner().invoke(main, [*args, *where])


def one_error(result: Result) -> str:
    """The command failed as bad input: exit 2, one line on stderr, no traceback."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def three_revisions(tmp: Path) -> None:
    """Launch promoted (1), tuned promoted (2), rolled back to 1 (3), through the command line."""
    assert invoke(tmp, "promote", str(LAUNCH), "-m", "Launch stack").exit_code == 0
    assert invoke(tmp, "promote", str(TUNED), "-m", "Tuned stack").exit_code == 0
    result = invoke(tmp, "rollback", "dsv41-flash", "--to", "1")
    assert result.exit_code == 0, result.output


# --- recording ---------------------------------------------------------------------------------------


def test_promote_twice_and_roll_back_records_three_revisions(tmp_path: Path) -> None:
    first = invoke(tmp_path, "promote", str(LAUNCH), "-m", "Launch stack")
    assert first.exit_code == 0, first.output
    path = tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" / "000001.yaml"
    launch = read_lock(LAUNCH)
    assert first.stdout.splitlines() == [
        f"recorded {path}  revision 1 of dynamo/dsv41-flash@gb300-nvl72: promote gb300-launch {launch.stack_digest}",
        # The DynamoGraphDeployment, its attestation ConfigMap and the kustomization.
        f"rendered {tmp_path / 'deployments' / 'dynamo' / 'dsv41-flash@gb300-nvl72'}/  (4 files)"]
    assert invoke(tmp_path, "promote", str(TUNED), "-m", "Tuned stack").exit_code == 0
    back = invoke(tmp_path, "rollback", "dsv41-flash", "-o", "json")
    assert back.exit_code == 0, back.output
    data = json.loads(back.stdout)
    assert (data["revision"], data["action"], data["stack"], data["message"]) == (
        3, {"kind": "rollback", "revision": 1}, "gb300-launch", "Roll back to revision 1")
    store = HistoryStore(tmp_path / "history")
    one, two, three = store.revisions(GB300)
    assert sorted(p.name for p in store.directory(GB300).iterdir()) == ["000001.yaml", "000002.yaml", "000003.yaml",
                                                                         "HEAD"]
    assert (store.directory(GB300) / "HEAD").read_text() == f"3 {three.revision_digest}\n"
    assert one.lock == three.lock == launch and two.lock == read_lock(TUNED)
    assert [r.action.kind for r in (one, two, three)] == [ActionKind.promote, ActionKind.promote, ActionKind.rollback]
    assert (three.previous_digest, two.previous_digest, one.previous_digest) == (
        two.revision_digest, one.revision_digest, None)
    assert (three.created, three.author) == ("2026-01-01T00:00:00Z", "Ada <ada@example.org>")


def test_a_revision_file_stands_alone_and_says_what_it_is(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    store = HistoryStore(tmp_path / "history")
    path = store.path(GB300, 3)
    text = path.read_text()
    assert text.startswith("# Revision 3 of deployment dynamo/dsv41-flash@gb300-nvl72, recorded by "
                           "`stackpin rollback`; never edited.\n")
    data = yaml.safe_load(text)
    assert list(data)[:8] == ["apiVersion", "kind", "deployment", "revision", "created", "author", "message", "action"]
    assert data["lock"] == yaml.safe_load(LAUNCH.read_text())  # the whole lock, as its lockfile holds it
    body = {k: v for k, v in data.items() if k != "revisionDigest"}
    assert data["revisionDigest"] == sha256(body)
    assert revision_text(store.read(GB300, 3)) == text  # reading and writing again gives the same bytes


def test_the_deployment_directory_holds_the_newest_revision_rendered(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    directory = tmp_path / "deployments" / "dynamo" / "dsv41-flash@gb300-nvl72"
    got = files(directory)
    shipped = files(ROOT / "manifests" / "gb300-launch")  # what `stackpin render` writes for the same lock
    assert sorted(got) == sorted(shipped)
    key = b"dynamo/dsv41-flash@gb300-nvl72"
    mark = b"# Revision 3 of deployment " + key + b" (`stackpin history " + key + b"`).\n"
    for name, text in got.items():
        first, rest = shipped[name].split(b"\n", 1)
        assert text == first + b"\n" + mark + rest, name
    check = invoke(tmp_path, "history", "--check")
    assert check.exit_code == 0, check.output
    assert check.stdout == f"current  {directory}/  (revision 3)\n"


def test_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    three_revisions(tmp_path / "a")
    three_revisions(tmp_path / "b")
    assert files(tmp_path / "a") == files(tmp_path / "b")
    # 3 revisions and the head; the DGD, the ComputeDomain (prefill and decode on different trays), the
    # attestation ConfigMap, the kustomization
    assert len(files(tmp_path / "a")) == 8


def test_a_rollback_can_be_rolled_back_and_never_rewrites_history(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    before = files(tmp_path / "history")
    assert invoke(tmp_path, "rollback", "dsv41-flash@gb300-nvl72").exit_code == 0  # to 2: the tuned stack
    after = files(tmp_path / "history")
    # Revisions are never rewritten; only the head moves on to the new newest.
    assert {k: v for k, v in after.items() if k in before and not k.endswith("HEAD")} == {
        k: v for k, v in before.items() if not k.endswith("HEAD")}
    four = HistoryStore(tmp_path / "history").read(GB300, 4)
    assert four.action.revision == 2 and four.lock == read_lock(TUNED)


def test_promote_takes_a_profile_with_a_current_lock(tmp_path: Path) -> None:
    result = invoke(tmp_path, "promote", str(PROFILES_DIR / "gb300-tuned.yaml"), "--lockdir", str(LOCKS), "-m", "x")
    assert result.exit_code == 0, result.output
    assert HistoryStore(tmp_path / "history").read(GB300, 1).lock == read_lock(TUNED)
    error = one_error(invoke(tmp_path, "promote", str(LOCKS), "-m", "x"))
    assert f"holds {len(list(LOCKS.glob('*.lock.yaml')))} stacks; promote one lock at a time" in error


def test_the_same_deployment_on_two_racks_has_two_histories(tmp_path: Path) -> None:
    assert invoke(tmp_path, "promote", str(TUNED), "-m", "GB300").exit_code == 0
    assert invoke(tmp_path, "promote", str(RUBIN), "-m", "Rubin").exit_code == 0
    store = HistoryStore(tmp_path / "history")
    assert store.keys() == [GB300, RUBIN_KEY]
    assert [r.message for r in store.revisions(RUBIN_KEY)] == ["Rubin"]  # revision 1 of its own history
    assert [r.message for r in store.revisions(GB300)] == ["GB300"]
    error = one_error(invoke(tmp_path, "history", "dsv41-flash"))
    assert error == (f"error: deployment dsv41-flash is ambiguous in {tmp_path / 'history'}/: it could be "
                     "dynamo/dsv41-flash@gb300-nvl72, dynamo/dsv41-flash@vera-rubin-nvl72; name one of them")
    for query in ("dsv41-flash@vera-rubin-nvl72", "dynamo/dsv41-flash@vera-rubin-nvl72"):
        assert store.resolve(query) == RUBIN_KEY
    listing = invoke(tmp_path, "history", "-o", "json")
    assert [d["deployment"] for d in json.loads(listing.stdout)["deployments"]] == [str(GB300), str(RUBIN_KEY)]


# --- listing -----------------------------------------------------------------------------------------


def test_history_lists_number_digest_when_who_message_and_change(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    result = invoke(tmp_path, "history", "dsv41-flash")
    assert result.exit_code == 0, result.output
    launch, tuned = read_lock(LAUNCH).short_digest, read_lock(TUNED).short_digest
    # The change column is the semantic diff's one line (stackpin diff) between neighbours.
    forward, back = summarize_locks(read_lock(LAUNCH), read_lock(TUNED)), summarize_locks(read_lock(TUNED),
                                                                                         read_lock(LAUNCH))
    assert forward.endswith("(recreate)") and back.endswith("(recreate)")
    lines = result.stdout.splitlines()
    directory = tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72"
    assert lines[0] == f"deployment dynamo/dsv41-flash@gb300-nvl72: 3 revision(s) in {directory}/"
    assert lines[1].split() == ["REVISION", "STACK", "CREATED", "AUTHOR", "ACTION", "MESSAGE", "CHANGE"]
    rows = [line.split("  ") for line in lines[2:-1]]
    # The shipped locks are the demo mirror's: every row is marked, and the last line says what that means.
    launch, tuned = f"{launch} (stand-in)", f"{tuned} (stand-in)"
    assert [[cell.strip() for cell in row if cell.strip()] for row in rows] == [
        ["1", launch, "2026-01-01T00:00:00Z", "Ada <ada@example.org>", "promote gb300-launch", "Launch stack",
         "(first revision)"],
        ["2", tuned, "2026-01-01T00:00:00Z", "Ada <ada@example.org>", "promote gb300-tuned", "Tuned stack", forward],
        ["3", launch, "2026-01-01T00:00:00Z", "Ada <ada@example.org>", "rollback to 1 (gb300-launch)",
         "Roll back to revision 1", back]]
    assert lines[-1] == STAND_IN_NOTE
    data = yaml.safe_load(invoke(tmp_path, "history", "dsv41-flash", "-o", "yaml").stdout)
    assert [(r["revision"], r["stackDigest"], r["change"]) for r in data["revisions"]] == [
        (1, read_lock(LAUNCH).stack_digest, None), (2, read_lock(TUNED).stack_digest, forward),
        (3, read_lock(LAUNCH).stack_digest, back)]
    assert data["revisions"][2]["file"] == str(tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" /
                                               "000003.yaml")


def test_the_change_column_comes_from_the_summarize_callable(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    seen: list[tuple[str, str]] = []

    def summarize(previous: StackLock, lock: StackLock) -> str:
        seen.append((previous.metadata.name, lock.metadata.name))
        return f"{previous.metadata.name} -> {lock.metadata.name}"

    entries = list_history(HistoryStore(tmp_path / "history"), GB300, summarize)
    assert [e.change for e in entries] == [None, "gb300-launch -> gb300-tuned", "gb300-tuned -> gb300-launch"]
    assert seen == [("gb300-launch", "gb300-tuned"), ("gb300-tuned", "gb300-launch")]
    assert [e.change for e in list_history(HistoryStore(tmp_path / "history"), GB300)] == [None, None, None]


def test_records_beside_revisions_are_not_revisions(tmp_path: Path) -> None:
    """Where apply and bench will attach their records: `NNNNNN.<kind>.yaml` is never read as a revision."""
    three_revisions(tmp_path)
    directory = tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72"
    (directory / "000002.bench.yaml").write_text("tokensPerSecond: 1000\n")
    (directory / "notes.md").write_text("a person's notes\n")
    assert [e.revision.revision for e in list_history(HistoryStore(tmp_path / "history"), GB300)] == [1, 2, 3]
    assert invoke(tmp_path, "promote", str(TUNED), "-m", "again").exit_code == 0
    assert (directory / "000004.yaml").is_file() and (directory / "notes.md").is_file()


def test_an_empty_history_lists_nothing(tmp_path: Path) -> None:
    result = invoke(tmp_path, "history")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no deployment has a history" in result.stderr
    assert json.loads(invoke(tmp_path, "history", "-o", "json").stdout)["deployments"] == []
    assert invoke(tmp_path, "history", "--check").exit_code == 0


# --- verification ------------------------------------------------------------------------------------


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _resign(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the document and recompute revisionDigest, as someone who knows the format would."""
    data = yaml.safe_load(path.read_text())
    change(data)
    data["revisionDigest"] = sha256({k: v for k, v in data.items() if k != "revisionDigest"})
    path.write_text(yaml.safe_dump(data))


def _smaller_blocks(data: dict[str, Any]) -> None:
    data["lock"]["profile"]["spec"]["kvCache"]["blockSize"] = 32


TAMPERING: dict[str, tuple[int, Callable[[Path], object], str]] = {
    "message edited": (2, lambda p: _edit(p, "message: Tuned stack", "message: Tuned stack!"),
                       "000002.yaml: revisionDigest does not match the file's content (edited by hand?)"),
    "pin edited": (1, lambda p: _edit(p, "revision: 507aab8f74cbb3e9b06fe5356548a23b91d3deaf",
                                      "revision: 0000000000000000000000000000000000000000"),
                   "000001.yaml: revisionDigest does not match"),
    "lock changed and re-signed": (2, lambda p: _resign(p, _smaller_blocks),
                                   "000002.yaml: lock.stackDigest does not match the lock's content"),
    "earlier revision re-signed": (2, lambda p: _resign(p, lambda data: data.update(message="rewritten")),
                                   "000003.yaml: previousDigest is not the revisionDigest of revision 2"),
    "revision deleted": (2, lambda p: p.unlink(), "000002.yaml: revision 2 of dynamo/dsv41-flash@gb300-nvl72 is "
                         "missing"),
    "revision copied over another": (3, lambda p: shutil.copyfile(p.with_name("000001.yaml"), p),
                                     "000003.yaml: holds revision 1, but its file name says 3"),
    "not YAML": (3, lambda p: p.write_text("revision: [\n"), "000003.yaml: invalid YAML at line 2"),
    "a date where a string was": (3, lambda p: _edit(p, "created: '2026-01-01T00:00:00Z'",
                                                     "created: 2026-01-01T00:00:00Z"),
                                  "000003.yaml: revisionDigest does not match"),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_a_tampered_revision_is_an_error_naming_its_file(tmp_path: Path, case: str) -> None:
    three_revisions(tmp_path)
    number, tamper, expected = TAMPERING[case]
    tamper(tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" / f"{number:06d}.yaml")
    error = one_error(invoke(tmp_path, "history", "dsv41-flash"))
    assert expected in error and str(tmp_path / "history") in error
    assert "restore the file from version control" in error
    assert one_error(invoke(tmp_path, "history", "--check")) == error


def test_a_tampered_revision_is_never_rolled_back_to(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    before = files(tmp_path)
    _edit(tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" / "000002.yaml", "Tuned", "Tuned!")
    error = one_error(invoke(tmp_path, "rollback", "dsv41-flash", "--to", "2"))
    assert "000002.yaml: revisionDigest does not match" in error
    assert {k: v for k, v in files(tmp_path).items() if not k.endswith("000002.yaml")} == {
        k: v for k, v in before.items() if not k.endswith("000002.yaml")}


def _replace_with(make: Callable[[Path], object]) -> Callable[[Path], object]:
    def replace(path: Path) -> None:
        path.unlink()
        make(path)
    return replace


# What stands where revision 2 should (issue 18): every command that extends the history refuses it.
BROKEN_CHAIN: dict[str, tuple[Callable[[Path], object], str]] = {
    "edited": (lambda p: _edit(p, "message: Tuned stack", "message: Tuned stacK"), "revisionDigest does not match"),
    "deleted": (lambda p: p.unlink(), "revision 2 of dynamo/dsv41-flash@gb300-nvl72 is missing"),
    "a directory": (_replace_with(lambda p: p.mkdir()), "is not a regular file"),
    "empty": (lambda p: p.write_bytes(b""), "not a StackRevision"),
    "binary": (lambda p: p.write_bytes(bytes(range(256))), "is not UTF-8 text"),
    "a FIFO": (_replace_with(os.mkfifo), "is not a regular file"),
    "a link to /etc/passwd": (_replace_with(lambda p: p.symlink_to("/etc/passwd")), "is a symbolic link"),
    "a link to revision 1": (_replace_with(lambda p: p.symlink_to(p.with_name("000001.yaml"))), "is a symbolic link"),
    "a link to /dev/zero": (_replace_with(lambda p: p.symlink_to("/dev/zero")), "is a symbolic link"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CHAIN))
@pytest.mark.parametrize("command", ["promote", "rollback"])
def test_nothing_is_recorded_on_a_broken_chain(tmp_path: Path, case: str, command: str) -> None:
    three_revisions(tmp_path)
    revision_2 = tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" / "000002.yaml"
    tamper, expected = BROKEN_CHAIN[case]
    tamper(revision_2)
    before = sorted(p.name for p in revision_2.parent.iterdir())
    args = ["promote", str(TUNED), "-m", "on top"] if command == "promote" else ["rollback", "dsv41-flash"]
    error = one_error(invoke(tmp_path, *args))
    assert expected in error and "000002.yaml" in error
    assert sorted(p.name for p in revision_2.parent.iterdir()) == before  # no 000004.yaml
    assert one_error(invoke(tmp_path, "history", "dsv41-flash")) == error


# --- bad input: one line, exit 2, nothing written ------------------------------------------------------


def test_unknown_deployment_is_one_line(tmp_path: Path) -> None:
    assert one_error(invoke(tmp_path, "history", "dsv41-flash")) == (
        f"error: no history of deployment dsv41-flash in {tmp_path / 'history'}/; no deployment has one yet "
        "(stackpin promote LOCK -m MESSAGE records the first revision)")
    three_revisions(tmp_path)
    for args in (("history", "nope"), ("rollback", "nope"), ("history", "nope", "--check"),
                 ("history", "dsv41-flash@a100")):
        error = one_error(invoke(tmp_path, *args))
        assert "deployments with a history: dynamo/dsv41-flash@gb300-nvl72" in error
    error = one_error(invoke(tmp_path, "history", "../etc/passwd"))
    assert "is not a deployment: write NAME, NAME@PLATFORM or NAMESPACE/NAME@PLATFORM" in error


@pytest.mark.parametrize(("to", "expected"), [
    ("9", "revision 9 of dynamo/dsv41-flash@gb300-nvl72 is out of range: it has revisions 1 to 3"),
    ("0", "revision 0 of dynamo/dsv41-flash@gb300-nvl72 is out of range: it has revisions 1 to 3"),
    ("-1", "revision -1 of dynamo/dsv41-flash@gb300-nvl72 is out of range: it has revisions 1 to 3"),
    ("3", "revision 3 is the newest revision of dynamo/dsv41-flash@gb300-nvl72 already; nothing to roll back"),
])
def test_a_revision_out_of_range_is_one_line(tmp_path: Path, to: str, expected: str) -> None:
    three_revisions(tmp_path)
    before = files(tmp_path)
    assert one_error(invoke(tmp_path, "rollback", "dsv41-flash", "--to", to)) == f"error: {expected}"
    assert files(tmp_path) == before


def test_rolling_back_the_only_revision_is_one_line(tmp_path: Path) -> None:
    assert invoke(tmp_path, "promote", str(LAUNCH), "-m", "first").exit_code == 0
    assert one_error(invoke(tmp_path, "rollback", "dsv41-flash")) == (
        "error: deployment dynamo/dsv41-flash@gb300-nvl72 has one revision; there is none before it to roll back to")


@pytest.mark.parametrize(("message", "expected"), [
    ("", "the message is empty"), ("   \n ", "the message is empty"),
    ("bell\x07", "holds a control character"), ("x" * 4001, "a revision's message holds at most 4,000"),
])
def test_a_bad_message_is_one_line_and_writes_nothing(tmp_path: Path, message: str, expected: str) -> None:
    assert expected in one_error(invoke(tmp_path, "promote", str(LAUNCH), "-m", message))
    assert not (tmp_path / "history").exists() and not (tmp_path / "deployments").exists()


def test_a_multi_line_message_is_kept_and_listed_by_its_first_line(tmp_path: Path) -> None:
    assert invoke(tmp_path, "promote", str(LAUNCH), "-m", "Subject\n\nBody: why.").exit_code == 0
    assert HistoryStore(tmp_path / "history").read(GB300, 1).message == "Subject\n\nBody: why."
    assert "Body" not in invoke(tmp_path, "history", "dsv41-flash").stdout


def test_bad_identity_settings_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    assert "SOURCE_DATE_EPOCH='yesterday' is not a whole number of seconds" in one_error(
        invoke(tmp_path, "promote", str(LAUNCH), "-m", "x"))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    monkeypatch.setenv("STACKPIN_AUTHOR", "two\nlines")
    assert "STACKPIN_AUTHOR: 'two\\nlines' is not an author" in one_error(
        invoke(tmp_path, "promote", str(LAUNCH), "-m", "x"))
    assert not (tmp_path / "history").exists()


def test_a_deployment_directory_that_cannot_be_written_takes_the_revision_back(tmp_path: Path) -> None:
    assert invoke(tmp_path, "promote", str(LAUNCH), "-m", "first").exit_code == 0
    before = files(tmp_path)
    blocked = tmp_path / "deployments" / "dynamo" / "dsv41-flash@gb300-nvl72" / "dynamographdeployment-dsv41-flash.yaml"
    blocked.unlink()
    blocked.mkdir()  # a directory where the manifest goes: the switch fails before it starts
    error = one_error(invoke(tmp_path, "promote", str(TUNED), "-m", "second"))
    assert "dynamographdeployment-dsv41-flash.yaml: cannot write: Is a directory" in error
    blocked.rmdir()
    after = files(tmp_path)
    assert sorted(after) == sorted(k for k in before if not k.endswith("dynamographdeployment-dsv41-flash.yaml"))
    assert [r.revision for r in HistoryStore(tmp_path / "history").revisions(GB300)] == [1]


# --- the deployment directory -------------------------------------------------------------------------


def test_check_reports_a_hand_edited_deployment_and_render_restores_it(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    directory = tmp_path / "deployments" / "dynamo" / "dsv41-flash@gb300-nvl72"
    dgd = directory / "dynamographdeployment-dsv41-flash.yaml"
    dgd.write_text(dgd.read_text().replace("replicas: ", "replicas: 1", 1))
    result = invoke(tmp_path, "history", "dsv41-flash", "--check")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [f"stale    {directory}/  (revision 3, but not as it renders now)",
                                          f"drifted  {dgd}"]
    assert "run stackpin history --render" in result.stderr
    data = json.loads(invoke(tmp_path, "history", "--check", "-o", "json").stdout)
    assert data["current"] is False and data["checks"][0]["drift"] == [{"path": str(dgd), "status": "drifted"}]
    fixed = invoke(tmp_path, "history", "--render")
    assert fixed.exit_code == 0 and fixed.stdout == f"rendered {directory}/  (4 files, revision 3)\n"
    assert invoke(tmp_path, "history", "--check").exit_code == 0
    assert len(HistoryStore(tmp_path / "history").numbers(GB300)) == 3  # no revision recorded


def test_rolling_back_to_a_stack_without_a_compute_domain_removes_it(tmp_path: Path) -> None:
    wide = LOCKS / "gb300-disagg-wide-ep.lock.yaml"
    assert invoke(tmp_path, "promote", str(TUNED), "-m", "colocated").exit_code == 0
    assert invoke(tmp_path, "promote", str(wide), "-m", "wide EP").exit_code == 0
    directory = tmp_path / "deployments" / "dynamo" / "dsv41-flash@gb300-nvl72"
    assert (directory / "computedomain-dsv41-flash-compute-domain.yaml").is_file()
    assert invoke(tmp_path, "rollback", "dsv41-flash").exit_code == 0
    # The tuned stack's attestation ConfigMap; wide EP's went with its ComputeDomain.
    [tuned] = [o["metadata"]["name"] for o in build_objects(read_lock(TUNED)) if o["kind"] == "ConfigMap"]
    assert sorted(p.name for p in directory.iterdir()) == [f"configmap-{tuned}.yaml",
                                                          "dynamographdeployment-dsv41-flash.yaml",
                                                          "kustomization.yaml"]
    assert invoke(tmp_path, "history", "--check").exit_code == 0


def test_after_a_rollback_lock_check_and_render_check_still_pass(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("profiles", "lockfiles", "manifests"):
        shutil.copytree(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    before = files(tmp_path)
    run = CliRunner().invoke
    assert run(main, ["promote", "lockfiles/gb300-launch.lock.yaml", "-m", "launch"]).exit_code == 0
    assert run(main, ["promote", "profiles/deepseek-v4.1-flash/gb300-tuned.yaml", "-m", "tuned"]).exit_code == 0
    assert run(main, ["rollback", "dsv41-flash"]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deployments", "history", "lockfiles", "manifests",
                                                          "profiles"]
    assert {k: v for k, v in files(tmp_path).items() if not k.startswith(("history/", "deployments/"))} == before
    assert run(main, ["lock", "--check", "profiles"]).exit_code == 0
    assert run(main, ["render", "--check"]).exit_code == 0
    assert run(main, ["history", "--check"]).exit_code == 0


# --- the library -------------------------------------------------------------------------------------


def test_the_library_returns_typed_results(tmp_path: Path) -> None:
    store, deployments = HistoryStore(tmp_path / "history"), tmp_path / "deployments"
    first = promote(read_lock(LAUNCH), "Launch", store, deployments, env=ENV)
    second = promote(read_lock(TUNED), "Tuned", store, deployments, env={**ENV, "SOURCE_DATE_EPOCH": "1767229200"})
    back = rollback(store, GB300, deployments, env={**ENV, "SOURCE_DATE_EPOCH": "1767232800"})  # times never go back
    assert (first.revision.revision, second.revision.revision, back.revision.revision) == (1, 2, 3)
    assert second.revision.created == "2026-01-01T01:00:00Z"
    assert back.path == store.path(GB300, 3) and back.directory == deployment_dir(deployments, GB300)
    assert back.files == tuple(sorted(render_stack(read_lock(LAUNCH)).files))
    assert deployment_files(back.revision).files == {name: (back.directory / name).read_text() for name in back.files}
    [check] = check_deployments(store, deployments, [GB300])
    assert check.current and (check.newest, check.holds) == (3, 3)


def test_time_comes_from_source_date_epoch_else_the_clock() -> None:
    assert created_at({"SOURCE_DATE_EPOCH": "0"}) == "1970-01-01T00:00:00Z"
    assert created_at({"SOURCE_DATE_EPOCH": "1767225600"}) == "2026-01-01T00:00:00Z"
    now = created_at({})
    assert len(now) == 20 and now.endswith("Z") and now >= "2025"


def test_author_is_stackpin_author_else_git_else_the_os_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert author_of(tmp_path, {"STACKPIN_AUTHOR": "  Ada <ada@example.org> "}) == "Ada <ada@example.org>"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setenv("USER", "grace")
    monkeypatch.setenv("LOGNAME", "grace")
    repo = tmp_path / "repo"
    repo.mkdir()
    assert author_of(repo / "history" / "dynamo", {}) == "grace"  # no git identity anywhere
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "user.name", "Lin"], check=True)
    assert author_of(repo / "history", {}) == "Lin"
    subprocess.run(["git", "-C", str(repo), "config", "user.email", "lin@example.org"], check=True)
    assert author_of(repo / "history", {}) == "Lin <lin@example.org>"


def test_the_committed_demo_history_verifies_and_its_deployment_is_current() -> None:
    """`make demo` records these (Makefile, demo-history); run it again after relocking the shipped stacks."""
    store = HistoryStore(ROOT / "history")
    assert store.keys() == [GB300]
    revisions = store.revisions(GB300)
    assert [(r.action.kind, r.action.revision, r.stack) for r in revisions] == [
        (ActionKind.promote, None, "gb300-launch"), (ActionKind.promote, None, "gb300-tuned"),
        (ActionKind.rollback, 1, "gb300-launch")]
    assert revisions[0].lock == revisions[2].lock == read_lock(LAUNCH) and revisions[1].lock == read_lock(TUNED)
    assert {r.author for r in revisions} == {"stackpin demo <demo@stackpin.dev>"}
    for revision in revisions:  # canonical bytes: what writing the same revision again gives
        assert store.path(GB300, revision.revision).read_text() == revision_text(revision)
    [check] = check_deployments(store, ROOT / "deployments", [GB300])
    assert check.current, check.drift


def test_deleting_the_newest_revision_is_detected_and_its_number_never_reused(tmp_path: Path) -> None:
    """The head (`HEAD`, the newest revision's number and digest) anchors the chain's end (issue 18)."""
    three_revisions(tmp_path)
    directory = tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72"
    head = (directory / "HEAD").read_text()
    assert head.startswith("3 sha256:") and head.endswith("\n")
    (directory / "000003.yaml").unlink()
    error = one_error(invoke(tmp_path, "history", "dsv41-flash"))
    assert "000003.yaml: revision 3 of dynamo/dsv41-flash@gb300-nvl72 is missing, and the head records it" in error
    assert one_error(invoke(tmp_path, "promote", str(TUNED), "-m", "reuses 3?")) == error
    assert not (directory / "000003.yaml").exists()
    # A revision put back in its place that is not the one the head records is refused too.
    shutil.copyfile(directory / "000001.yaml", directory / "000003.yaml")
    assert "000003.yaml" in one_error(invoke(tmp_path, "history", "dsv41-flash"))


def test_a_history_from_before_the_head_reads_and_gets_one_at_its_next_write(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    directory = tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72"
    (directory / "HEAD").unlink()
    assert invoke(tmp_path, "history", "dsv41-flash").exit_code == 0
    assert invoke(tmp_path, "promote", str(TUNED), "-m", "four").exit_code == 0
    assert (directory / "HEAD").read_text().startswith("4 sha256:")


@pytest.mark.parametrize(("content", "says"), [
    ("", "HEAD: is not a head record"),
    ("3\n", "HEAD: is not a head record"),
    ("x sha256:00\n", "HEAD: is not a head record"),
    ("3 sha256:" + "0" * 64 + "\n", "000003.yaml: is not the revision 3 the head records"),
], ids=["empty", "no-digest", "garbage", "wrong-digest"])
def test_a_head_that_is_not_one_is_refused(tmp_path: Path, content: str, says: str) -> None:
    three_revisions(tmp_path)
    (tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" / "HEAD").write_text(content)
    assert says in one_error(invoke(tmp_path, "history", "dsv41-flash"))


def test_a_writer_killed_between_its_revision_and_the_head_leaves_a_readable_history(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    store = HistoryStore(tmp_path / "history")
    two = store.read(GB300, 2)
    (store.directory(GB300) / "HEAD").write_text(f"2 {two.revision_digest}\n")  # revision 3 made, head not moved
    assert invoke(tmp_path, "history", "dsv41-flash").exit_code == 0
    assert invoke(tmp_path, "promote", str(TUNED), "-m", "four").exit_code == 0
    assert (store.directory(GB300) / "HEAD").read_text() == f"4 {store.read(GB300, 4).revision_digest}\n"


def test_promoting_the_stack_the_newest_revision_has_is_refused_unless_allowed(tmp_path: Path) -> None:
    """A revision that changes nothing would read as a change in history, diff and rollback: refused,
    writing nothing, unless --allow-same."""
    lock = str(Path(__file__).resolve().parent.parent / "lockfiles" / "gb300-tuned.lock.yaml")
    args = ["promote", lock, "--history", str(tmp_path / "h"), "--deployments", str(tmp_path / "d")]
    first = CliRunner().invoke(main, [*args, "-m", "first"])
    assert first.exit_code == 0, first.output
    files = sorted(p.name for p in (tmp_path / "h").rglob("*") if p.is_file())
    again = CliRunner().invoke(main, [*args, "-m", "again"])
    assert again.exit_code == 2
    assert "its newest revision, 1, already has stack gb300-tuned" in again.output
    assert "--allow-same" in again.output
    assert sorted(p.name for p in (tmp_path / "h").rglob("*") if p.is_file()) == files
    allowed = CliRunner().invoke(main, [*args, "-m", "again", "--allow-same"])
    assert allowed.exit_code == 0 and "revision 2" in allowed.output


def test_shell_completion_offers_deployments_and_revisions(tmp_path: Path) -> None:
    from click.shell_completion import ShellComplete

    root = Path(__file__).resolve().parent.parent
    hist = str(tmp_path / "h")
    for stack in ("gb300-launch", "gb300-tuned"):
        done = CliRunner().invoke(main, ["promote", str(root / "lockfiles" / f"{stack}.lock.yaml"), "-m", stack,
                                         "--history", hist, "--deployments", str(tmp_path / "d")])
        assert done.exit_code == 0, done.output
    complete = ShellComplete(main, {}, "stackpin", "_STACKPIN_COMPLETE")

    def offered(args: list[str], incomplete: str) -> list[str]:
        return [item.value for item in complete.get_completions(args, incomplete)]

    assert offered(["rollback", "--history", hist], "") == ["dsv41-flash", "dynamo/dsv41-flash@gb300-nvl72"]
    assert offered(["history", "--history", hist], "dyn") == ["dynamo/dsv41-flash@gb300-nvl72"]
    assert offered(["bench", "attach", "--history", hist], "dynamo/") == [
        "dynamo/dsv41-flash@gb300-nvl72@1", "dynamo/dsv41-flash@gb300-nvl72@2"]
    assert offered(["rollback", "--history", str(tmp_path / "none")], "") == []


def test_a_listing_comes_from_the_verified_cache_the_second_time(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`history DEPLOYMENT` shows the same rows whether read in full or from the per-user cache of files
    verified before (a 1,000-revision history lists without parsing 1,000 revisions); the cache holds
    only stackpin's own CHANGE lines, and never vouches for other bytes."""
    monkeypatch.setenv("STACKPIN_CACHE_DIR", str(tmp_path / "cache"))
    three_revisions(tmp_path)
    first = invoke(tmp_path, "history", "dsv41-flash", "-o", "json")
    assert first.exit_code == 0, first.output
    store = HistoryStore(tmp_path / "history")
    entries = list_history(store, GB300, summarize_locks, summarize_name=CHANGE_LINE)
    assert all(e.chain._parsed == {} for e in entries)  # nothing was parsed: every row came from the cache
    assert invoke(tmp_path, "history", "dsv41-flash", "-o", "json").stdout == first.stdout
    assert [e.revision.revision for e in entries] == [1, 2, 3]  # the whole revision, parsed when asked for
    # Another summarize under another name (or none) computes its own lines.
    assert [e.change for e in list_history(store, GB300, lambda _a, _b: "x", summarize_name="other")] == \
        [None, "x", "x"]
    path = store.path(GB300, 2)
    path.write_text(path.read_text().replace("Tuned stack", "Tuned stacK"))
    assert "revisionDigest does not match" in invoke(tmp_path, "history", "dsv41-flash").output


@pytest.mark.parametrize("content", ["[" * 100_000, '{"stamp": 1, "listed": {"a": NaN}}', "\x00" * 64])
def test_a_hostile_verified_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str) -> None:
    """The per-user cache may hold anything (deeply nested JSON once gave a traceback): it is ignored and
    the history is read in full."""
    monkeypatch.setenv("STACKPIN_CACHE_DIR", str(tmp_path / "cache"))
    three_revisions(tmp_path)
    (cache,) = (tmp_path / "cache" / "verified-revisions").iterdir()
    cache.write_text(content)
    result = subprocess.run([sys.executable, "-m", "stackpin", "history", "dsv41-flash", "--history",
                             str(tmp_path / "history")], capture_output=True, text=True,
                            env={**os.environ, "STACKPIN_CACHE_DIR": str(tmp_path / "cache")}, cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "rollback to 1 (gb300-launch)" in result.stdout
