"""Start, watch and stop the Dynamo bed: NVIDIA Dynamo's own frontend and mocker processes (from their
own environment, scripts/install-dynamo-bed.sh) shaped by a BedPlan, all on loopback.

The bed's address (`--port`) is stackpin's: it answers GET /stackpin/sim (what is simulated, and the
frontend's URL under "serving", which bench run sends its requests to) and GET
/stackpin/sim/tokenizer.json (the stand-in tokenizer, so a client can size prompts in its tokens), and
redirects everything else (307) to the frontend. Requests go to the frontend directly, no proxy on
the path.

Dynamo's processes run in sessions of their own (stackpin.children), so a terminal's Ctrl-C reaches
stackpin alone, which stops them in order (SIGTERM, then SIGKILL after a grace period), removes the bed's
temporary directory and exits 130 (143 on SIGTERM); on Linux they also get SIGKILL if stackpin itself
dies, and the janitor removes the directory. Their logs stay in that directory and a process that fails
is reported with its last log line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import stackpin.jsonio as jsonio
from stackpin.children import Children, stop_on_signals
from stackpin.errors import StackpinError
from stackpin.sim.dynamo import BedPlan, facts, model_files

HELPER = Path(__file__).with_name("dynamo_helper.py")


def find_env(given: str | None = None) -> Path:
    """The bed's environment: --dynamo-env, $STACKPIN_DYNAMO_ENV, or the data file's default; refused in
    one line when it is not installed."""
    path = Path(given or os.environ.get("STACKPIN_DYNAMO_ENV") or facts()["env"])
    python = path / "bin" / "python"
    if not python.is_file():
        raise StackpinError(f"the Dynamo bed (ai-dynamo {facts()['version']}) is not installed at {path}: run "
                            "`make dynamo-env` in stackpin's repository, or `bash scripts/install-dynamo-bed.sh DIR` "
                            "and pass --dynamo-env DIR")
    return path


def _tail(path: Path, limit: int = 4096) -> str:
    """The last non-empty line of a log (bounded read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - limit, 0))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def failure(self) -> str | None:
        code = self.popen.poll()
        if code is None:
            return None
        last = _tail(self.log)
        return f"the Dynamo {self.name} exited with {code}" + (f": {last}" if last else f" (log: {self.log})")


@dataclass
class Bed:
    """A running bed; `url` is stackpin's address, `frontend` the Dynamo frontend's."""

    plan: BedPlan
    url: str
    frontend: str
    info: dict[str, Any]
    processes: list[_Process] = field(default_factory=list)

    def failure(self) -> str | None:
        """Why the bed no longer serves (a process exited), or None."""
        for process in self.processes:
            problem = process.failure()
            if problem:
                return problem
        return None


