"""The bench results attached to a deployment's revisions: the one place the report reads them from.

An attached result is the file `stackpin bench attach` writes beside the revision,
`<deployment dir>/NNNNNN.bench.json` (a record name the history leaves alone), plus the
`--result REV=FILE` files given on the command line. Once the history's attachment store is in this
tree, `history.attachments.attachment_path(store, key, number, "bench")` names the same file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from stackpin.history.model import DeploymentKey, file_name
from stackpin.history.store import HistoryStore


def attached_results(store: HistoryStore, key: DeploymentKey, numbers: Sequence[int],
                     extra: Mapping[int, Sequence[Path]] = {}) -> dict[int, list[Path]]:
    """Revision number -> result files, the attached one first."""
    directory = store.directory(key)
    found: dict[int, list[Path]] = {}
    for number in numbers:
        attached = directory / f"{file_name(number).removesuffix('.yaml')}.bench.json"
        files = [*([attached] if attached.is_file() else []), *extra.get(number, ())]
        if files:
            found[number] = files
    return found
