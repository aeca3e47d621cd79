"""What a deployment's history is made of: the key that names a deployment, and revisions.

A revision is one immutable YAML file holding its number, who made it, when and why, what it did
(promote a lock, or roll back to an earlier revision's stack), the whole `StackLock` (so a revision
stands alone, whatever happens to `lockfiles/` later), the revision digest of the one before it, and
`revisionDigest`: sha256 over the canonical JSON of every other field. Reading checks both that digest
and the lock's own `stackDigest`, so an edited revision is refused, naming its file.
"""

from __future__ import annotations

import errno
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec

from stackpin.errors import StackpinError, clip
from stackpin.history.identity import author_problem
from stackpin.lock.lockfile import StackLock, profile_problems, sha256, stack_digest
from stackpin.profile.k8s_names import DNS_LABEL, DNS_LABEL_MAX
from stackpin.records import CamelRecord, Invalid, anchored, problems_of
from stackpin.yamlio import MAX_INPUT_BYTES, dump_yaml, load_data, read_regular

REVISION_KIND: Final = "StackRevision"
API_VERSION: Final = "stackpin.dev/v1"
CREATED_PATTERN = anchored(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
# Line breaks and tabs are a message's own; other control characters would not read back the same, and a
# listing prints the message's first line: refused when a message is written and when a revision is read.
MESSAGE_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
# A deployment's directory: `<name>@<platform>` (the platform keeps two racks' histories apart).
DIRECTORY_NAME = re.compile(rf"^(?P<name>{DNS_LABEL})@(?P<platform>{DNS_LABEL})$")

Label = Annotated[str, msgspec.Meta(pattern=anchored(rf"^{DNS_LABEL}$"), max_length=DNS_LABEL_MAX)]


class DeploymentKey(CamelRecord, frozen=True):
    """A deployment as its history is kept: the same `metadata.deployment` on another platform (the
    GB300 and Vera Rubin stacks are both `dsv41-flash`) or in another namespace is another history."""

    namespace: Label
    name: Label
    platform: Label

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}@{self.platform}"

    @property
    def dirname(self) -> str:
        return f"{self.name}@{self.platform}"

    @classmethod
    def of_lock(cls, lock: StackLock) -> DeploymentKey:
        profile = lock.stack_profile
        return cls(namespace=profile.metadata.namespace, name=profile.metadata.deployment,
                   platform=str(profile.spec.target.platform))  # a StrEnum member: its value


class ActionKind(StrEnum):
    promote = "promote"
    rollback = "rollback"


# omit_defaults: a promote's data is {"kind": "promote"}, with no revision key.
class Action(CamelRecord, frozen=True, omit_defaults=True):
    """What made a revision: a promoted lock, or a rollback to the stack of revision `revision`."""

    kind: ActionKind
    revision: Annotated[int, msgspec.Meta(ge=1)] | None = None

    def __post_init__(self) -> None:
        if (self.kind == ActionKind.rollback) != (self.revision is not None):
            raise Invalid("revision", "a rollback names the revision it restores (revision:); a promote names none")

    def __str__(self) -> str:
        return f"rollback to {self.revision}" if self.kind == ActionKind.rollback else "promote"


class Revision(CamelRecord, frozen=True, kw_only=True):  # kw_only again for mypy, as frozen
    api_version: Literal["stackpin.dev/v1"] = API_VERSION
    kind: Literal["StackRevision"] = REVISION_KIND
    deployment: DeploymentKey
    revision: Annotated[int, msgspec.Meta(ge=1)]
    created: Annotated[str, msgspec.Meta(pattern=CREATED_PATTERN, description="UTC, seconds.")]
    author: Annotated[str, msgspec.Meta(min_length=1)]
    message: Annotated[str, msgspec.Meta(min_length=1)]
    action: Action
    stack_digest: str
    previous_digest: Annotated[str | None, msgspec.Meta(
        description="revisionDigest of the revision before; none for 1.")] = None
    revision_digest: str
    lock: StackLock

    def to_data(self) -> dict[str, Any]:
        """The revision as its file holds it: no previousDigest for revision 1, the lock as lockfiles write it."""
        data = super().to_data()
        if data["previousDigest"] is None:
            del data["previousDigest"]
        data["lock"] = self.lock.to_data(exclude_none=True)
        return data

    @property
    def short_digest(self) -> str:
        return self.lock.short_digest

    @property
    def stack(self) -> str:
        """The stack's name (the lock's metadata.name)."""
        return self.lock.metadata.name

    @property
    def stack_label(self) -> str:
        return self.summary().stack_label

    @property
    def action_label(self) -> str:
        """`promote gb300-tuned` or `rollback to 1 (gb300-launch)`: how tables and pages name what made it."""
        return self.summary().action_label

    def summary(self) -> RevisionSummary:
        return RevisionSummary(self.revision, self.stack, self.stack_digest, self.created, self.author, self.message,
                               self.action.to_data(), self.revision_digest, self.lock.resolved.stand_in)


