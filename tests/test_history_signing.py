"""Signed revisions (issue 18): each revision signed in the SSH signature format git and `ssh-keygen -Y
sign` use (namespace `stackpin`), checked against an allowed-signers file on every read; interop both
ways with the real ssh-keygen; a forged revision, a stripped, moved or wrong-namespace signature and a key
not allowed for the author are refused, naming the file, and nothing is written on top of them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.history.model import revision_text
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import sha256
from tests.test_history import ENV, GB300, LAUNCH, TUNED, files, one_error

SSH_KEYGEN = shutil.which("ssh-keygen")
needs_ssh_keygen = pytest.mark.skipif(SSH_KEYGEN is None, reason="ssh-keygen (OpenSSH) is not installed: the "
                                      "interop tests run the real tool")
AUTHOR = "Ada <ada@example.org>"


@pytest.fixture(autouse=True)
def identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("STACKPIN_ALLOWED_SIGNERS", raising=False)
    monkeypatch.delenv("STACKPIN_SIGNING_KEY", raising=False)


def keygen(tmp: Path, name: str, kind: str = "ed25519", passphrase: str = "") -> Path:
    """A real OpenSSH key pair made by ssh-keygen (or by cryptography where ssh-keygen is missing)."""
    path = tmp / name
    if SSH_KEYGEN:
        extra = ["-b", "3072"] if kind == "rsa" else []
        subprocess.run([SSH_KEYGEN, "-q", "-t", kind, *extra, "-N", passphrase, "-C", name, "-f", str(path)],
                       check=True)
        return path
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else rsa.generate_private_key(65537, 3072)
    encryption = (serialization.BestAvailableEncryption(passphrase.encode()) if passphrase else
                  serialization.NoEncryption())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption))
    path.with_suffix(".pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                      serialization.PublicFormat.OpenSSH))
    return path


def public(key: Path) -> str:
    return " ".join(Path(str(key) + ".pub").read_text().split()[:2])


def allowed(tmp: Path, *lines: str, name: str = "allowed_signers") -> Path:
    path = tmp / name
    path.write_text("# principal [options] key\n" + "".join(line + "\n" for line in lines))
    return path


def run(tmp: Path, *args: str) -> Result:
    where = ["--history", str(tmp / "history"), "--deployments", str(tmp / "deployments")]
    return CliRunner().invoke(main, [*args, *where])


def revision_file(tmp: Path, number: int) -> Path:
    return tmp / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" / f"{number:06d}.yaml"


def signed_history(tmp: Path, key: Path) -> None:
    for lock, message in ((LAUNCH, "Launch stack"), (TUNED, "Tuned stack")):
        result = run(tmp, "promote", str(lock), "-m", message, "--signing-key", str(key))
        assert result.exit_code == 0, result.output


def verify(tmp: Path, signers: Path) -> Result:
    return run(tmp, "history", "--verify", "--allowed-signers", str(signers), "-o", "json")


def ssh_verify(signers: Path, principal: str, revision: Path,
               namespace: str = "stackpin") -> subprocess.CompletedProcess[str]:
    assert SSH_KEYGEN
    with revision.open("rb") as stdin:
        return subprocess.run([SSH_KEYGEN, "-Y", "verify", "-f", str(signers), "-I", principal, "-n", namespace,
                               "-s", str(revision) + ".sig"], stdin=stdin, capture_output=True, text=True)


# --- interop with the real ssh-keygen -------------------------------------------------------------


@needs_ssh_keygen
@pytest.mark.parametrize("kind", ["ed25519", "rsa"])
def test_stackpin_signatures_verify_with_ssh_keygen(tmp_path: Path, kind: str) -> None:
    key = keygen(tmp_path, "ada", kind)
    signers = allowed(tmp_path, f'ada@example.org namespaces="stackpin" {public(key)}')
    signed_history(tmp_path, key)
    for number in (1, 2):
        done = ssh_verify(signers, "ada@example.org", revision_file(tmp_path, number))
        assert done.returncode == 0, done.stderr
        assert 'Good "stackpin" signature for ada@example.org' in done.stdout + done.stderr
    # The signature is over the file's bytes, in namespace stackpin: another namespace does not verify.
    assert ssh_verify(signers, "ada@example.org", revision_file(tmp_path, 1), namespace="git").returncode != 0
    report = verify(tmp_path, signers)
    assert report.exit_code == 0, report.output
    data = json.loads(report.stdout)
    assert data["verified"] and data["deployments"][0]["revisions"] == 2


@needs_ssh_keygen
def test_revisions_signed_by_ssh_keygen_verify_in_stackpin(tmp_path: Path) -> None:
    assert SSH_KEYGEN
    key = keygen(tmp_path, "ada")
    signers = allowed(tmp_path, f"ada@example.org {public(key)}")
    for lock in (LAUNCH, TUNED):  # recorded unsigned, then signed by hand as git users sign
        assert run(tmp_path, "promote", str(lock), "-m", "x").exit_code == 0
    assert verify(tmp_path, signers).exit_code == 1
    for number in (1, 2):
        subprocess.run([SSH_KEYGEN, "-Y", "sign", "-q", "-n", "stackpin", "-f", str(key),
                        str(revision_file(tmp_path, number))], check=True)
    result = verify(tmp_path, signers)
    assert result.exit_code == 0, result.output
    fingerprint = subprocess.run([SSH_KEYGEN, "-l", "-f", str(key) + ".pub"], capture_output=True, text=True,
                                 check=True).stdout.split()[1]
    assert json.loads(result.stdout)["deployments"][0]["signers"] == [fingerprint]
    # ssh-keygen signing in git's namespace is not a stackpin signature.
    revision_file(tmp_path, 2).with_suffix(".yaml.sig").unlink()
    subprocess.run([SSH_KEYGEN, "-Y", "sign", "-q", "-n", "git", "-f", str(key), str(revision_file(tmp_path, 2))],
                   check=True)
    result = verify(tmp_path, signers)
    assert result.exit_code == 1
    assert "000002.yaml.sig: signature of revision 2: the signature does not verify" in result.stdout


# --- what signatures catch that digests cannot -------------------------------------------------------


def forge_message(path: Path, message: str) -> None:
    """Edit a revision's message and recompute its revisionDigest (unkeyed sha256), as an attacker can."""
    data = yaml.safe_load(path.read_text())
    data["message"] = message
    body = {k: v for k, v in data.items() if k != "revisionDigest"}
    data["revisionDigest"] = sha256(body)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    head = path.parent / "HEAD"
    number, _ = head.read_text().split()
    if int(number) == data["revision"]:
        head.write_text(f"{number} {data['revisionDigest']}\n")


