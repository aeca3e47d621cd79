"""The bench results attached to a deployment's revisions: the one place the report reads them from.

Until `stackpin bench attach` defines its store, an attachment is a result file beside the revision
(`NNNNNN.bench.json` or `NNNNNN.bench.<anything>.json`, a record name the history leaves alone), plus
the `--result REV=FILE` files given on the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from stackpin.history.model import DeploymentKey, file_name
from stackpin.history.store import HistoryStore


def attached_results(store: HistoryStore, key: DeploymentKey, numbers: Sequence[int],
                     extra: Mapping[int, Sequence[Path]] = {}) -> dict[int, list[Path]]:
    """Revision number -> result files, attached ones first, in name order."""
    directory = store.directory(key)
    found: dict[int, list[Path]] = {}
    for number in numbers:
        stem = file_name(number).removesuffix(".yaml")
        beside = sorted(p for p in directory.glob(f"{stem}.bench*.json") if p.is_file()) if directory.is_dir() else []
        files = [*beside, *extra.get(number, ())]
        if files:
            found[number] = files
    return found
