"""Signatures mean what docs/history.md says (issue 37): a revision's `created` never goes back along its
chain (a back-dated revision is refused when it would be written and when it is read), a key is valid at
the revision's time and, when it signs, now (an allowed-signers entry that expired signs nothing new, however
the revision is dated), and an author names one address (the principal a signature is checked for is the
address a reader sees)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from stackpin.history.model import Action, ActionKind, new_revision, revision_text
from stackpin.history.signing import load_signing_key
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import read_lock, sha256
from tests.test_history import ENV, GB300, LAUNCH, TUNED, files, one_error
from tests.test_history_signing import SSH_KEYGEN, allowed, identity, keygen, public, revision_file, run, verify  # noqa: F401 - identity: the same autouse fixture

DAY = 86400
NOW = int(time.time())


def ssh_time(seconds: int) -> str:
    """An allowed-signers time (ssh-keygen's YYYYMMDDHHMMSSZ)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y%m%d%H%M%SZ")


def promote_at(tmp: Path, monkeypatch: pytest.MonkeyPatch, seconds: int, lock: Path, *extra: str) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(seconds))
    result = run(tmp, "promote", str(lock), "-m", f"at {seconds}", *extra)
    assert result.exit_code == 0, result.output


def tree(tmp: Path) -> dict[str, bytes]:
    return files(tmp / "history") | {f"deployments/{k}": v for k, v in files(tmp / "deployments").items()}


def append_revision(tmp: Path, created: int, author: str, key: Path | None) -> Path:
    """The next revision written as a hand (or another tool) can write it: digests, chain and head consistent,
    signed by `key` over the file's exact bytes. What a reader must then judge on its own."""
    newest = HistoryStore(tmp / "history").newest(GB300)
    number = newest.revision + 1 if newest is not None else 1
    revision = new_revision(GB300, number, read_lock(LAUNCH if number % 2 else TUNED),
                            created=datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                            author=author, message="written by hand", action=Action(kind=ActionKind.promote),
                            previous=newest)
    text = revision_text(revision)
    path = revision_file(tmp, number)
    path.parent.mkdir(parents=True, exist_ok=True)
    if key is not None:
        Path(str(path) + ".sig").write_text(load_signing_key(key).sign(text.encode()))
    path.write_text(text)
    (path.parent / "HEAD").write_text(f"{number} {revision.revision_digest}\n")
    return path


# --- created never goes back ------------------------------------------------------------------------------


