"""`stackpin render` versus `helm template` of an equivalent one-resource chart (bench/chart/).

Rows, medians of whole processes (cold: a fresh interpreter each time):
  1. one stack: `stackpin render LOCK -o DIR` (builds, validates against the CRD, writes) vs one
     `helm template` of bench/chart (renders to stdout, validates nothing);
  2. 100 stacks: one `stackpin render --lockdir` invocation vs 100 `helm template` runs.
Plus where the cold render's time goes (import, build, schema validation, dump), in-process.

Run from the repository root: `python bench/bench_render.py [REPEATS]` (default 5).
helm comes from scripts/fetch-helm.sh (.bench/bin/helm); without it the helm rows are skipped.
Aims: cold render within 3x one helm run; 100 stacks in at most half of 100 helm runs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stackpin.lock.lockfile import StackLock, effective_profile, read_lock, sha256, stack_digest, write_locks

ROOT = Path(__file__).resolve().parent.parent

CHART = ROOT / "bench" / "chart"
HELM = ROOT / ".bench" / "bin" / "helm"
STACKS = 100
PHASES = """
import time
t0 = time.perf_counter()
from pathlib import Path
from stackpin.lock.lockfile import read_lock
from stackpin.render.build import build_objects
from stackpin.render.output import file_name
from stackpin.yamlio import dump_yaml
t1 = time.perf_counter()
lock = read_lock(Path({lock!r}))
objects = build_objects(lock)
t2 = time.perf_counter()
from stackpin.validate.manifests import validate_objects
assert not validate_objects((file_name(o), o) for o in objects)
t3 = time.perf_counter()
texts = [dump_yaml(o) for o in objects]
t4 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
"""


def _shipped_locks() -> dict[str, StackLock]:
    """The committed locks of the shipped profiles (`make demo` writes them)."""
    locks = [read_lock(path) for path in sorted((ROOT / "lockfiles").glob("*.lock.yaml"))]
    return {lock.metadata.name: lock for lock in locks}


def _stackpin_cmd() -> list[str]:
    """The `stackpin render` console script if installed, else the command object itself."""
    exe = Path(sys.executable).with_name("stackpin")
    if exe.exists() and subprocess.run([str(exe), "render", "--help"], capture_output=True).returncode == 0:
        return [str(exe), "render"]
    return [sys.executable, "-c", "from stackpin.cli.render import render; render(prog_name='stackpin render')"]


def _helm() -> str | None:
    if HELM.exists():
        return str(HELM)
    script = ROOT / "scripts" / "fetch-helm.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    return str(HELM) if proc.returncode == 0 and HELM.exists() else shutil.which("helm")


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def _median(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm the page cache, not the interpreter
    return statistics.median(fn() for _ in range(repeats))


def _many_locks(lockdir: Path, count: int) -> None:
    """`count` distinct stacks (renamed copies of the shipped ones), each a valid lockfile."""
    base = list(_shipped_locks().values())
    for i in range(count):
        lock = base[i % len(base)]
        data = lock.model_dump(mode="json", by_alias=True)
        name = f"stack-{i:03d}"
        data["profile"]["metadata"]["name"] = name
        data["metadata"]["name"] = name
        profile = StackLock.model_validate(data).stack_profile
        data["metadata"]["profileDigest"] = sha256(effective_profile(profile))
        fresh = StackLock.model_validate(data)
        data["stackDigest"] = stack_digest(fresh.profile, fresh.resolved)
        write_locks([StackLock.model_validate(data)], lockdir)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    helm = _helm()
    render_cmd = _stackpin_cmd()
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        work = Path(tmp)
        one = work / "one"
        write_locks([_shipped_locks()["gb300-tuned"]], one)
        many = work / "many"
        _many_locks(many, STACKS)
        one_lock = str(one / "gb300-tuned.lock.yaml")

        render_one = _median(lambda: _timed([*render_cmd, one_lock, "--output-dir", str(work / "out1")]), repeats)
        render_many = _median(lambda: _timed([*render_cmd, "--lockdir", str(many), "--output-dir", str(work / "outN")]),
                              max(3, repeats // 2))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        phases = [list(map(float, subprocess.run([sys.executable, "-c", PHASES.format(lock=one_lock)], env=env,
                                                 capture_output=True, text=True, check=True).stdout.split()))
                  for _ in range(repeats)]
        import_s, build_s, validate_s, dump_s = (statistics.median(p[i] for p in phases) for i in range(4))

        print(f"medians; stackpin: {' '.join(render_cmd[:2])} ...; {repeats} repeats")
        print(f"{'case':<44} {'stackpin':>10} {'helm':>10}  ratio (aim)")
        if helm:
            helm_cmd = [helm, "template", "bench", str(CHART)]
            helm_one = _median(lambda: _timed(helm_cmd), repeats)
            helm_many = _median(lambda: sum(_timed(helm_cmd) for _ in range(STACKS)), max(3, repeats // 2))
            ok1 = "met" if render_one <= 3 * helm_one else "NOT met"
            ok2 = "met" if render_many <= helm_many / 2 else "NOT met"
            print(f"{'one stack, cold process':<44} {render_one * 1000:>8.0f}ms {helm_one * 1000:>8.0f}ms  "
                  f"{render_one / helm_one:.2f}x (<= 3x: {ok1})")
            print(f"{f'{STACKS} stacks: one render vs {STACKS} helm runs':<44} {render_many * 1000:>8.0f}ms "
                  f"{helm_many * 1000:>8.0f}ms  {render_many / helm_many:.2f}x (<= 0.5x: {ok2})")
        else:
            print("note: helm not available (scripts/fetch-helm.sh failed); helm rows skipped")
            print(f"{'one stack, cold process':<44} {render_one * 1000:>8.0f}ms")
            print(f"{f'{STACKS} stacks, one invocation':<44} {render_many * 1000:>8.0f}ms")
        total = import_s + build_s + validate_s + dump_s
        print(f"cold render of one stack, in-process phases: import {import_s * 1000:.0f}ms, "
              f"lock+build {build_s * 1000:.0f}ms, schema validation {validate_s * 1000:.0f}ms "
              f"({validate_s / total:.0%}), dump {dump_s * 1000:.0f}ms")


if __name__ == "__main__":
    main()