STAND_IN_NOTE = ("(stand-in): its lock holds a demo mirror's stand-in pins, not production digests; apply, "
                 "rollback --apply and rollout start refuse it without --allow-stand-ins")


class RevisionSummary(msgspec.Struct, frozen=True):
    """What a listing shows of a revision: everything but its lock. Plain data (no model to build), so a
    listing can take it from the verified cache without parsing the revision file again."""

    revision: int
    stack: str  # the stack's name
    stack_digest: str
    created: str
    author: str
    message: str
    action: dict[str, Any]  # {"kind": "promote"} or {"kind": "rollback", "revision": N}
    revision_digest: str
    stand_in: bool = False  # the lock holds stand-in pins (a demo mirror's): not production digests

    @property
    def short_digest(self) -> str:
        return self.stack_digest.removeprefix("sha256:")[:12]

    @property
    def stack_label(self) -> str:
        """The short digest as tables show it, marked when its pins are stand-ins (see STAND_IN_NOTE)."""
        return f"{self.short_digest} (stand-in)" if self.stand_in else self.short_digest

    @property
    def action_label(self) -> str:
        """`promote STACK`, or `rollback to N (STACK)`: how tables and pages name what made it."""
        if self.action.get("kind") == ActionKind.rollback:
            return f"rollback to {self.action.get('revision')} ({self.stack})"
        return f"promote {self.stack}"

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RevisionSummary:
        return cls(data["revision"], data["stack"], data["stackDigest"], data["created"], data["author"],
                   data["message"], data["action"], data["revisionDigest"], data["standIn"])

    def data(self) -> dict[str, Any]:
        """The JSON of a revision as `history -o json` and `promote -o json` print it."""
        return {"revision": self.revision, "stack": self.stack, "stackDigest": self.stack_digest,
                "created": self.created, "author": self.author, "message": self.message, "action": self.action,
                "revisionDigest": self.revision_digest, "standIn": self.stand_in}


class RevisionError(StackpinError):
    """A revision file that cannot be trusted: unreadable, edited, or out of place (exit 2)."""

    def __init__(self, path: Path, problem: str,
                 hint: str = "revisions are written once and never edited: restore the file from version control"
                 ) -> None:
        super().__init__(f"{path}: {' '.join(problem.split())}", hint)  # one line, whatever a value held


def file_name(number: int) -> str:
    return f"{number:06d}.yaml"


def _sorted(value: Any) -> Any:
    """Every mapping's keys in order, so a section dumps as `dump_yaml` sorts (lockfiles read the same)."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _document(body: dict[str, Any]) -> dict[str, Any]:
    """The file's top-level order: who, when and why first, the (long) lock last."""
    order = ("apiVersion", "kind", "deployment", "revision", "created", "author", "message", "action",
             "stackDigest", "previousDigest", "revisionDigest", "lock")
    return {key: _sorted(body[key]) for key in order if key in body}


def new_revision(key: DeploymentKey, number: int, lock: StackLock, *, created: str, author: str, message: str,
                 action: Action, previous: Revision | None) -> Revision:
    """The next revision of `key`, its digest computed over exactly what its file will hold."""
    body = {
        "apiVersion": API_VERSION, "kind": REVISION_KIND,
        "deployment": key.to_data(), "revision": number, "created": created,
        "author": author, "message": message, "action": action.to_data(),
        "stackDigest": lock.stack_digest,
        "lock": lock.to_data(exclude_none=True),
    }
    if previous is not None:
        body["previousDigest"] = previous.revision_digest
    return msgspec.convert({**body, "revisionDigest": sha256(body)}, Revision)


