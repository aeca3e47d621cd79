"""Whole-process timing for the benchmarks: interleaved runs, medians, where imports spend their time."""

from __future__ import annotations

import compileall
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ensure_bytecode(root: Path = ROOT) -> None:
    """Compile stackpin's modules as `pip install` does, so a cold start reads bytecode instead of
    compiling source (an editable install under PYTHONDONTWRITEBYTECODE=1 never writes it)."""
    compileall.compile_dir(str(root / "stackpin"), quiet=1)


def run_once(cmd: Sequence[str], cwd: Path = ROOT) -> float:
    """Seconds one process takes from start to exit; it must succeed."""
    return run_measured(cmd, cwd)[0]


def run_measured(cmd: Sequence[str], cwd: Path = ROOT, env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process from start to exit; it must succeed.
    CPU time moves less than wall time when other work shares the cores. `env` adds to os.environ."""
    full_env = {**os.environ, **env} if env else None
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=full_env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, list(cmd))
    return wall, usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Timing:
    wall: float  # median seconds
    cpu: float  # median CPU seconds (user + system)


def interleaved_medians(cmds: Mapping[str, Sequence[str]], repeats: int,
                        envs: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Timing]:
    """Median wall and CPU seconds of each command, run in turn (A B C A B C ...) so that all see the
    same load. One untimed round first warms the page cache, not the interpreter. `envs`: extra
    environment per command name."""
    envs = envs or {}
    for name, cmd in cmds.items():
        run_measured(cmd, env=envs.get(name))
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(repeats):
        for name, cmd in cmds.items():
            samples[name].append(run_measured(cmd, env=envs.get(name)))
    return {name: Timing(statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
            for name, values in samples.items()}


def median_call_ms(call: Callable[[], object], runs: int) -> float:
    """Median milliseconds of an in-process call; one untimed call first (stackpin caches validators
    and catalogs there)."""
    call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def load_note() -> str:
    """The machine's load average, printed beside timings: other work on the cores slows every row."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


# Top-level modules grouped the way a reader asks "whose imports are these?".
_GROUPS = {
    "pydantic": ("pydantic", "pydantic_core", "annotated_types", "typing_inspection"),
    "typing_extensions": ("typing_extensions",),  # msgspec's and pydantic's
    "importlib.metadata": ("importlib.metadata", "zipfile", "csv"),
    "email": ("email",),  # what http.client parses headers with, and importlib.metadata its METADATA files
    "jsonschema": ("jsonschema", "jsonschema_specifications", "referencing", "rpds", "attr", "attrs"),
    "rich": ("rich", "pygments", "markdown_it", "mdurl"),
    "click": ("click",),
    "yaml": ("yaml", "_yaml"),
    "msgspec": ("msgspec",),
    # The cluster commands' client: the standard library's HTTP and TLS with stackpin/deploy/transport.py and
    # credentials.py; before it lightkube with httpx2, and before that `kubernetes`, with what they brought.
    "cluster client": ("http", "ssl", "_ssl", "stackpin.deploy.transport", "stackpin.deploy.credentials",
                       "lightkube", "httpx2", "httpcore2", "h2", "hpack", "hyperframe", "anyio", "sniffio",
                       "truststore", "wsproto", "h11", "certifi", "idna", "kubernetes", "urllib3", "requests",
                       "oauthlib", "requests_oauthlib", "websocket", "google", "durationpy", "dateutil", "six"),
    # Its modules' own time, which includes building its pydantic model classes (in class bodies).
    "stackpin+models": ("stackpin",),
}


def _group(module: str) -> str:
    for group, prefixes in _GROUPS.items():
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return group
    return "stdlib, site"


def import_ms_by_group(cmd: Sequence[str], runs: int = 5, env: Mapping[str, str] | None = None) -> dict[str, float]:
    """Self import time (ms, `python -X importtime`) summed per group, median of `runs` runs. `cmd`
    is a python command line: [python, args...]; `env` its whole environment (default: this one's)."""
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=ROOT, capture_output=True, text=True,
                              check=True, env=None if env is None else dict(env))
        totals: dict[str, float] = dict.fromkeys([*_GROUPS, "stdlib, site"], 0.0)
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "|" not in line or "self [us]" in line:
                continue
            self_us, _, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
            totals[_group(name)] += int(self_us) / 1000
        for group, ms in totals.items():
            samples.setdefault(group, []).append(ms)
    medians = {group: statistics.median(values) for group, values in samples.items()}
    return {group: ms for group, ms in sorted(medians.items(), key=lambda kv: -kv[1]) if ms >= 0.5}
