"""Records attached to a revision after it was made (a bench result), beside its file:
`<deployment dir>/000003.<kind>.json`. The history does not read them; whoever attaches a kind knows
its format (the bench stage for `bench`), so history stays ahead of those stages in the pipeline.

An attachment is created exclusively under the deployment's lock; attaching different bytes again is
refused unless the caller says to replace it, and attaching the same bytes again changes nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from stackpin.errors import StackpinError
from stackpin.history.model import DeploymentKey, file_name
from stackpin.history.store import HistoryStore
from stackpin.yamlio import MAX_INPUT_BYTES, create_exclusive, read_regular, write_atomic

KIND = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


def attachment_path(store: HistoryStore, key: DeploymentKey, number: int, kind: str) -> Path:
    if not KIND.match(kind):
        raise StackpinError(f"{kind!r} is not an attachment kind (lowercase letters, digits and '-')")
    return store.directory(key) / f"{file_name(number).removesuffix('.yaml')}.{kind}.json"


def attach(store: HistoryStore, key: DeploymentKey, number: int, kind: str, text: str,
           replace: bool = False) -> tuple[Path, str]:
    """Attach `text` to revision `number` (which must exist, verified). Returns the path and what
    happened: created, unchanged or replaced."""
    store.read(key, number)
    with store.writing(key):
        return attach_held(store, key, number, kind, text, replace)


def attach_held(store: HistoryStore, key: DeploymentKey, number: int, kind: str, text: str,
                replace: bool = False) -> tuple[Path, str]:
    """`attach` for a caller already holding the deployment's lock (flock is per open file: taking it
    again would wait forever), such as a `then` hook of history.record, which runs once revision
    `number` is written."""
    path = attachment_path(store, key, number, kind)
    try:
        create_exclusive(path, text)
        return path, "created"
    except FileExistsError:
        pass
    try:
        same = read_regular(path, MAX_INPUT_BYTES, follow=False) == text.encode("utf-8")
    except OSError:  # a link, a FIFO, a huge file where the record should be: replaced only if asked
        same = False
    if same:
        return path, "unchanged"
    if not replace:
        raise StackpinError(f"revision {number} of {key} already has a {kind} record ({path}) that differs; "
                            "--replace to replace it")
    write_atomic(path, text)
    return path, "replaced"
