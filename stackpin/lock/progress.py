"""Progress on stderr for work that can take more than a second, only when a person is watching."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Advance(Protocol):
    def __call__(self, amount: int = 1) -> None: ...


def _nothing(amount: int = 1) -> None:
    pass


@contextmanager
def progress(description: str, total: int, *, transfer: bool = False) -> Iterator[Advance]:
    """Yields a thread-safe `advance(amount=1)`; draws a rich progress bar if stderr is a terminal.
    `transfer`: `total` and the amounts are bytes, shown as sizes and a rate."""
    if not sys.stderr.isatty() or total < 2:
        yield _nothing
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = ((TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                TimeRemainingColumn()) if transfer else Progress.get_default_columns())
    lock = threading.Lock()
    with Progress(*columns, transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total)

        def advance(amount: int = 1) -> None:
            with lock:
                bar.advance(task, amount)

        yield advance
