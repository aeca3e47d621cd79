"""Child processes that do not outlive stackpin (credential helpers, the Dynamo bed's processes).

A process stackpin starts in a session of its own (so that it and what it starts can be killed as a group)
is no longer in stackpin's process group: a terminal's Ctrl-C or a kill of stackpin's group misses it, and
stackpin's own death, kill -9 included, would leave it running. On Linux the kernel closes that gap: a child
that asked with PR_SET_PDEATHSIG gets SIGKILL when the thread that started it ends.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen that makes the child die with this thread (Linux), or None.

    The foreign function is found here, in the parent: between fork and exec the child only calls it and
    os.getppid(), with no import or lookup that a lock held by another thread at fork time could block. The
    thread that starts the child must outlive it (a thread that waits for its child does)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_child() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return in_child
