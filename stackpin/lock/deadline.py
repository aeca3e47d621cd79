"""Wall-clock bounds on network calls. A per-read timeout never fires against a server that sends a
byte every few seconds; only a deadline on the whole call (and on the whole run) ends it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from stackpin.errors import ResolveError

T = TypeVar("T")


class DeadlineExceeded(ResolveError):
    """A call, or the run it belongs to, ran out of time."""


def remaining(limit: float, deadline_at: float | None) -> float:
    """Seconds a call may take: its own limit, cut short by the run's deadline (a monotonic instant)."""
    return limit if deadline_at is None else min(limit, deadline_at - time.monotonic())


def call_with_deadline(fn: Callable[[], T], seconds: float, what: str) -> T:
    """fn() in a daemon thread, abandoned after `seconds`: the caller gets DeadlineExceeded naming
    `what`, the thread ends when its connection is closed, and it never holds up the process's exit."""
    if seconds <= 0:
        raise DeadlineExceeded(f"{what}: not started, the run's deadline has passed")
    box: Future[T] = Future()

    def target() -> None:
        try:
            box.set_result(fn())
        except BaseException as exc:  # handed to the caller, who re-raises it
            box.set_exception(exc)

    threading.Thread(target=target, name="stackpin-io", daemon=True).start()
    done = threading.Event()
    box.add_done_callback(lambda _: done.set())
    if not done.wait(seconds):
        raise DeadlineExceeded(f"{what}: no complete answer within {seconds:g}s")
    return box.result()