def test_a_forged_revision_passes_digests_but_not_signatures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = keygen(tmp_path, "ada")
    signers = allowed(tmp_path, f"ada@example.org {public(key)}")
    signed_history(tmp_path, key)
    forge_message(revision_file(tmp_path, 2), "Approved by the platform team")
    # Without signatures the forgery is consistent: this is what docs/history.md says digests cannot catch.
    assert run(tmp_path, "history", "dsv41-flash").exit_code == 0
    result = verify(tmp_path, signers)
    assert result.exit_code == 1
    assert "000002.yaml.sig: signature of revision 2: the signature does not verify" in result.stdout
    # Required by configuration, every command that reads or extends the history refuses, writing nothing.
    monkeypatch.setenv("STACKPIN_ALLOWED_SIGNERS", str(signers))
    monkeypatch.setenv("STACKPIN_SIGNING_KEY", str(key))
    before = files(tmp_path / "history")
    for args in (["history", "dsv41-flash"], ["promote", str(LAUNCH), "-m", "x"], ["rollback", "dsv41-flash"],
                 ["diff", "dsv41-flash@1", "dsv41-flash@2"]):
        line = one_error(run(tmp_path, *args) if args[0] != "diff" else CliRunner().invoke(
            main, [*args, "--history", str(tmp_path / "history")]))
        assert "000002.yaml.sig: signature of revision 2: the signature does not verify" in line, (args, line)
    assert files(tmp_path / "history") == before


