"""No process outlives its command (issue 37): each long-running command that starts children is killed at
seeded random moments (while starting, while serving, during a request) with SIGINT, SIGTERM and SIGKILL,
beside a CPU burner, and afterwards no process it started is left and no temporary directory either.

A process counts as the command's when its environment carries the run's own token (every child inherits
it, in whatever session or group it put itself), so nothing is found by name or port, and other tests'
processes are never counted. The command's temporary directories are counted in a TMPDIR of its own."""

from __future__ import annotations

import os
import random
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from stackpin.children import Children, stop_on_signals
from stackpin.cli.main import main
from stackpin.sim.server import serve_in_thread
from tests.helpers import cpu_burners
from tests.ownenv import own_env

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
DYNAMO = Path(os.environ.get("STACKPIN_DYNAMO_ENV", ROOT / ".dynamobed" / "dynamo-1.6.1"))
TOKEN = "STACKPIN_TEST_OWNER"
SETTLE_S = 30.0  # a bound on the wait for the command's processes to go: a busy host only makes it longer


def _marked(token: str) -> list[int]:
    """Processes whose environment carries `token` (zombies included: one not reaped is still there)."""
    needle = f"{TOKEN}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # gone, or not ours to read
                pass
    return found


def _settled(token: str, tmp: Path) -> tuple[list[int], list[str]]:
    """What is left of a run once it had SETTLE_S to go: (marked processes, entries in its TMPDIR)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        left, files = _marked(token), sorted(p.name for p in tmp.iterdir())
        if (not left and not files) or time.monotonic() > deadline:
            return left, files
        time.sleep(0.1)


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid}: " + (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]).decode())
        except OSError:
            out.append(f"{pid}: gone")
    return out


class Run:
    """One command, its own token and TMPDIR, its stderr read line by line (a full pipe never blocks it)."""

    def __init__(self, argv: list[str], tmp: Path) -> None:
        self.token, self.tmp = secrets.token_hex(8), tmp
        tmp.mkdir()
        env = {**os.environ, TOKEN: self.token, "TMPDIR": str(tmp)}
        self.proc = subprocess.Popen([sys.executable, "-m", "stackpin", *argv], cwd=ROOT, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.lines: list[str] = []
        self.announced = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if " on http://" in line:
                self.announced.set()
        self.announced.set()  # ended: whoever waits stops waiting

    def url(self) -> str:
        found = [m.group(1) for line in self.lines if (m := re.search(r" on (http://127\.0\.0\.1:\d+)", line))]
        assert found, self.lines
        return found[0]

    def kill(self, how: signal.Signals) -> int:
        """Send `how` to the command alone (its children are in their own groups), as a supervisor does;
        the exit status once it ended (bounded)."""
        os.kill(self.proc.pid, how)
        try:
            return self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def check(self, how: signal.Signals, code: int, announced: bool) -> None:
        left, files = _settled(self.token, self.tmp)
        assert not left, (how, _describe(left), self.lines[-5:])
        assert not files, (how, files)
        if how == signal.SIGKILL:
            assert code == -signal.SIGKILL
        elif announced:  # its handlers were in place: it stopped in order and says why it ended
            assert code == 128 + how, (how, code, self.lines[-5:])
        else:  # a signal during start-up may come before stackpin's handlers, when nothing is started yet:
            # the default's end (-N), or click's "Aborted!" (1) for a Ctrl-C while the command line is parsed
            assert code in {128 + how, -how, 1 if how == signal.SIGINT else -how}, (how, code, self.lines[-5:])


def _request(url: str) -> threading.Thread:
    """A streamed request kept going in a thread (its failure, once the server is killed, is expected)."""
    def send() -> None:
        try:
            body = {"model": "m", "messages": [{"role": "user", "content": "w " * 2000}], "max_tokens": 4000,
                    "stream": True, "ignore_eos": True}
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60,
                              follow_redirects=True) as response:
                for _ in response.iter_bytes():
                    pass
        except (httpx.HTTPError, OSError):
            pass
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _kill_at(run: Run, moment: str, how: signal.Signals, rng: random.Random, start_s: float) -> None:
    if moment == "starting":
        run.announced.wait(rng.uniform(0, start_s))
    else:
        assert run.announced.wait(300), run.lines
        assert run.proc.poll() is None, run.lines
        if moment == "request":
            _request(_serving(run.url()))
            time.sleep(rng.uniform(0.05, 0.5))
        else:
            time.sleep(rng.uniform(0, 0.5))
    announced = bool(run.lines) and any(" on http://" in line for line in run.lines)
    run.check(how, run.kill(how), announced)


def _serving(url: str) -> str:
    """Where requests go: the simulator itself, or the Dynamo bed's frontend it names."""
    return str(httpx.get(url + "/stackpin/sim", timeout=30).json().get("serving", url))


MOMENTS = ("starting", "serving", "request")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


@pytest.fixture(scope="module")
def busy() -> Iterator[None]:
    """Run beside a CPU burner (the tests that take it name it: `@pytest.mark.usefixtures("busy")`)."""
    with cpu_burners(1):  # one burner: the host busy, not starved (other tests share it too)
        yield