def test_a_back_dated_promote_or_rollback_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    promote_at(tmp_path, monkeypatch, 1767312000, LAUNCH)
    promote_at(tmp_path, monkeypatch, 1767312000, TUNED)  # the same second is no step back
    before = tree(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # a day earlier
    for args in (["promote", str(LAUNCH), "-m", "back-dated"], ["rollback", "dsv41-flash"]):
        line = one_error(run(tmp_path, *args))
        assert ("the new revision's time 2026-01-01T00:00:00Z is before revision 2's (2026-01-02T00:00:00Z); "
                "a history's times never go back, nothing written") in line, (args, line)
    assert tree(tmp_path) == before
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767312001")
    assert run(tmp_path, "rollback", "dsv41-flash").exit_code == 0


def forge(path: Path, field: str, value: str) -> None:
    """Change a field of the newest revision and recompute its digest and the head (what anyone who can write the
    history can do)."""
    data = yaml.safe_load(path.read_text())
    data[field] = value
    data["revisionDigest"] = sha256({k: v for k, v in data.items() if k != "revisionDigest"})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (path.parent / "HEAD").write_text(f"{data['revision']} {data['revisionDigest']}\n")


def test_a_history_whose_times_go_back_is_refused_on_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    promote_at(tmp_path, monkeypatch, 1767312000, LAUNCH)
    promote_at(tmp_path, monkeypatch, 1767315600, TUNED)
    forge(revision_file(tmp_path, 2), "created", "2026-01-01T23:59:59Z")
    expected = (f"{revision_file(tmp_path, 2)}: created 2026-01-01T23:59:59Z is before revision 1's "
                "(2026-01-02T00:00:00Z): a history's times never go back (back-dated?)")
    assert expected in one_error(run(tmp_path, "history", "dsv41-flash"))
    before = tree(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767319200")
    assert expected in one_error(run(tmp_path, "promote", str(LAUNCH), "-m", "on top"))
    assert tree(tmp_path) == before
    report = run(tmp_path, "history", "--verify", "-o", "json")
    assert report.exit_code == 1 and expected in report.stdout


def test_a_message_no_writer_could_record_is_refused_on_read(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing prints each message's first line: one with ESC or U+2028 (refused when written) is refused
    when read, so it never reaches the terminal."""
    promote_at(tmp_path, monkeypatch, 1767312000, LAUNCH)
    forge(revision_file(tmp_path, 1), "message", "Launch\x1b[2J\u2028SP999 error: forged")
    line = one_error(run(tmp_path, "history", "dsv41-flash"))
    assert line.startswith(f"error: {revision_file(tmp_path, 1)}: message 'Launch\\x1b[2J\\u2028SP999 error: forged' "
                           "holds a control character")
    assert "\x1b" not in line


def test_the_committed_demo_history_still_verifies() -> None:
    """history/ and deployments/ as `make demo` writes them (fixed, increasing SOURCE_DATE_EPOCH): current."""
    from click.testing import CliRunner

    from stackpin.cli.main import main
    from tests.helpers import ROOT

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        result = CliRunner().invoke(main, ["history", "--check"])
    assert result.exit_code == 0, result.output
    assert "current  deployments/dynamo/dsv41-flash@gb300-nvl72/  (revision 3)" in result.stdout


# --- validity windows at the time of signing ----------------------------------------------------------


def test_an_expired_key_cannot_sign_by_back_dating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ada, bob = keygen(tmp_path, "ada"), keygen(tmp_path, "bob")
    expired = NOW - 10 * DAY  # Ada's entry ended ten days ago; Bob's has no end
    signers = allowed(tmp_path, f'ada@example.org valid-before="{ssh_time(expired)}" {public(ada)}',
                      f"bob@example.org {public(bob)}")
    # Revision 1 by Ada while her key was valid (recorded then; signatures not yet required).
    promote_at(tmp_path, monkeypatch, NOW - 20 * DAY, LAUNCH, "--signing-key", str(ada))
    assert verify(tmp_path, signers).exit_code == 0
    monkeypatch.setenv("STACKPIN_ALLOWED_SIGNERS", str(signers))
    before = tree(tmp_path)

    # Ada now, dating her revision inside her window: the key must be valid now, when it signs.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(NOW - 15 * DAY))
    started = int(time.time())
    line = one_error(run(tmp_path, "promote", str(TUNED), "-m", "back-dated", "--signing-key", str(ada)))
    ended = int(time.time())
    assert "a revision it signs would be refused" in line
    # The time it checked is the time it signed: between the command's start and end (never NOW, taken when
    # this module was imported, maybe in another hour).
    found = re.search(r"does not allow for 'ada@example\.org' in namespace stackpin at (\S+Z)", line)
    assert found and found[1] in {ssh_iso(t) for t in range(started, ended + 1)}, line
    assert "(now, when it signs)" in line
    assert tree(tmp_path) == before

    # Bob records revision 2 after Ada's key expired; Ada's back-dated revision 3 is now before it.
    monkeypatch.setenv("STACKPIN_AUTHOR", "Bob <bob@example.org>")
    promote_at(tmp_path, monkeypatch, NOW - 5 * DAY, TUNED, "--signing-key", str(bob))
    monkeypatch.setenv("STACKPIN_AUTHOR", ENV["STACKPIN_AUTHOR"])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(NOW - 15 * DAY))
    line = one_error(run(tmp_path, "promote", str(LAUNCH), "-m", "back-dated", "--signing-key", str(ada)))
    assert "is before revision 2's" in line

    # Signed by hand (ssh-keygen, or any tool): the signature verifies at the time the revision claims, but
    # the chain refuses a time before the revision it follows.
    monkeypatch.delenv("STACKPIN_ALLOWED_SIGNERS")
    path = append_revision(tmp_path, NOW - 15 * DAY, "Ada <ada@example.org>", ada)
    report = verify(tmp_path, signers)
    assert report.exit_code == 1, report.output
    assert f"{path}: created {ssh_iso(NOW - 15 * DAY)} is before revision 2's" in report.stdout
    if SSH_KEYGEN:  # the real tool says the same of the signature alone: good at the claimed time, not now
        def ssh_verify_at(when: int) -> int:
            with path.open("rb") as stdin:
                return subprocess.run([SSH_KEYGEN, "-Y", "verify", "-f", str(signers), "-I", "ada@example.org",
                                       "-n", "stackpin", "-s", f"{path}.sig", "-O", f"verify-time={ssh_time(when)}"],
                                      stdin=stdin, capture_output=True, check=False).returncode
        assert ssh_verify_at(NOW - 15 * DAY) == 0
        assert ssh_verify_at(NOW) != 0


def ssh_iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_key_not_yet_valid_cannot_sign_by_forward_dating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ada = keygen(tmp_path, "ada")
    signers = allowed(tmp_path, f'ada@example.org valid-after="{ssh_time(NOW + 30 * DAY)}" {public(ada)}')
    monkeypatch.setenv("STACKPIN_ALLOWED_SIGNERS", str(signers))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(NOW + 40 * DAY))
    line = one_error(run(tmp_path, "promote", str(LAUNCH), "-m", "forward-dated", "--signing-key", str(ada)))
    assert "(now, when it signs)" in line
    assert not (tmp_path / "history").exists() or not files(tmp_path / "history")


# --- one author, one address ---------------------------------------------------------------------------


TWO = "Alice <alice@example.org> <mallory@example.org>"


def test_an_author_with_two_addresses_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STACKPIN_AUTHOR", TWO)
    line = one_error(run(tmp_path, "promote", str(LAUNCH), "-m", "x"))
    assert line == (f"error: STACKPIN_AUTHOR: {TWO!r} names more than one address; an author is `Name <email>`, "
                    "one person with one address")
    assert not (tmp_path / "history").exists() or not files(tmp_path / "history")


def test_a_revision_signed_as_one_address_and_listed_as_another_is_refused(tmp_path: Path) -> None:
    """Mallory signs a revision whose author reads as Alice: the signature is checked for the last address,
    a reader sees the first. Such a revision is refused on read, naming its file, signed or not."""
    alice, mallory = keygen(tmp_path, "alice"), keygen(tmp_path, "mallory")
    signers = allowed(tmp_path, f"alice@example.org {public(alice)}", f"mallory@example.org {public(mallory)}")
    path = append_revision(tmp_path, 1767225600, TWO, mallory)
    expected = f"{path}: author {TWO!r} names more than one address"
    report = verify(tmp_path, signers)
    assert report.exit_code == 1, report.output
    assert not json.loads(report.stdout)["verified"]
    assert expected in report.stdout
    assert expected in one_error(run(tmp_path, "history", "dsv41-flash"))
