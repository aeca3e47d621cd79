"""Signed revisions: the SSH signature format git and `ssh-keygen -Y sign` use, namespace `stackpin`.

A revision's signature is the file beside it, `000003.yaml.sig`, over the revision file's exact bytes,
so the real tools check it as they check a signed git commit:

    ssh-keygen -Y verify -f allowed_signers -I alice@example.com -n stackpin -s 000003.yaml.sig < 000003.yaml

and a revision signed with `ssh-keygen -Y sign -n stackpin -f KEY 000003.yaml` verifies here. The
signer's principal is the revision's author's e-mail (`Name <email>`; the whole author without one), as
git takes the committer's. Signing uses the `cryptography` package; the signature's envelope, the
check of a signature and the allowed-signers file are read with the `sshsig` package (maintained for
dulwich, git's Python twin); neither is written here. Ed25519 and RSA keys (rsa-sha2-512). Both are the
`signing` extra: loading a key or an allowed-signers file, which every signature and check starts with,
requires it.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from stackpin.errors import StackpinError, clip
from stackpin.extras import require
from stackpin.yamlio import read_regular

if TYPE_CHECKING:
    from sshsig import PublicKey

NAMESPACE = "stackpin"
HASH = "sha512"  # what ssh-keygen -Y sign uses
SUFFIX = ".sig"
MAX_SIGNATURE_BYTES = 64 * 1024
MAX_KEY_BYTES = 64 * 1024
MAX_SIGNERS_BYTES = 4 * 1024 * 1024
# Where a site configures them (a CI secret, a file in the repository's protected branch): the same
# settings as --signing-key and --allowed-signers.
SIGNING_KEY_ENV = "STACKPIN_SIGNING_KEY"
ALLOWED_SIGNERS_ENV = "STACKPIN_ALLOWED_SIGNERS"
_EMAIL = re.compile(r"<([^<>\s]+)>\s*$")
_SSH_TIME = re.compile(r"^(\d{8})(\d{4}(\d{2})?)?(Z?)$")


class SignatureError(StackpinError):
    """A key, a signature or an allowed-signers file that cannot be used (exit 2)."""


def signature_path(revision_path: Path) -> Path:
    """`000003.yaml` -> `000003.yaml.sig`, where `ssh-keygen -Y sign` writes it."""
    return revision_path.with_name(revision_path.name + SUFFIX)


def principal_of(author: str) -> str:
    """The identity a revision is signed as: the author's e-mail, or the whole author without one."""
    found = _EMAIL.search(author)
    return found.group(1) if found else author.strip()