def _start(children: Children, name: str, argv: list[str], env: dict[str, str], logs: Path) -> _Process:
    log = logs / f"{name.replace(' ', '-')}.log"
    with log.open("wb") as out:
        popen = children.spawn(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    return _Process(name, popen, log)


def _broker(children: Children, python: Path, env: dict[str, str], logs: Path,
            stopping: threading.Event | None) -> tuple[_Process, str]:
    process = _start(children, "event broker", [str(python), str(HELPER), "broker"], env, logs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = process.log.read_text(encoding="utf-8", errors="replace").split()
        if len(text) >= 2 and all(t.isdigit() for t in text[:2]):
            return process, f"xsub=tcp://127.0.0.1:{text[0]} , xpub=tcp://127.0.0.1:{text[1]}"
        problem = process.failure()
        if problem:
            raise StackpinError(problem)
        if stopping is not None and stopping.wait(0.05):
            raise _Stopped
        time.sleep(0.05 if stopping is None else 0)
    raise StackpinError(f"the Dynamo bed's event broker did not start within 30 s (log: {process.log})")


def _write_inputs(children: Children, plan: BedPlan, python: Path, root: Path,
                  stopping: threading.Event | None) -> tuple[Path, list[Path]]:
    model = root / "model"
    model.mkdir()
    for name, content in model_files(plan.model_id, plan.max_model_len).items():
        (model / name).write_text(json.dumps(content, sort_keys=True), encoding="utf-8")
    tables: list[Path] = []
    for i, mocker in enumerate(plan.mockers):
        source, target = root / f"table-{i}-{mocker.role}.json", root / f"table-{i}-{mocker.role}.npz"
        source.write_text(json.dumps(mocker.table.as_json()), encoding="utf-8")
        log = root / f"table-{i}.log"
        with log.open("wb") as out:
            helper = children.spawn([str(python), str(HELPER), "table", str(source), str(target)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while helper.poll() is None:  # a stop while it runs is seen within a tenth of a second
            if stopping is not None and stopping.is_set():
                raise _Stopped
            if time.monotonic() > deadline:
                raise StackpinError("the Dynamo bed's timing table was not written within 120 s")
            with suppress(subprocess.TimeoutExpired):
                helper.wait(timeout=0.1)
        if helper.returncode != 0:
            raise StackpinError(f"the Dynamo bed could not write its timing table: {_tail(log)}")
        tables.append(target)
    return model, tables


def _registered(kv: Path, component: str) -> int:
    """Workers of a Dynamo component registered in the file discovery store."""
    prefix = quote(f"dynamo/{component}/generate/", safe="")
    try:
        return sum(1 for p in (kv / "v1" / "instances").iterdir() if p.name.startswith(prefix))
    except OSError:
        return 0


def _get(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback http only
        return jsonio.loads(response.read(1 << 20))


def _answers(frontend: str, model_id: str) -> bool:
    """Whether the frontend lists the model and serves one token of it."""
    try:
        models = _get(frontend + "/v1/models")
        if not any(m.get("id") == model_id for m in models.get("data", [])):
            return False
        body = json.dumps({"model": model_id, "messages": [{"role": "user", "content": "w0"}], "max_tokens": 1,
                           "stream": False}).encode()
        request = urllib.request.Request(frontend + "/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback http only
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return False


def _wait_ready(bed: Bed, kv: Path, stopping: threading.Event | None = None) -> None:
    timeout = float(facts()["startup_timeout_s"])
    deadline = time.monotonic() + timeout
    wanted = [("prefill" if m.role == "prefill" else "backend", m.workers) for m in bed.plan.mockers]
    while time.monotonic() < deadline:
        if stopping is not None and stopping.is_set():
            raise _Stopped
        problem = bed.failure()
        if problem:
            raise StackpinError(problem)
        registered = all(_registered(kv, component) >= n for component, n in wanted)
        if registered and _answers(bed.frontend, bed.plan.model_id):
            return
        time.sleep(0.2)
    have = ", ".join(f"{_registered(kv, c)}/{n} {c}" for c, n in wanted)
    raise StackpinError(f"the Dynamo bed was not ready within {timeout:g} s (workers registered: {have})")


class _InfoServer(ThreadingHTTPServer):
    daemon_threads = True
    bed: Bed
    tokenizer: bytes


class _Handler(BaseHTTPRequestHandler):
    server: _InfoServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self) -> None:
        self.send_response(307)
        self.send_header("Location", self.server.bed.frontend + self.path)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        path = self.path.split("?", 1)[0]
        if path == "/stackpin/sim":
            self._send(200, json.dumps(self.server.bed.info).encode())
        elif path == "/stackpin/sim/tokenizer.json":
            self._send(200, self.server.tokenizer)
        elif path.startswith("/stackpin/"):
            self._send(404, b'{"error": "not found"}')
        else:
            self._redirect()

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self._redirect()


def info(plan: BedPlan, speed: float, model_name: str, frontend: str) -> dict[str, Any]:
    stack = plan.stack
    return {"simulated": True, "model": model_name, "substitutions": list(plan.substitutions),
            "stack_digest": stack.digest, "stack": stack.name, "platform": stack.platform, "gpus": stack.gpus,
            "stack_gpus": plan.stack_gpus, "speed": speed, "backend": f"dynamo {facts()['version']}",
            "serving": frontend}


class _Stopped(Exception):
    """`stopping` was set while the bed was starting."""


@contextmanager
def running(plan: BedPlan, env_dir: Path, host: str = "127.0.0.1", port: int = 0, speed: float = 1.0,
            model_name: str = "roofline", stopping: threading.Event | None = None) -> Iterator[Bed]:
    """The bed, up and answering, for the `with` block; every process stopped and its files removed after,
    also on an error or Ctrl-C. `stopping`, when set while the bed starts, stops it (raising _Stopped)."""
    python = env_dir / "bin" / "python"
    server: _InfoServer | None = None
    thread: threading.Thread | None = None
    children = Children()
    try:
        try:  # the bed's own address first: a port taken fails before any of Dynamo's processes start
            server = _InfoServer((host, port), _Handler)
        except OSError as exc:
            raise StackpinError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        root = children.temp_dir("stackpin-dynamo-")
        model, tables = _write_inputs(children, plan, python, root, stopping)
        kv, logs = root / "discovery", root / "logs"
        kv.mkdir()
        logs.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "HF_", "TRANSFORMERS_"))}
        env.update({k: str(v) for k, v in facts()["environment"].items()})
        env["DYN_FILE_KV"] = str(kv)
        env["TMPDIR"] = str(root / "tmp")  # what Dynamo's processes leave there (JSON files) goes with the bed
        (root / "tmp").mkdir()
        broker, url = _broker(children, python, env, logs, stopping)
        processes = [broker]
        env["DYN_ZMQ_BROKER_URL"] = url
        frontend_port = _free_port("127.0.0.1")
        frontend = f"http://127.0.0.1:{frontend_port}"
        processes.append(_start(children, "frontend", [
            str(python), "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(frontend_port),
            "--discovery-backend", "file", *plan.frontend_args], env, logs))
        for mocker, npz in zip(plan.mockers, tables, strict=True):
            processes.append(_start(children, f"mocker ({mocker.role})",
                                    [str(python), "-m", "dynamo.mocker", "--model-path", str(model),
                                     "--discovery-backend", "file", "--planner-profile-data", str(npz), *mocker.args],
                                    env, logs))
        bound = server.server_address[1]
        bed = Bed(plan, f"http://{host}:{bound}", frontend, info(plan, speed, model_name, frontend), processes)
        server.bed = bed
        server.tokenizer = (model / "tokenizer.json").read_bytes()
        _wait_ready(bed, kv, stopping)
        thread = threading.Thread(target=server.serve_forever, name="dynamo-bed-info", daemon=True)
        thread.start()
        yield bed
    finally:
        if thread is not None and server is not None:
            server.shutdown()
        if server is not None:
            server.server_close()
        children.close()  # every group ended (SIGTERM, grace, SIGKILL), the directory removed


def serve(plan: BedPlan, env_dir: Path, host: str, port: int, speed: float, model_name: str,
          announce: IO[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM (the CLI), or until one of Dynamo's processes fails (an error); every
    process stopped and the directory removed, returns the exit code the signal calls for (130, 143).

    The signals only set a flag that the loops here look at (stackpin.children.stop_on_signals): an
    exception raised wherever a signal lands can land inside Popen.poll() between its lock's acquire and
    its try, leaving the lock held, and the wait for that process in the shutdown then blocks for ever (a
    full suite beside a CPU burner hung so), or between a child's start and its registration."""
    with stop_on_signals() as stop:
        if announce is not None:  # before the minutes a bed may take to start: the figures a bench will not show
            for slow in plan.floored:
                print(f"stackpin sim: warning: {slow.describe(str(facts()['version']))}", file=announce, flush=True)
        try:
            with running(plan, env_dir, host, port, speed, model_name, stop.event) as bed:
                if announce is not None:
                    print(f"stackpin sim: {bed.plan.stack.name} on {bed.url} (simulated: Dynamo "
                          f"{facts()['version']} frontend at {bed.frontend} and {len(plan.mockers)} mocker "
                          f"process(es), speed {speed})", file=announce, flush=True)
                while not stop.event.wait(0.5):
                    problem = bed.failure()
                    if problem:
                        raise StackpinError(problem)
        except _Stopped:
            pass  # stopped while starting: `running` stopped what it had started
        return stop.exit_code
