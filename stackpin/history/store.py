"""The history store: `<root>/<namespace>/<deployment>@<platform>/000001.yaml`, one file per revision.

Readers take no lock: a revision file appears whole (hard-linked from a fsynced temp file) and never
changes, and names that are not `NNNNNN.yaml` (temp files, records attached later) are not revisions.
Writers hold an exclusive flock on the deployment's directory and create the next number's file
exclusively, so two writers can neither take one number nor skip one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from stackpin.errors import StackpinError, clip
from stackpin.history.model import DIRECTORY_NAME, DeploymentKey, Revision, RevisionError, file_name, read_revision
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


def revision_in(chain: list[Revision], key: DeploymentKey, number: int) -> Revision:
    """Revision `number` of a verified chain; a number out of range is a one-line error."""
    if not 1 <= number <= len(chain):
        span = f"revisions 1 to {len(chain)}" if chain else "no revisions"
        raise StackpinError(f"revision {number} of {key} is out of range: it has {span}")
    return chain[number - 1]


class HistoryStore:
    """Deployments' histories under one root directory (`--history`, default `history/`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

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
        return revision_in(self.revisions(key), key, number)

    def lock_at(self, query: str, number: int) -> StackLock:
        """The stack of revision `number` of the deployment `query` names (see `resolve`), verified."""
        return self.read(self.resolve(query), number).lock

    def newest(self, key: DeploymentKey) -> Revision | None:
        """The newest revision, its whole chain verified."""
        chain = self.revisions(key)
        return chain[-1] if chain else None

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

    def revisions(self, key: DeploymentKey) -> list[Revision]:
        """Every revision, oldest first, each verified and chained to the one before it, the newest at least
        the one the head records: a missing, edited, replaced or truncated revision is an error naming its
        file."""
        out = self._chain(key)
        head = self.head(key)
        if head is not None:
            number, digest = head
            # A writer killed between its revision and the head leaves the head one behind: still anchored.
            if len(out) < number:
                raise RevisionError(self.path(key, number), f"revision {number} of {key} is missing, and the head "
                                    f"records it as the newest (the newest revision was deleted?)")
            if out[number - 1].revision_digest != digest:
                raise RevisionError(self.path(key, number), f"is not the revision {number} the head records "
                                    "(replaced?)")
        return out

    def _chain(self, key: DeploymentKey) -> list[Revision]:
        out: list[Revision] = []
        for expected, number in enumerate(self.numbers(key), 1):
            if number != expected:
                raise RevisionError(self.path(key, expected), f"revision {expected} of {key} is missing "
                                    f"(revisions are never deleted; {file_name(number)} follows)")
            revision = read_revision(self.path(key, number), key, number)
            previous = out[-1].revision_digest if out else None
            if revision.previous_digest != previous:
                raise RevisionError(self.path(key, number), "previousDigest is not the revisionDigest of revision "
                                    f"{number - 1} (a revision before it was replaced?)" if previous else
                                    "revision 1 names a previous revision")
            out.append(revision)
        return out

    # --- writing ---------------------------------------------------------------------------------

    @contextmanager
    def writing(self, key: DeploymentKey) -> Iterator[Path]:
        """Hold the deployment's lock (one writer at a time); temp files killed writers left are swept."""
        directory = self.directory(key)
        refuse_links_below(self.root, directory / "x")  # <namespace>/ and <deployment>@<platform>/ themselves
        with lock_directory(directory):
            sweep_temp_files(directory)
            yield directory
