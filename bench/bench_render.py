"""`stackpin render` versus `helm template` of an equivalent one-resource chart (bench/chart/).

Rows, medians of whole processes run in turn (cold: a fresh interpreter each time):
  1. one stack: `stackpin render LOCK -o DIR` (builds, validates against the CRD, writes) vs one
     `helm template` of bench/chart (renders to stdout, validates nothing), and `python -c pass`,
     the floor any Python command pays;
  2. 100 stacks: one `stackpin render --lockdir` invocation vs 100 `helm template` runs.
Plus where the cold render's time goes: in-process phases (import, build, schema validation, dump)
and the import time per package (`python -X importtime`).

Run from the repository root: `python bench/bench_render.py [REPEATS]` (default 11).
helm comes from scripts/fetch-helm.sh (.bench/bin/helm); without it the helm rows are skipped.
stackpin runs as a user's `pip install stackpin` runs it: the console script of a fresh venv holding a wheel
of this tree, byte-compiled by pip (devkit/installed.py); the in-process phases run this tree's modules,
byte-compiled first.
Aims: cold render within 3x one helm run; 100 stacks in at most half of 100 helm runs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # devkit sits beside bench/, not inside the installed package

from devkit.installed import installed_stackpin  # noqa: E402
from devkit.timing import ensure_bytecode, import_ms_by_group, interleaved_medians, load_note, run_once  # noqa: E402
from stackpin.lock.lockfile import (  # noqa: E402
    StackLock,
    effective_profile,
    read_lock,
    sha256,
    stack_digest,
    write_locks,
)

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


def _helm() -> str | None:
    if HELM.exists():
        return str(HELM)
    script = ROOT / "scripts" / "fetch-helm.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    return str(HELM) if proc.returncode == 0 and HELM.exists() else shutil.which("helm")


def _many_locks(lockdir: Path, count: int) -> None:
    """`count` distinct stacks (renamed copies of the shipped ones), each a valid lockfile."""
    base = list(_shipped_locks().values())
    for i in range(count):
        lock = base[i % len(base)]
        data = lock.to_data()
        name = f"stack-{i:03d}"
        data["profile"]["metadata"]["name"] = name
        data["metadata"]["name"] = name
        profile = msgspec.convert(data, StackLock).stack_profile
        data["metadata"]["profileDigest"] = sha256(effective_profile(profile))
        fresh = msgspec.convert(data, StackLock)
        data["stackDigest"] = stack_digest(fresh.profile, fresh.resolved)
        write_locks([msgspec.convert(data, StackLock)], lockdir)


def _ratio_row(case: str, mine: float, theirs: float | None, aim: float) -> str:
    if theirs is None:
        return f"{case:<44} {mine * 1000:>8.0f}ms {'-':>10}"
    ratio = mine / theirs
    verdict = "met" if ratio <= aim else "NOT met"
    return (f"{case:<44} {mine * 1000:>8.0f}ms {theirs * 1000:>8.0f}ms  {ratio:.2f}x "
            f"(<= {aim:g}x: {verdict})")


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    ensure_bytecode()
    helm = _helm()
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp, installed_stackpin() as bin_dir:
        work = Path(tmp)
        render_cmd = [str(bin_dir / "stackpin"), "render"]
        one = work / "one"
        write_locks([_shipped_locks()["gb300-tuned"]], one)
        many = work / "many"
        _many_locks(many, STACKS)
        one_lock = str(one / "gb300-tuned.lock.yaml")

        helm_cmd = [helm, "template", "bench", str(CHART)] if helm else None
        cold = {"render": [*render_cmd, one_lock, "--output-dir", str(work / "out1")],
                "python": [str(bin_dir / "python"), "-c", "pass"]}
        if helm_cmd:
            cold["helm"] = helm_cmd
        timings = interleaved_medians(cold, repeats)
        one_s = {name: t.wall for name, t in timings.items()}
        many_runs: dict[str, list[float]] = {"render": [], "helm": []}
        for _ in range(max(3, repeats // 4)):
            out_n = str(work / "outN")
            many_runs["render"].append(run_once([*render_cmd, "--lockdir", str(many), "--output-dir", out_n]))
            if helm_cmd:
                many_runs["helm"].append(sum(run_once(helm_cmd) for _ in range(STACKS)))
        render_many = statistics.median(many_runs["render"])
        helm_many = statistics.median(many_runs["helm"]) if helm_cmd else None

        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        phases = [list(map(float, subprocess.run([sys.executable, "-c", PHASES.format(lock=one_lock)], env=env,
                                                 capture_output=True, text=True, check=True).stdout.split()))
                  for _ in range(repeats)]
        import_s, build_s, validate_s, dump_s = (statistics.median(p[i] for p in phases) for i in range(4))
        by_group = import_ms_by_group([sys.executable, "-m", "stackpin", "render", one_lock,
                                       "--output-dir", str(work / "out2")])

    helm_one = one_s.get("helm")
    print(f"medians of {repeats} runs in turn; stackpin: the `stackpin render` console script of a fresh venv with "
          f"this tree installed from a wheel (devkit/installed.py); {load_note()}")
    print(f"{'case':<44} {'stackpin':>10} {'helm':>10}  ratio (aim)")
    print(_ratio_row("one stack, cold process", one_s["render"], helm_one, 3))
    print(_ratio_row(f"{STACKS} stacks: one render vs {STACKS} helm runs", render_many, helm_many, 0.5))
    print(f"{'python -c pass (floor of any Python command)':<44} {one_s['python'] * 1000:>8.0f}ms")
    print("cpu (user+system) of one cold process: " + ", ".join(
        f"{name} {t.cpu * 1000:.0f}ms" for name, t in timings.items()))
    if not helm:
        print("note: helm not available (scripts/fetch-helm.sh failed); helm rows have no ratio")
    total = import_s + build_s + validate_s + dump_s
    print(f"cold render of one stack, in-process phases: import {import_s * 1000:.0f}ms, "
          f"lock+build {build_s * 1000:.0f}ms, schema validation {validate_s * 1000:.0f}ms "
          f"({validate_s / total:.0%}), dump {dump_s * 1000:.0f}ms")
    print("import time by package (self, -X importtime, inflated by the tracing): "
          + ", ".join(f"{group} {ms:.0f}ms" for group, ms in by_group.items()))
    if helm_one is not None:
        ratio = one_s["render"] / helm_one
        print(f"aim: cold render of one stack within 3x helm template: {ratio:.2f}x "
              f"({one_s['render'] * 1000:.0f} vs {helm_one * 1000:.0f} ms): {'met' if ratio <= 3 else 'NOT met'}")
    else:
        print("aim: cold render of one stack within 3x helm template: not measured (no helm)")
    if helm_many is not None:
        ratio = render_many / helm_many
        print(f"aim: {STACKS} stacks in one render within 0.5x of {STACKS} helm runs: {ratio:.2f}x: "
              f"{'met' if ratio <= 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