def revision_text(revision: Revision) -> str:
    """The bytes of a revision file: the same revision always gives the same bytes."""
    data = _document(revision.to_data())
    text = dump_yaml(data, sort_keys=False)
    if load_data(text) != data:  # what is read back must be what was hashed
        raise StackpinError(f"revision {revision.revision} of {revision.deployment}: a value does not survive a "
                            "YAML round trip (a control character in the message or author?)")
    header = (f"# Revision {revision.revision} of deployment {revision.deployment}, recorded by `stackpin "
              f"{revision.action.kind.value}`; never edited.\n"
              "# revisionDigest: sha256 over the canonical JSON of every other field; reading checks it.\n")
    if revision.lock.resolved.stand_in:
        header += "# STAND-IN PINS: resolved through a demo mirror; not production digests.\n"
    return header + text


def read_revision_bytes(path: Path) -> bytes:
    """The bytes of a revision file: a regular file, not followed through a symbolic link, read with a byte
    limit (a device, FIFO or link to one would otherwise be read forever or block)."""
    try:
        return read_regular(path, MAX_INPUT_BYTES, follow=False)
    except FileNotFoundError:
        raise RevisionError(path, "no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RevisionError(path, "is a symbolic link, not a revision file") from None
        if exc.strerror == "not a regular file":
            raise RevisionError(path, "is not a regular file") from None
        if exc.errno == 0:
            raise RevisionError(path, f"is more than a revision can be ({MAX_INPUT_BYTES:,} bytes)") from None
        raise RevisionError(path, f"cannot read: {exc.strerror}") from None


def read_revision(path: Path, key: DeploymentKey, number: int) -> Revision:
    """Read and verify the revision file `path`: revision `number` of `key`. Raises RevisionError."""
    return parse_revision(read_revision_bytes(path), path, key, number)


def parse_revision(raw: bytes, path: Path, key: DeploymentKey, number: int) -> Revision:
    """Verify the bytes `raw` of the revision file `path` as revision `number` of `key`."""
    import yaml

    try:
        data = load_data(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RevisionError(path, "is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise RevisionError(path, f"invalid YAML{where}: {getattr(exc, 'problem', None) or 'not YAML'}") from None
    if not isinstance(data, dict) or data.get("kind") != REVISION_KIND:
        raise RevisionError(path, f"not a {REVISION_KIND}")
    body = {k: v for k, v in data.items() if k != "revisionDigest"}
    try:
        digest = sha256(body)
    except (TypeError, ValueError):  # a value YAML typed as a date or a set: not what stackpin wrote
        digest = None
    if digest is None or data.get("revisionDigest") != digest:
        raise RevisionError(path, "revisionDigest does not match the file's content (edited by hand?)")
    try:
        revision = msgspec.convert(data, Revision)
    except msgspec.ValidationError:
        problems = problems_of(data, Revision)
    else:  # the embedded profile must be a valid profile too
        problems = [(("lock", *at), message) for at, message in profile_problems(revision.lock)]
    if problems:
        at, message = problems[0]
        where = ".".join(map(str, at))
        raise RevisionError(path, f"{where}: {message}" if where else message)
    problem = author_problem(revision.author)
    if problem is not None:
        raise RevisionError(path, f"author {clip(revision.author)!r} {problem}")
    if MESSAGE_CONTROL.search(revision.message):
        raise RevisionError(path, f"message {clip(revision.message)!r} holds a control character (stackpin writes "
                            "text, line breaks and tabs only)")
    lock = revision.lock
    if stack_digest(lock.profile, lock.resolved) != lock.stack_digest:
        raise RevisionError(path, "lock.stackDigest does not match the lock's content")
    if revision.stack_digest != lock.stack_digest:
        raise RevisionError(path, f"stackDigest {revision.stack_digest} is not its lock's ({lock.stack_digest})")
    if revision.revision != number:
        raise RevisionError(path, f"holds revision {revision.revision}, but its file name says {number}")
    if revision.deployment != key:
        raise RevisionError(path, f"is a revision of {revision.deployment}, not of {key} (its directory)")
    if DeploymentKey.of_lock(lock) != key:
        raise RevisionError(path, f"its lock is a stack of deployment {DeploymentKey.of_lock(lock)}, not {key}")
    return revision
