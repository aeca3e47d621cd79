"""How the CLI process ends (stackpin/cli/main.py `_exit`): without the interpreter's teardown, yet with
everything a user sees of an exit kept: all of stdout, the exit code, atexit functions, threads waited for."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_all_of_a_large_stdout_reaches_a_pipe() -> None:
    # 54 KB of JSON through a pipe: what is still buffered when the command returns is flushed before the
    # process ends.
    done = subprocess.run([sys.executable, "-m", "stackpin", "schema"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["title"]


def test_the_exit_code_and_error_lines_are_kept(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    done = subprocess.run([sys.executable, "-m", "stackpin", "validate", str(missing)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert str(missing) in done.stderr and "Traceback" not in done.stderr


def test_atexit_functions_still_run() -> None:
    done = _python("""
        import atexit, sys
        from stackpin.cli.main import _exit
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("buffered ")
        _exit(3)
    """)
    assert (done.returncode, done.stdout) == (3, "buffered atexit ran\n"), done.stderr


def test_a_running_thread_is_waited_for() -> None:
    # Python waits for a thread that is not a daemon before it exits; so does the CLI.
    done = _python("""
        import threading, time
        from stackpin.cli.main import _exit
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
        _exit(0)
    """)
    assert (done.returncode, done.stdout) == (0, "thread finished\n"), done.stderr


def test_an_exit_message_is_printed_as_python_prints_it() -> None:
    done = _python("""
        from stackpin.cli.main import _exit
        _exit("stopped: no stack")
    """)
    assert (done.returncode, done.stderr) == (1, "stopped: no stack\n")