def test_unsigned_moved_and_foreign_signatures_are_refused(tmp_path: Path) -> None:
    ada, eve = keygen(tmp_path, "ada"), keygen(tmp_path, "eve")
    signers = allowed(tmp_path, f"ada@example.org {public(ada)}", f"eve@example.org {public(eve)}")
    signed_history(tmp_path, ada)
    one, two = revision_file(tmp_path, 1), revision_file(tmp_path, 2)
    sig_one, sig_two = Path(str(one) + ".sig"), Path(str(two) + ".sig")
    good = sig_two.read_bytes()

    sig_two.unlink()  # stripped
    assert "revision 2 is not signed (no 000002.yaml.sig)" in verify(tmp_path, signers).stdout
    shutil.copy(sig_one, sig_two)  # revision 1's signature beside revision 2
    assert "signature of revision 2: the signature does not verify" in verify(tmp_path, signers).stdout
    sig_two.write_bytes(good)
    assert verify(tmp_path, signers).exit_code == 0

    # Eve is an allowed signer, but not for Ada's revisions: the principal is the author's e-mail.
    result = run(tmp_path, "promote", str(LAUNCH), "-m", "x", "--signing-key", str(eve))
    assert result.exit_code == 0  # no allowed signers required yet: signed, not checked
    report = verify(tmp_path, signers)
    assert report.exit_code == 1
    assert "does not allow for 'ada@example.org'" in report.stdout
    assert revision_file(tmp_path, 3).exists()


def test_allowed_signers_options_are_honoured(tmp_path: Path) -> None:
    key = keygen(tmp_path, "ada")
    signed_history(tmp_path, key)
    cases = {
        f"ada@example.org {public(key)}": True,
        f"*@example.org {public(key)}": True,
        f'ada@example.org namespaces="stackpin,git" {public(key)}': True,
        f'ada@example.org namespaces="git" {public(key)}': False,
        f"bob@example.org {public(key)}": False,
        f"*@example.org,!ada@example.org {public(key)}": False,
        f'ada@example.org valid-before="20250101" {public(key)}': False,  # revisions are from 2026
        f'ada@example.org valid-after="20250101Z" {public(key)}': True,
        f"ada@example.org cert-authority {public(key)}": False,  # vouches for certificates only
    }
    other = public(keygen(tmp_path, "other"))
    for line, ok in cases.items():
        signers = allowed(tmp_path, line, f"nobody@example.org {other}")
        result = verify(tmp_path, signers)
        assert result.exit_code == (0 if ok else 1), (line, result.output)
        if SSH_KEYGEN:  # the real tool agrees on each line
            assert (ssh_verify(signers, "ada@example.org", revision_file(tmp_path, 1)).returncode == 0) == ok, line