def _read(path: Path, limit: int, what: str, follow: bool = True) -> bytes:
    try:
        return read_regular(path, limit, follow=follow)
    except FileNotFoundError:
        raise SignatureError(f"{what} {path}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SignatureError(f"{what} {path}: is a symbolic link") from None
        raise SignatureError(f"{what} {path}: {exc.strerror or exc}") from None


def _fingerprint(blob: bytes) -> str:
    """`SHA256:...`, as ssh-keygen -l prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class SigningKey(msgspec.Struct, frozen=True):
    """A private key read from an OpenSSH key file (unencrypted: a CI secret or a file only its owner reads)."""

    path: Path
    key: Any  # cryptography's Ed25519PrivateKey or RSAPrivateKey
    public_blob: bytes  # the SSH wire encoding of the public key

    @property
    def fingerprint(self) -> str:
        return _fingerprint(self.public_blob)

    def sign(self, message: bytes) -> str:
        """The armored SSH signature of `message` in namespace `stackpin`, as `ssh-keygen -Y sign` writes it."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ed25519, padding
        from sshsig.binary_io import SshWriter
        from sshsig.sshsig import SshsigWrapper, ssh_enarmor_sshsig

        signed = SshsigWrapper(namespace=NAMESPACE.encode(), hash_algo=HASH.encode(),
                               hash=hashlib.new(HASH, message).digest()).to_bytes()
        inner = SshWriter(io.BytesIO())
        if isinstance(self.key, ed25519.Ed25519PrivateKey):
            inner.write_string(b"ssh-ed25519")
            inner.write_string(self.key.sign(signed))
        else:
            inner.write_string(b"rsa-sha2-512")
            inner.write_string(self.key.sign(signed, padding.PKCS1v15(), hashes.SHA512()))
        outer = SshWriter(io.BytesIO())  # PROTOCOL.sshsig: the blob sshsig's SshsigSignature reads
        outer.write(b"SSHSIG")
        outer.write_uint32(1)
        for field in (self.public_blob, NAMESPACE.encode(), b"", HASH.encode(), inner.output_fh.getvalue()):
            outer.write_string(field)
        return ssh_enarmor_sshsig(outer.output_fh.getvalue())


def load_signing_key(path: Path) -> SigningKey:
    """An Ed25519 or RSA private key in OpenSSH format (`ssh-keygen -t ed25519`); one-line errors."""
    require("signing")
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_ssh_private_key

    raw = _read(path, MAX_KEY_BYTES, "signing key")
    try:
        key = load_ssh_private_key(raw, password=None)
    except TypeError:
        raise SignatureError(f"signing key {path}: is encrypted; stackpin signs with an unencrypted key file "
                             "(keep it readable by its owner only, or as a CI secret)") from None
    except ValueError as exc:
        raise SignatureError(f"signing key {path}: not an OpenSSH private key ({clip(str(exc))})",
                             "make one with ssh-keygen -t ed25519 -f KEY") from None
    except Exception as exc:  # noqa: BLE001 - cryptography raises UnsupportedAlgorithm for odd keys
        raise SignatureError(f"signing key {path}: {type(exc).__name__}: {clip(str(exc))}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey):
        raise SignatureError(f"signing key {path}: a {type(key).__name__.removesuffix('PrivateKey')} key; stackpin "
                             "signs with Ed25519 or RSA keys")
    line = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH)
    return SigningKey(path, key, base64.b64decode(line.split()[1]))


def _ssh_time(text: str, where: str) -> datetime:
    """ssh-keygen's YYYYMMDD[HHMM[SS]][Z]: UTC with Z, the local time zone without."""
    match = _SSH_TIME.match(text)
    if match is None:
        raise SignatureError(f"{where}: {text!r} is not a time (YYYYMMDD[HHMM[SS]][Z])")
    digits = (match[1] + (match[2] or "0000")).ljust(14, "0")
    try:
        moment = datetime.strptime(digits, "%Y%m%d%H%M%S")
    except ValueError:
        raise SignatureError(f"{where}: {text!r} is not a time (YYYYMMDD[HHMM[SS]][Z])") from None
    return moment.replace(tzinfo=UTC) if match[4] else moment.astimezone(UTC)


def _pattern(text: str) -> re.Pattern[str]:
    """An OpenSSH pattern: `*` and `?` are wildcards, everything else is itself."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text), re.DOTALL)


def _principal_allowed(principal: str, patterns: str) -> bool:
    """OpenSSH's match_pattern_list: a negated pattern that matches denies, else any match allows."""
    allowed = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if _pattern(pattern[1:] if negated else pattern).fullmatch(principal):
            if negated:
                return False
            allowed = True
    return allowed


class AllowedSigner(msgspec.Struct, frozen=True):
    line: int
    principals: str
    key: PublicKey
    namespaces: tuple[str, ...] | None
    valid_after: datetime | None
    valid_before: datetime | None

    def allows(self, principal: str, when: datetime) -> bool:
        return (_principal_allowed(principal, self.principals)
                and (self.namespaces is None or any(_pattern(n).fullmatch(NAMESPACE) for n in self.namespaces))
                and (self.valid_after is None or when >= self.valid_after)
                and (self.valid_before is None or when <= self.valid_before))


class AllowedSigners(msgspec.Struct, frozen=True):
    """An `ssh-keygen` allowed-signers file (`principals [options] keytype key [comment]` per line).
    `cert-authority` lines are kept out: they vouch for certificates, which a revision is not signed with."""

    path: Path
    signers: tuple[AllowedSigner, ...]
    digest: str  # sha256 of the file's bytes

    def verify(self, message: bytes, armored: bytes, principal: str, when: datetime,
               signing_now: datetime | None = None) -> str:
        """The signer's fingerprint when `armored` is a valid `stackpin` signature of `message` by a key
        this file allows for `principal` at `when` (the revision's `created`: an SSH signature carries no
        time of its own, and a history's times never go back), and at `signing_now` too when the signature
        is being made now; SignatureError (one line, what is wrong) otherwise."""
        from sshsig import InvalidSignature, check_signature

        try:
            key = check_signature(message, armored, NAMESPACE)
        except InvalidSignature as exc:
            why = clip(str(exc)) or "it is not a signature of this file's bytes"
            raise SignatureError(f"the signature does not verify: {why}") from None
        except NotImplementedError as exc:
            raise SignatureError(f"the signature cannot be checked here: {clip(str(exc))}") from None
        except Exception as exc:  # noqa: BLE001 - a malformed envelope (struct.error, binascii.Error, ...)
            raise SignatureError(f"not an SSH signature ({type(exc).__name__})") from None
        fingerprint = _fingerprint(base64.b64decode(key.openssh_str().split()[1]))
        listed = [s for s in self.signers if s.key == key]
        if not listed:
            raise SignatureError(f"signed by {fingerprint}, a key {self.path} does not list")
        lines = ", ".join(str(s.line) for s in listed)
        for moment, what in ((when, ""), (signing_now, " (now, when it signs)")):
            if moment is not None and not any(s.allows(principal, moment) for s in listed):
                raise SignatureError(f"signed by {fingerprint}, which {self.path} (line {lines}) does not allow for "
                                     f"{principal!r} in namespace {NAMESPACE} at {moment:%Y-%m-%dT%H:%M:%SZ}{what}")
        return fingerprint


def load_allowed_signers(path: Path) -> AllowedSigners:
    """Read an allowed-signers file (bounded, regular); a line that does not parse is a one-line error."""
    require("signing")
    from sshsig import PublicKey
    from sshsig.allowed_signers import AllowedSigner as Parsed

    raw = _read(path, MAX_SIGNERS_BYTES, "allowed signers")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise SignatureError(f"allowed signers {path}: not ASCII text") from None
    signers = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            parsed = Parsed.parse(line)
            key = PublicKey.from_openssh_str(f"{parsed.key_type} {parsed.base64_key}")
        except NotImplementedError as exc:
            raise SignatureError(f"{where}: {clip(str(exc))} (stackpin checks Ed25519 and RSA keys)") from None
        except Exception as exc:  # noqa: BLE001 - ValueError, binascii.Error, struct.error from a bad key
            raise SignatureError(f"{where}: not an allowed-signers line ({clip(str(exc)) or type(exc).__name__})",
                                 "write: PRINCIPALS [namespaces=\"stackpin\"] KEYTYPE BASE64KEY") from None
        options: Mapping[str, str] = parsed.options or {}
        if "cert-authority" in options:
            continue
        namespaces = tuple(options["namespaces"].split(",")) if "namespaces" in options else None
        after = _ssh_time(options["valid-after"], where) if "valid-after" in options else None
        before = _ssh_time(options["valid-before"], where) if "valid-before" in options else None
        signers.append(AllowedSigner(number, parsed.principals, key, namespaces, after, before))
    if not signers:
        raise SignatureError(f"allowed signers {path}: lists no key: every revision would be refused")
    return AllowedSigners(path, tuple(signers), hashlib.sha256(raw).hexdigest())


def read_signature(path: Path) -> bytes | None:
    """The armored signature beside a revision (bounded, regular, not through a link); None when absent."""
    try:
        return read_regular(path, MAX_SIGNATURE_BYTES, follow=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise SignatureError(f"{path}: {why}") from None
