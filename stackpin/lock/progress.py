"""Progress on stderr for work that can take more than a second, only when a person is watching."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[], None]]:
    """Yields a thread-safe `advance()`; draws a rich progress bar if stderr is a terminal."""
    if not sys.stderr.isatty() or total < 2:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import Progress

    lock = threading.Lock()
    with Progress(transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total)

        def advance() -> None:
            with lock:
                bar.advance(task)

        yield advance
