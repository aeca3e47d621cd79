"""The history store: `<root>/<namespace>/<deployment>@<platform>/000001.yaml`, one file per revision.

Readers take no lock: a revision file appears whole (hard-linked from a fsynced temp file) and never
changes, and names that are not `NNNNNN.yaml` (temp files, records attached later) are not revisions.
Writers hold an exclusive flock on the deployment's directory and create the next number's file
exclusively, so two writers can neither take one number nor skip one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from stackpin.errors import StackpinError, clip
from stackpin.history.model import (
    DIRECTORY_NAME,
    DeploymentKey,
    Revision,
    RevisionError,
    file_name,
    parse_revision,
    read_revision_bytes,
)
from stackpin.history.signing import (
    ALLOWED_SIGNERS_ENV,
    NAMESPACE,
    SIGNING_KEY_ENV,
    AllowedSigners,
    SignatureError,
    SigningKey,
    load_allowed_signers,
    load_signing_key,
    principal_of,
    read_signature,
    signature_path,
)
from stackpin.history.verified import Verified, VerifiedCache, cache_dir, content_key
from stackpin.profile.k8s_names import DNS_LABEL
from stackpin.yamlio import lock_directory, read_regular, refuse_links_below, sweep_temp_files, write_atomic

if TYPE_CHECKING:
    from stackpin.lock.lockfile import StackLock

REVISION_FILE = re.compile(r"^([0-9]+)\.yaml$")
# The newest revision's number and digest, rewritten after each revision is recorded: deleting the newest
# revision (truncation) no longer goes unnoticed, and its number is never handed out again. A history from
# before the head existed gets one at its next write.
HEAD_FILE = "HEAD"
HEAD_FORMAT = re.compile(r"^(?P<number>[1-9][0-9]{0,8}) (?P<digest>sha256:[0-9a-f]{64})\n$")
QUERY = re.compile(rf"^(?:(?P<namespace>{DNS_LABEL})/)?(?P<name>{DNS_LABEL})(?:@(?P<platform>{DNS_LABEL}))?$")


class Link(msgspec.Struct, frozen=True):
    """One verified revision file of a chain: what verifying it established, its parse if that was needed."""

    path: Path
    content: str  # sha256 of the file's bytes
    facts: Verified
    revision: Revision | None
    signer: str | None  # the fingerprint of the key that signed it, when signatures are required

    @property
    def revision_digest(self) -> str:
        return self.facts.revision_digest


class Chain:
    """A deployment's revisions, oldest first, verified as a chain; each parsed when first asked for."""

    def __init__(self, key: DeploymentKey, links: tuple[Link, ...], cache: VerifiedCache) -> None:
        self.key = key
        self.links = links
        self.cache = cache  # the verified facts this read used: a revision recorded on top joins them
        self._parsed = {link.facts.number: link.revision for link in links if link.revision is not None}

    def __len__(self) -> int:
        return len(self.links)

    def get(self, number: int) -> Revision:
        """Revision `number`; a number out of range is a one-line error."""
        if not 1 <= number <= len(self.links):
            count = len(self.links)
            span = f"revisions 1 to {count}" if count > 1 else "only revision 1" if count else "no revisions"
            raise StackpinError(f"revision {number} of {self.key} is out of range: it has {span}")
        if number not in self._parsed:
            link = self.links[number - 1]
            raw = read_revision_bytes(link.path)
            if content_key(raw) != link.content:
                raise RevisionError(link.path, "changed while it was being read (edited by hand?)")
            self._parsed[number] = parse_revision(raw, link.path, self.key, number)
        return self._parsed[number]

    @property
    def newest(self) -> Revision | None:
        return self.get(len(self.links)) if self.links else None

    def all(self) -> list[Revision]:
        return [self.get(n) for n in range(1, len(self.links) + 1)]


def created_time(created: str) -> datetime:
    """A revision's `created` (UTC, `YYYY-MM-DDTHH:MM:SSZ`, checked on read) as a datetime."""
    return datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


