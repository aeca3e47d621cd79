"""A per-user cache of revision files already verified, keyed by the sha256 of their bytes.

Verifying a chain means parsing every revision's YAML and hashing its canonical JSON: about 2 ms a
revision, 2 s for a history of 1,000, paid by every promote. A revision never changes, so once its bytes
verified as revision N of a deployment (digest, lock digest, name, place), the same bytes verify the
same way again: a later read hashes the file (a few microseconds) and takes the verified facts from
here. Any other bytes miss and are verified in full, so an edited, replaced or forged file is caught
exactly as without the cache. A signature is likewise remembered as verified for the exact bytes of
the revision, the signature and the allowed-signers file together. The links between revisions and the
head are checked on every read.

A listing (`stackpin history DEPLOYMENT`) takes what it shows from here too: each revision's summary
(everything but its lock) for the same bytes, and the CHANGE line for the same two files in a row. So a
history of 1,000 revisions lists in the time it takes to hash its files, once it has been read in full.

The cache lives with the user, not the history (`$STACKPIN_CACHE_DIR`, else `$XDG_CACHE_HOME/stackpin`,
else `~/.cache/stackpin`; `STACKPIN_CACHE_DIR=` turns it off): whoever can write the history cannot vouch
for a file through it. A cache that is unreadable, from another stackpin, or malformed is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

import stackpin.jsonio as jsonio
from stackpin.errors import StackpinError
from stackpin.version import __version__
from stackpin.yamlio import read_regular, write_atomic

# Bumped when what `read_revision` checks, or what a summary or CHANGE line holds, changes: entries made
# under older rules are not reused.
RULES = 3  # 3: an author with two addresses is refused
MAX_CACHE_BYTES = 32 * 1024 * 1024
MAX_ENTRIES = 20_000  # about 5 MB


class Verified(msgspec.Struct, frozen=True):
    """What a full read of a revision file established."""

    number: int
    revision_digest: str
    previous_digest: str | None
    author: str  # who signs it (signing.principal_of) and when: a signature is checked on every read
    created: str


_SUMMARY_TYPES = {"revision": int, "stack": str, "stackDigest": str, "created": str, "author": str, "message": str,
                  "action": dict, "revisionDigest": str, "standIn": bool}


def _summary_data(value: Any) -> dict[str, Any]:
    """A cached summary as a RevisionSummary's data(), its fields and types checked (TypeError if not)."""
    if not isinstance(value, dict) or set(value) != set(_SUMMARY_TYPES) or \
            any(not isinstance(value[k], t) for k, t in _SUMMARY_TYPES.items()):
        raise TypeError("not a revision summary")
    return value


def content_key(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def cache_dir(env: Mapping[str, str] = os.environ) -> Path | None:
    if "STACKPIN_CACHE_DIR" in env:
        return Path(env["STACKPIN_CACHE_DIR"]) if env["STACKPIN_CACHE_DIR"] else None
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stackpin"


class VerifiedCache:
    """The verified facts of one deployment's revision files (one JSON file per deployment)."""

    def __init__(self, directory: Path | None, deployment: str) -> None:
        name = hashlib.sha256(deployment.encode()).hexdigest()[:32]
        self.path = directory / "verified-revisions" / f"{name}.json" if directory else None
        self.stamp = f"{__version__}/{RULES}/{deployment}"
        self.entries: dict[str, Verified] = {}
        # sha256 over (file, signature, allowed-signers file) -> the signer's fingerprint: the same three
        # inputs always verify the same way (the time checked is the revision's own `created`).
        self.signed: dict[str, str] = {}
        # sha256 of a file -> its RevisionSummary's data();
        # sha256 of (summarizer, two files in a row) -> the CHANGE line.
        self.listed: dict[str, dict[str, Any]] = {}
        self.changes: dict[str, str] = {}
        self.dirty = False
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = jsonio.loads(read_regular(self.path, MAX_CACHE_BYTES, follow=False))
            if data.get("stamp") != self.stamp:
                return
            entries = {k: Verified(int(n), str(d), None if p is None else str(p), str(a), str(c))
                       for k, (n, d, p, a, c) in data["entries"].items()}
            signed = {str(k): str(v) for k, v in data.get("signed", {}).items()}
            listed = {str(k): _summary_data(v) for k, v in data.get("listed", {}).items()}
            changes = {str(k): v for k, v in data.get("changes", {}).items() if isinstance(v, str)}
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return
        self.entries, self.signed, self.listed, self.changes = entries, signed, listed, changes

    def get(self, raw_key: str) -> Verified | None:
        return self.entries.get(raw_key)

    def put(self, raw_key: str, facts: Verified) -> None:
        self._set(self.entries, raw_key, facts)

    def signer(self, signed_key: str) -> str | None:
        return self.signed.get(signed_key)

    def put_signer(self, signed_key: str, fingerprint: str) -> None:
        self._set(self.signed, signed_key, fingerprint)

    def summary(self, raw_key: str) -> dict[str, Any] | None:
        return self.listed.get(raw_key)

    def put_summary(self, raw_key: str, data: dict[str, Any]) -> None:
        self._set(self.listed, raw_key, data)

    def change(self, summarizer: str, before: str, after: str) -> str | None:
        return self.changes.get(content_key(f"{summarizer} {before} {after}".encode()))

    def put_change(self, summarizer: str, before: str, after: str, line: str) -> None:
        self._set(self.changes, content_key(f"{summarizer} {before} {after}".encode()), line)

    def _set(self, table: dict[str, Any], key: str, value: object) -> None:
        if table.get(key) != value:
            table[key] = value
            self.dirty = True

    def save(self, keep: set[str]) -> None:
        """Write the entries back when any were added (other checkouts of the same deployment share them);
        past MAX_ENTRIES only those of the files in `keep`, the chain just read. Failures are ignored."""
        if self.path is None or not self.dirty:
            return
        entries = {k: [v.number, v.revision_digest, v.previous_digest, v.author, v.created]
                   for k, v in self.entries.items() if k in keep or len(self.entries) <= MAX_ENTRIES}
        signed = self.signed if len(self.signed) <= MAX_ENTRIES else {}
        listed = {k: v for k, v in self.listed.items() if k in keep or len(self.listed) <= MAX_ENTRIES}
        changes = self.changes if len(self.changes) <= MAX_ENTRIES else {}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps({"stamp": self.stamp, "entries": entries, "signed": signed,
                                                "listed": listed, "changes": changes}, sort_keys=True))
            self.dirty = False
        except (OSError, StackpinError):
            pass