def test_required_signatures_refuse_an_unsigned_or_unlisted_write(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    ada, eve = keygen(tmp_path, "ada"), keygen(tmp_path, "eve")
    signers = allowed(tmp_path, f"ada@example.org {public(ada)}")
    signed_history(tmp_path, ada)
    monkeypatch.setenv("STACKPIN_ALLOWED_SIGNERS", str(signers))
    before = files(tmp_path / "history")
    line = one_error(run(tmp_path, "promote", str(LAUNCH), "-m", "x"))
    assert "requires signed revisions and no signing key is set" in line
    line = one_error(run(tmp_path, "rollback", "dsv41-flash", "--signing-key", str(eve)))
    assert "a revision it signs would be refused" in line and "does not list" in line
    assert files(tmp_path / "history") == before
    result = run(tmp_path, "rollback", "dsv41-flash", "--signing-key", str(ada))
    assert result.exit_code == 0, result.output
    assert run(tmp_path, "history", "dsv41-flash").exit_code == 0


def test_a_signature_left_by_a_killed_writer_is_replaced(tmp_path: Path) -> None:
    """The signature is written before its revision: a writer killed between the two leaves a stray
    `000003.yaml.sig`, which the next writer replaces (or removes, recording unsigned)."""
    key = keygen(tmp_path, "ada")
    signers = allowed(tmp_path, f"ada@example.org {public(key)}")
    signed_history(tmp_path, key)
    stray = Path(str(revision_file(tmp_path, 3)) + ".sig")
    stray.write_text("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n")
    assert verify(tmp_path, signers).exit_code == 0  # no revision 3: its stray signature is no revision
    assert run(tmp_path, "promote", str(LAUNCH), "-m", "x", "--signing-key", str(key)).exit_code == 0
    assert verify(tmp_path, signers).exit_code == 0
    stray4 = Path(str(revision_file(tmp_path, 4)) + ".sig")
    stray4.write_bytes(stray.read_bytes())
    assert run(tmp_path, "promote", str(TUNED), "-m", "unsigned").exit_code == 0
    assert not stray4.exists()


def test_bad_keys_and_signer_files_are_one_line(tmp_path: Path) -> None:
    key = keygen(tmp_path, "ada")
    locked = keygen(tmp_path, "locked", passphrase="secret phrase")
    signed_history(tmp_path, key)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xff\x00 not a key")
    link = tmp_path / "link.sig"
    bad = allowed(tmp_path, "ada@example.org ssh-ed25519 !!", name="bad")
    for args, words in (
        (["promote", str(LAUNCH), "-m", "x", "--signing-key", str(locked)], "is encrypted"),
        (["promote", str(LAUNCH), "-m", "x", "--signing-key", str(garbage)], "not an OpenSSH private key"),
        (["promote", str(LAUNCH), "-m", "x", "--signing-key", str(tmp_path / "none")], "no such file"),
        (["promote", str(LAUNCH), "-m", "x", "--signing-key", "/dev/zero"], "not a regular file"),
        (["history", "--verify", "--allowed-signers", str(garbage)], "not ASCII text"),
        (["history", "--verify", "--allowed-signers", str(bad)], "bad:2: not an allowed-signers line"),
        (["history", "--verify", "--allowed-signers", str(allowed(tmp_path, name="empty"))], "lists no key"),
    ):
        line = one_error(run(tmp_path, *args))
        assert words in line, (args, line)
    # A signature that is a symbolic link is not read through it.
    signers = allowed(tmp_path, f"ada@example.org {public(key)}")
    sig = Path(str(revision_file(tmp_path, 1)) + ".sig")
    sig.rename(link)
    sig.symlink_to(link)
    assert "is a symbolic link" in verify(tmp_path, signers).stdout


def test_the_verified_cache_never_vouches_for_other_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files verified once are not parsed again, keyed by their bytes: an edit after the cache was filled
    is caught as before; a signature is remembered only with the exact bytes it was verified with."""
    monkeypatch.setenv("STACKPIN_CACHE_DIR", str(tmp_path / "cache"))
    key = keygen(tmp_path, "ada")
    signers = allowed(tmp_path, f"ada@example.org {public(key)}")
    signed_history(tmp_path, key)
    store = HistoryStore(tmp_path / "history", allowed_signers=signers)
    assert [link.revision is not None for link in store.chain(GB300).links] == [False, False]  # from the cache
    assert list((tmp_path / "cache" / "verified-revisions").iterdir())
    path = revision_file(tmp_path, 1)
    path.write_text(path.read_text().replace("Launch stack", "Launch stacK"))
    assert "revisionDigest does not match" in one_error(run(tmp_path, "history", "dsv41-flash"))
    path.write_text(path.read_text().replace("Launch stacK", "Launch stack"))
    assert verify(tmp_path, signers).exit_code == 0
    sig = Path(str(revision_file(tmp_path, 2)) + ".sig")
    sig.write_bytes(Path(str(revision_file(tmp_path, 1)) + ".sig").read_bytes())
    assert "signature of revision 2: the signature does not verify" in verify(tmp_path, signers).stdout
    sig.unlink()
    assert "revision 2 is not signed" in verify(tmp_path, signers).stdout


def test_revision_bytes_are_what_is_signed(tmp_path: Path) -> None:
    """The signed message is the file as written: the same revision always has the same bytes."""
    key = keygen(tmp_path, "ada")
    signed_history(tmp_path, key)
    revision = HistoryStore(tmp_path / "history").read(GB300, 2)
    assert revision_text(revision).encode() == revision_file(tmp_path, 2).read_bytes()
    assert revision.author == AUTHOR
