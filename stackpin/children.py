"""Child processes that do not outlive stackpin (credential helpers, the simulators' processes, test services).

A process stackpin starts in a session of its own (so that it and what it starts can be killed as a group)
is no longer in stackpin's process group: a terminal's Ctrl-C or a kill of stackpin's group misses it, and
stackpin's own death, kill -9 included, would leave it running. Three things close that gap:

- `die_with_parent`: on Linux the kernel sends a child that asked with PR_SET_PDEATHSIG SIGKILL when the
  thread that started it ends, kill -9 of stackpin included.
- `Children`: the process groups and temporary directories one command owns. `close()` ends every group
  (SIGTERM, a bounded grace, then SIGKILL) and removes the directories. A janitor process it starts with
  the first of them is told each group and directory as it is made, and does the same the moment stackpin
  dies without closing (kill -9): what a direct child started in its group, and the files, go too.
- `stop_on_signals`: SIGINT and SIGTERM only set a flag (and wake whoever waits) for the command to stop
  in order and exit 128 + the signal's number. A handler that raised instead could land anywhere, inside
  Popen.poll() holding its lock or between a start and its registration, and leave a child behind.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
GRACE_S = 10.0  # SIGTERM -> SIGKILL: a bound on a stop, never a wait a busy host must meet
REAP_S = 30.0  # after SIGKILL: a process the kernel has not freed by then is left, not waited on for ever


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen that makes the child die with this thread (Linux), or None.

    The foreign function is found here, in the parent: between fork and exec the child only calls it and
    os.getppid(), with no import or lookup that a lock held by another thread at fork time could block. The
    thread that starts the child must outlive it (a thread that waits for its child does)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def in_child() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return in_child


def die_with_parent_now() -> None:
    """In a forked child that does not exec (multiprocessing's fork): die with the parent from here on."""
    prctl = _prctl()
    if prctl is not None:
        parent = os.getppid()
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if parent == 1 or os.getppid() != parent:
            os._exit(1)


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def spawn(argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """Popen in a session (process group) of its own that dies with this thread."""
    return subprocess.Popen(list(argv), start_new_session=True, preexec_fn=die_with_parent(),  # noqa: PLW1509
                            **popen)


def end_groups(processes: Sequence[subprocess.Popen[Any]], grace: float = GRACE_S) -> None:
    """SIGTERM every process's group (the last started first), wait up to `grace` seconds for the leaders
    together, SIGKILL the groups (what ignored SIGTERM, or outlived its leader), and reap each (bounded).

    A leader is reaped only after its group's SIGKILL: until then its id cannot be another process's, so
    no signal here reaches a stranger. One reaped before (a helper that had finished) is not signalled."""
    live = [p for p in processes if p.returncode is None]
    for process in reversed(live):
        _killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not all(_exited(p.pid) for p in live):
        time.sleep(0.05)
    for process in live:
        _killpg(process.pid, signal.SIGKILL)
    for process in live:
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=REAP_S)


def _exited(pid: int) -> bool:
    """Whether a child has ended, without reaping it (its id stays its own)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:  # reaped already
        return True


def _killpg(pgid: int, number: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pgid) != pgid:  # a child not started in a group of its own (a plain Popen): it alone
            os.kill(pgid, number)
        else:
            os.killpg(pgid, number)


# The janitor: run by this Python (-I -S: no site, no user paths), reading what to clean on stdin. "g PGID"
# and "d PATH" add a group and a directory; "x" says stackpin cleaned up itself. At end of input (stackpin
# has exited, whatever way) without "x": SIGKILL to every group, a bounded wait for them to go, the
# directories removed. It is in a session of its own, so that a terminal's Ctrl-C leaves it to do this.
_JANITOR = r"""
import os, shutil, signal, sys, time
groups, dirs, done = [], [], False
for line in sys.stdin.buffer:
    kind, _, arg = line.rstrip(b"\n").partition(b" ")
    if kind == b"g":
        groups.append(int(arg))
    elif kind == b"d":
        dirs.append(os.fsdecode(arg))
    elif kind == b"x":
        done = True
if not done:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 10
    for pgid in groups:
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except OSError:
                break
            time.sleep(0.02)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
"""


class Children:
    """The process groups and temporary directories of one command: `close()` (or the `with` block's end)
    ends the groups and removes the directories; the janitor does it if this process dies first."""

    def __init__(self, grace: float = GRACE_S) -> None:
        self.grace = grace
        self.processes: list[subprocess.Popen[Any]] = []
        self.dirs: list[Path] = []
        self._janitor: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _tell(self, line: bytes) -> None:
        if self._janitor is None:
            self._janitor = subprocess.Popen([sys.executable, "-I", "-S", "-c", _JANITOR], stdin=subprocess.PIPE,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                             start_new_session=True)
        assert self._janitor.stdin is not None
        with suppress(OSError):  # a janitor that is gone leaves the parent's own cleanup, which still runs
            self._janitor.stdin.write(line + b"\n")
            self._janitor.stdin.flush()

    def temp_dir(self, prefix: str) -> Path:
        """A new private directory, removed by close() (and by the janitor): named to it before it exists."""
        with self._lock:
            path = Path(tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(6)}"
            self._tell(b"d " + os.fsencode(path))
            self.dirs.append(path)
            path.mkdir(mode=0o700)
            return path

    def spawn(self, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """`spawn` (its own group, dying with this thread), the group ended by close()."""
        with self._lock:
            if self._janitor is None:
                self._tell(b"")  # the janitor runs before the first child does
            process = spawn(argv, **popen)
            self.processes.append(process)
            self._tell(b"g %d" % process.pid)
            return process

    def close(self) -> None:
        with self._lock:
            end_groups(self.processes, self.grace)
            import shutil

            for path in self.dirs:
                shutil.rmtree(path, ignore_errors=True)
            if self._janitor is not None:
                self._tell(b"x")
                with suppress(OSError):
                    assert self._janitor.stdin is not None
                    self._janitor.stdin.close()
                with suppress(subprocess.TimeoutExpired):
                    self._janitor.wait(timeout=REAP_S)
                self._janitor = None


class Stop:
    """What SIGINT or SIGTERM asked: `signum` (0 until one came), `event` set by it, `exit_code` 128 + it."""

    def __init__(self) -> None:
        self.signum = 0
        self.event = threading.Event()
        self._wakers: list[Callable[[], object]] = []

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else 0

    def on_stop(self, wake: Callable[[], object]) -> None:
        """Call `wake` when a signal comes (at once if one came already); it must only set flags."""
        self._wakers.append(wake)
        if self.event.is_set():
            wake()

    def _signalled(self, number: int, _frame: object) -> None:
        if self.signum:  # a second Ctrl-C while stopping: the stop already under way goes on
            return
        self.signum = number
        self.event.set()
        for wake in self._wakers:
            wake()


@contextmanager
def stop_on_signals() -> Iterator[Stop]:
    """SIGINT and SIGTERM set the yielded Stop for the block (even where they were ignored when this process
    started, as a shell does for a background job); the previous handlers come back after."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # only the main thread may take signals: the caller's own stop applies
        return
    previous = {number: signal.signal(number, stop._signalled) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