@pytest.mark.usefixtures("busy")
def test_sim_serve_leaves_nothing(tmp_path: Path) -> None:
    rng = random.Random(37)
    for i, (how, moment) in enumerate((h, m) for h in SIGNALS for m in MOMENTS):
        run = Run(["sim", "serve", str(LOCK), "--port", "0", "--speed", "1"], tmp_path / f"r{i}")
        _kill_at(run, moment, how, rng, start_s=1.5)


@pytest.mark.usefixtures("busy")
def test_dynamo_bed_leaves_nothing(tmp_path: Path) -> None:
    """The bed's broker, frontend, mocker and janitor, and its temporary directory: after Ctrl-C, SIGTERM
    and kill -9 of `sim serve --backend dynamo`, at a moment drawn for each (seeded)."""
    env = own_env(DYNAMO / "bin" / "python", ROOT / ".dynamobed" / "UNAVAILABLE", "Dynamo bed", "dynamo-env",
                  "STACKPIN_REQUIRE_DYNAMO").parent.parent
    rng = random.Random(1937)
    for i, how in enumerate(SIGNALS):
        moment = rng.choice(MOMENTS)
        run = Run(["sim", "serve", str(LOCK), "--backend", "dynamo", "--share", "9", "--port", "0",
                   "--dynamo-env", str(env)], tmp_path / f"r{i}")
        _kill_at(run, moment, how, rng, start_s=8.0)


def _trace(path: Path) -> Path:
    made = CliRunner().invoke(main, ["trace", "gen", "--sessions", "8", "--seed", "3", "--param", "turns.max=4",
                                     "--param", "output.median=400", "--out", str(path)])
    assert made.exit_code == 0, made.output
    return path


@pytest.mark.usefixtures("busy")
def test_bench_run_leaves_no_worker(tmp_path: Path) -> None:
    """`bench run --workers 2` forks its workers: killed while starting or mid-point, none is left."""
    rng = random.Random(3737)
    trace = _trace(tmp_path / "t.jsonl")
    with serve_in_thread(LOCK, speed=1.0) as sim:
        for i, how in enumerate(SIGNALS):
            run = Run(["bench", "run", "--endpoint", sim.url, "--trace", str(trace), "--lock", str(LOCK),
                       "--agents", "4", "--workers", "2", "--delay-scale", "0", "--slo", "none",
                       "--out", str(tmp_path / f"r{i}.json")], tmp_path / f"r{i}")
            starting = rng.random() < 0.5
            deadline = time.monotonic() + (rng.uniform(0, 1.5) if starting else 120)
            while time.monotonic() < deadline and run.proc.poll() is None:  # mid-point: its workers are up
                if not starting and len(_marked(run.token)) >= 3:
                    time.sleep(rng.uniform(0, 0.3))
                    break
                time.sleep(0.02)
            assert run.proc.poll() is None, run.lines[-5:]
            os.kill(run.proc.pid, how)
            run.proc.wait(timeout=120)
            left, files = _settled(run.token, run.tmp)
            assert not left, (how, _describe(left), run.lines[-5:])
            assert not files, files


def test_children_end_groups_and_directories_on_a_signal(tmp_path: Path) -> None:
    """The library the commands share: a Stop set by SIGTERM (an exit code of 143), and close() ending a
    child's whole group, a grandchild that ignores SIGTERM included, and removing the directory."""
    script = ("import signal, subprocess, sys, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
              "print('up', flush=True); time.sleep(600)\n")
    token = secrets.token_hex(8)
    with stop_on_signals() as stop:
        children = Children(grace=0.5)
        directory = children.temp_dir("stackpin-test-")
        child = children.spawn([sys.executable, "-c", script], env={**os.environ, TOKEN: token},
                               stdout=subprocess.PIPE)
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.event.wait(10) and stop.exit_code == 143
        deadline = time.monotonic() + 30  # the grandchild's environment shows once it has exec'd (a busy host)
        while len(_marked(token)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_marked(token)) == 2, _describe(_marked(token))
        children.close()
    assert child.returncode == -signal.SIGKILL
    assert not directory.exists()
    left, _ = _settled(token, tmp_path)
    assert not left, _describe(left)


def test_the_janitor_cleans_up_after_kill_9(tmp_path: Path) -> None:
    """A process killed with SIGKILL cannot clean up: its janitor ends its children's groups (a grandchild,
    whom no parent-death signal reaches, included) and removes its directories."""
    token = secrets.token_hex(8)
    script = ("import subprocess, sys, time\n"
              "from stackpin.children import Children\n"
              "c = Children()\n"
              "d = c.temp_dir('stackpin-test-')\n"
              "c.spawn([sys.executable, '-c', 'import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(600)\"]); time.sleep(600)'])\n"
              "print(d, flush=True); time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, TOKEN: token, "TMPDIR": str(tmp_path)})
    assert parent.stdout is not None
    directory = Path(parent.stdout.readline().strip())
    assert directory.is_dir() and directory.parent == tmp_path
    deadline = time.monotonic() + 30
    while len(_marked(token)) < 4 and time.monotonic() < deadline:  # parent, janitor, child, grandchild
        time.sleep(0.05)
    assert len(_marked(token)) == 4, _describe(_marked(token))
    parent.kill()
    parent.wait()
    left, files = _settled(token, tmp_path)
    assert not left, _describe(left)
    assert not files