class HistoryStore:
    """Deployments' histories under one root directory (`--history`, default `history/`).

    Signatures: `allowed_signers` (default $STACKPIN_ALLOWED_SIGNERS) makes every read require each
    revision signed by a key that file allows for its author; `signing_key` (default
    $STACKPIN_SIGNING_KEY) signs each revision recorded (see signing.py)."""

    def __init__(self, root: Path, *, allowed_signers: Path | None = None, signing_key: Path | None = None,
                 env: Mapping[str, str] = os.environ) -> None:
        self.root = Path(root)
        self.env = env
        self._signers_path = allowed_signers or env.get(ALLOWED_SIGNERS_ENV) or None
        self._key_path = signing_key or env.get(SIGNING_KEY_ENV) or None

    def directory(self, key: DeploymentKey) -> Path:
        return self.root / key.namespace / key.dirname

    def path(self, key: DeploymentKey, number: int) -> Path:
        return self.directory(key) / file_name(number)

    # --- finding deployments ---------------------------------------------------------------------

    def keys(self) -> list[DeploymentKey]:
        """Every deployment with at least one revision, sorted."""
        found: list[DeploymentKey] = []
        if not self.root.is_dir():
            return found
        for ns in sorted(self.root.iterdir()):
            if not (ns.is_dir() and re.fullmatch(DNS_LABEL, ns.name)):
                continue
            for directory in sorted(ns.iterdir()):
                match = DIRECTORY_NAME.match(directory.name)
                if match and directory.is_dir():
                    key = DeploymentKey(namespace=ns.name, name=match["name"], platform=match["platform"])
                    if self.numbers(key):
                        found.append(key)
        return sorted(found, key=str)

    def resolve(self, query: str) -> DeploymentKey:
        """`NAME`, `NAME@PLATFORM`, `NAMESPACE/NAME` or `NAMESPACE/NAME@PLATFORM` -> the one deployment
        it names. Unknown and ambiguous names are one-line errors listing what there is."""
        match = QUERY.match(query)
        if not match:
            raise StackpinError(f"{clip(query)!r} is not a deployment: write NAME, NAME@PLATFORM or "
                                "NAMESPACE/NAME@PLATFORM (`stackpin history` lists them)")
        known = self.keys()
        wanted = {k: v for k, v in match.groupdict().items() if v is not None}
        hits = [key for key in known if all(getattr(key, field) == value for field, value in wanted.items())]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise StackpinError(f"deployment {query} is ambiguous in {self.root}/: it could be "
                                f"{', '.join(map(str, hits))}; name one of them")
        have = (f"deployments with a history: {', '.join(map(str, known))}" if known else
                "no deployment has one yet (stackpin promote LOCK -m MESSAGE records the first revision)")
        raise StackpinError(f"no history of deployment {query} in {self.root}/; {have}")

    # --- reading ---------------------------------------------------------------------------------

    def numbers(self, key: DeploymentKey) -> list[int]:
        """The revision numbers on disk, sorted (not verified)."""
        directory = self.directory(key)
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        numbers = []
        for name in names:
            match = REVISION_FILE.match(name)
            if match:
                number = int(match[1])
                if name != file_name(number):  # `01.yaml` or `0000001.yaml`: not a name stackpin writes
                    raise RevisionError(directory / name, f"not a revision file name (revision {number} is "
                                        f"{file_name(number)})")
                numbers.append(number)
        return sorted(numbers)

    def read(self, key: DeploymentKey, number: int) -> Revision:
        """Revision `number`, its whole chain verified (issue 18: nothing is read from a broken history); a
        number out of range is a one-line error."""
        return self.chain(key).get(number)

    def lock_at(self, query: str, number: int) -> StackLock:
        """The stack of revision `number` of the deployment `query` names (see `resolve`), verified."""
        return self.read(self.resolve(query), number).lock

    def lock_reader(self) -> Callable[[str, int], StackLock]:
        """`lock_at` for one command that reads several revisions (`stackpin diff DEP@1 DEP@2`): each
        deployment's chain is verified once, at its first read, and every revision comes from that one
        verified chain. Verified exactly as `lock_at`'s (the whole chain: nothing is read from a broken
        history); only not twice, which on a history whose files are not in the verified cache (a fresh CI
        runner, `STACKPIN_CACHE_DIR=`) parses every revision twice. Parsing only the revisions asked for
        would not do: an old revision is tied to the head only through each revision after it (each
        revisionDigest covers the previousDigest before it), so a replaced old revision that verifies on
        its own is found only by verifying every revision from it to the newest."""
        chains: dict[DeploymentKey, Chain] = {}

        def lock_at(query: str, number: int) -> StackLock:
            key = self.resolve(query)
            if key not in chains:
                chains[key] = self.chain(key)
            return chains[key].get(number).lock

        return lock_at

    def query(self, arg: str) -> Revision:
        """`DEPLOYMENT@REV`, or `DEPLOYMENT` for its newest revision (a deployment as `resolve` takes it)."""
        name, _, rev = arg.rpartition("@")
        if not (rev.isdigit() and name):  # no revision named: the deployment's newest
            name, rev = arg, ""
        key = self.resolve(name)
        revision = self.read(key, int(rev)) if rev else self.newest(key)
        if revision is None:
            raise StackpinError(f"{key} has no revisions in {self.root}", "stackpin promote LOCK first")
        return revision

    def newest(self, key: DeploymentKey) -> Revision | None:
        """The newest revision, its whole chain verified."""
        return self.chain(key).newest

    def revisions(self, key: DeploymentKey) -> list[Revision]:
        """Every revision, oldest first, the whole chain verified (see `chain`)."""
        return self.chain(key).all()

    def head(self, key: DeploymentKey) -> tuple[int, str] | None:
        """(number, revisionDigest) the head records; None for a history from before heads."""
        path = self.directory(key) / HEAD_FILE
        try:
            raw = read_regular(path, 200, follow=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != 0:  # not "not a regular file" or "larger than": those are no head record either
                raise RevisionError(path, f"cannot read the head: {exc.strerror}") from None
            raw = b""
        match = HEAD_FORMAT.match(raw.decode("ascii", "replace"))
        if match is None:
            raise RevisionError(path, "is not a head record ('<number> sha256:<digest>', as stackpin writes it)")
        return int(match["number"]), match["digest"]

    def write_head(self, key: DeploymentKey, revision: Revision) -> None:
        """Call holding the deployment's lock (`writing`), after the revision's file is created."""
        write_atomic(self.directory(key) / HEAD_FILE, f"{revision.revision} {revision.revision_digest}\n")

    def chain(self, key: DeploymentKey) -> Chain:
        """Every revision verified and chained to the one before it, the newest at least the one the head
        records, each signed by an allowed signer when signatures are required, no revision created before the
        one it follows: a missing, edited, replaced, truncated, back-dated or unsigned revision is an error naming
        its file. Revisions are parsed when asked for
        (`Chain.get`); files verified before with the same bytes are not parsed again (`verified.py`)."""
        cache = VerifiedCache(cache_dir(self.env), str(key))
        directory = self.directory(key)
        links: list[Link] = []
        for expected, number in enumerate(self.numbers(key), 1):
            if number != expected:
                raise RevisionError(self.path(key, expected), f"revision {expected} of {key} is missing "
                                    f"(revisions are never deleted; {file_name(number)} follows)")
            link = self._link(key, directory / file_name(number), number, cache)
            previous = links[-1].revision_digest if links else None
            if link.facts.previous_digest != previous:
                raise RevisionError(link.path, "previousDigest is not the revisionDigest of revision "
                                    f"{number - 1} (a revision before it was replaced?)" if previous else
                                    "revision 1 names a previous revision")
            if links and link.facts.created < links[-1].facts.created:  # one fixed format: text order is time order
                raise RevisionError(link.path, f"created {link.facts.created} is before revision {number - 1}'s "
                                    f"({links[-1].facts.created}): a history's times never go back (back-dated?)")
            links.append(link)
        cache.save({link.content for link in links})
        head = self.head(key)
        if head is not None:
            number, digest = head
            # A writer killed between its revision and the head leaves the head one behind: still anchored.
            if len(links) < number:
                raise RevisionError(self.path(key, number), f"revision {number} of {key} is missing, and the head "
                                    f"records it as the newest (the newest revision was deleted?)")
            if links[number - 1].revision_digest != digest:
                raise RevisionError(self.path(key, number), f"is not the revision {number} the head records "
                                    "(replaced?)")
        return Chain(key, tuple(links), cache)

    def _link(self, key: DeploymentKey, path: Path, number: int, cache: VerifiedCache) -> Link:
        raw = read_revision_bytes(path)
        content = content_key(raw)
        facts = cache.get(content)
        revision = None
        if facts is None or facts.number != number:
            revision = parse_revision(raw, path, key, number)
            facts = Verified(number, revision.revision_digest, revision.previous_digest, revision.author,
                             revision.created)
            cache.put(content, facts)
        signer = self._check_signature(path, raw, facts, cache) if self.signers is not None else None
        return Link(path, content, facts, revision, signer)

    def remember(self, chain: Chain, revision: Revision, raw: bytes) -> None:
        """Put a revision just recorded on top of `chain` into the verified cache (its facts are known: it
        was just built and written by this process), so the next read need not parse it."""
        cache = chain.cache  # read once, by `chain`: not again from disk
        content = content_key(raw)
        cache.put(content, Verified(revision.revision, revision.revision_digest, revision.previous_digest,
                                    revision.author, revision.created))
        cache.save({link.content for link in chain.links} | {content})

    # --- signatures ------------------------------------------------------------------------------

    @cached_property
    def signers(self) -> AllowedSigners | None:
        """The allowed signers every revision must be signed by (--allowed-signers or
        $STACKPIN_ALLOWED_SIGNERS); None: signatures are not required."""
        return load_allowed_signers(Path(self._signers_path)) if self._signers_path else None

    @cached_property
    def signing_key(self) -> SigningKey | None:
        """The key new revisions are signed with (--signing-key or $STACKPIN_SIGNING_KEY)."""
        return load_signing_key(Path(self._key_path)) if self._key_path else None

    def _check_signature(self, path: Path, raw: bytes, facts: Verified, cache: VerifiedCache) -> str:
        assert self.signers is not None
        sig = signature_path(path)
        hint = (f"sign it with ssh-keygen -Y sign -n {NAMESPACE} -f KEY {path} by a key {self.signers.path} allows "
                "for its author, or restore the signature from version control")
        try:
            armored = read_signature(sig)
            if armored is None:
                raise RevisionError(path, f"revision {facts.number} is not signed (no {sig.name}), and "
                                    f"{self.signers.path} requires signatures", hint)
            signed_key = content_key(f"{content_key(raw)} {content_key(armored)} {self.signers.digest}".encode())
            known = cache.signer(signed_key)
            if known is None:
                known = self.signers.verify(raw, armored, principal_of(facts.author), created_time(facts.created))
                cache.put_signer(signed_key, known)
            return known
        except SignatureError as exc:
            raise RevisionError(sig, f"signature of revision {facts.number}: {exc.lines()[0]}", hint) from None

    def signed(self, revision: Revision, text: str) -> str | None:
        """The armored signature a new revision's file `text` gets (None without a signing key), checked
        against the allowed signers when they are required; refused before anything is written."""
        key = self.signing_key
        if key is None:
            if self.signers is not None:
                raise SignatureError(f"{self.signers.path} requires signed revisions and no signing key is set",
                                     f"pass --signing-key KEY or set {SIGNING_KEY_ENV}")
            return None
        armored = key.sign(text.encode("utf-8"))
        if self.signers is not None:
            try:
                # Valid at the revision's time and now, when it is signed: a key whose entry has expired (or
                # is not valid yet) signs nothing, whatever time the revision says.
                self.signers.verify(text.encode("utf-8"), armored.encode("ascii"), principal_of(revision.author),
                                    created_time(revision.created), datetime.now(UTC).replace(microsecond=0))
            except SignatureError as exc:
                raise SignatureError(f"signing key {key.path}: a revision it signs would be refused: "
                                     f"{exc.lines()[0]}", "list its public key for the author in the allowed "
                                     "signers, or set STACKPIN_AUTHOR to the identity it is listed for") from None
        return armored

    # --- writing ---------------------------------------------------------------------------------

    @contextmanager
    def writing(self, key: DeploymentKey) -> Iterator[Path]:
        """Hold the deployment's lock (one writer at a time); temp files killed writers left are swept."""
        directory = self.directory(key)
        refuse_links_below(self.root, directory / "x")  # <namespace>/ and <deployment>@<platform>/ themselves
        with lock_directory(directory):
            sweep_temp_files(directory)
            yield directory
