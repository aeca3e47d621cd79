"""What the demos (`make demo-upgrade`, `make demo-rollout`) share: a fresh working directory, the stackpin
command line run in a subprocess and shown as a user would see it, and the short trace their benches replay."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# Fixed times and author: the histories the demos write come out the same on every run.
DEMO_ENV = {"SOURCE_DATE_EPOCH": "1767225600", "STACKPIN_AUTHOR": "stackpin demo <demo@stackpin.dev>"}
# Four short sessions (ten requests), as `stackpin trace gen --param ...` takes them: a bench of a few seconds.
# Sessions of the short trace: about 80 requests a run at one agent, so that two runs a side hold the 100
# steady requests bench compare needs to judge a TTFT p90 (MIN_TAIL_REQUESTS); its turns back to back (no
# tool time: a gate has no --delay-scale), a few seconds a run.
SHORT_SESSIONS = 40
SHORT_TRACE = {"first_input.median": "800", "turn_input.median": "200", "output.median": "30", "output.min": "20",
               "output.max": "60", "turns.median": "2", "turns.max": "3", "delay_ms.median": "0", "delay_ms.max": "0"}
Stackpin = Callable[..., str]


def run(args: list[str], *, expect: int | tuple[int, ...] = 0, cwd: Path, env: dict[str, str] | None = None) -> str:
    """`stackpin ARGS` (or `python ARGS`) in a subprocess, printed with its output; an exit not in `expect`
    stops the demo."""
    shown = shlex.join(args)
    print(f"+ {shown}", flush=True)  # as bash -x shows a command ("$ " would read as a docs/ block's own)
    command = [sys.executable, *args[1:]] if args[0] == "python" else [sys.executable, "-m", "stackpin", *args[1:]]
    done = subprocess.run(command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        print(f"(exit {done.returncode})")
    if done.returncode not in (expect if isinstance(expect, tuple) else (expect,)):
        raise SystemExit(f"{shown}: exit {done.returncode}, expected {expect}")
    return done.stdout


def workdir(arg: str) -> Path:
    """The demo's directory, made anew."""
    work = Path(arg).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def stackpin_in(work: Path, **extra_env: str) -> Stackpin:
    """`sp(*args, expect=0)`: the stackpin command line in `work`, with the demo's environment."""
    env = {**os.environ, **DEMO_ENV, **extra_env}

    def sp(*args: str, expect: int | tuple[int, ...] = 0) -> str:
        return run(["stackpin", *args], expect=expect, cwd=work, env=env)

    return sp


def short_trace_text() -> str:
    """The short trace as JSONL (what `stackpin trace gen --sessions 40 --seed 1 --param ...` writes)."""
    from stackpin.bench.tracegen import default_shape, generate, render

    return render(generate(SHORT_SESSIONS, 1, default_shape().with_overrides(SHORT_TRACE)))
