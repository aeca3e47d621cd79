"""Whole-process cost of the CLI: `stackpin --help`, a cold `stackpin validate` of one profile and of
every shipped profile, side by side (run in turn) with a bare `python -c pass` (the floor any Python
CLI pays), `python -c 'import pydantic, yaml, click'` (the floor of any CLI built on the libraries
stackpin is built on) and `helm lint` of the bench chart (what a Helm user runs in the same pre-commit
hook); plus what `--help` imports and where a cold validate's import time goes.

Run from the repository root: `python bench/bench_cli.py [N]` (N defaults to 15 runs each).
stackpin runs as `pip install stackpin` leaves it: a fresh venv holding a wheel of this tree (devkit/installed.py),
its interpreter also the one the floors run.
Aim (issue 21): a cold `stackpin validate` of one profile within 1.7x the libraries' own import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # devkit sits beside bench/, not inside the installed package

from devkit.installed import installed_stackpin  # noqa: E402
from devkit.timing import ensure_bytecode, import_ms_by_group, interleaved_medians, load_note  # noqa: E402

PY_STACKPIN = [sys.executable, "-m", "stackpin"]
HEAVY = ("lightkube", "httpx2", "kubernetes", "httpx", "matplotlib", "jsonschema", "rich", "pydantic")
HELM = ROOT / ".bench" / "bin" / "helm"
ONE_PROFILE = "profiles/deepseek-v4.1-flash/gb300-tuned.yaml"
VALIDATE_AIM_RATIO = 1.7
LIBRARIES = "import pydantic, yaml, click"


def help_imports() -> tuple[float, list[str]]:
    """Cumulative import time of the CLI module (us -> ms) and which heavy packages `--help` loads."""
    out = subprocess.run([sys.executable, "-X", "importtime", *PY_STACKPIN[1:], "--help"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stderr
    loaded, cli_us = set(), 0
    for line in out.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        loaded.add(name.split(".")[0])
        if name == "stackpin.cli.main":
            cli_us = int(cumulative)
    return cli_us / 1000, sorted(h for h in HEAVY if h in loaded)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    ensure_bytecode()
    profiles = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profiles").rglob("*.yaml"))
    with installed_stackpin() as bin_dir:
        # The console script users run, and the same venv's interpreter for the floors.
        python, stackpin = str(bin_dir / "python"), str(bin_dir / "stackpin")
        cmds = {
            "python -c pass": [python, "-c", "pass"],
            f"python -c '{LIBRARIES}'": [python, "-c", LIBRARIES],
            "stackpin --help": [stackpin, "--help"],
            "stackpin validate (1 profile)": [stackpin, "validate", ONE_PROFILE],
            f"stackpin validate ({len(profiles)} profiles)": [stackpin, "validate", *profiles],
        }
        if HELM.exists():  # bench_render.py fetches it (scripts/fetch-helm.sh)
            cmds["helm lint bench/chart"] = [str(HELM), "lint", str(ROOT / "bench" / "chart")]
        timings = interleaved_medians(cmds, runs)
    ms = {name: t.wall * 1000 for name, t in timings.items()}
    floor = ms["python -c pass"]
    print(f"CLI wall time, median of {runs} runs each, run in turn (whole process; stackpin and python those of a "
          f"fresh venv with this tree installed from a wheel); {load_note()}")
    for name, value in ms.items():
        print(f"  {name:<36} {value:8.1f} ms   {value / floor:5.1f}x python startup   "
              f"(cpu {timings[name].cpu * 1000:6.1f} ms)")
    import_ms, heavy = help_imports()
    print(f"  import stackpin.cli.main (cumulative, -X importtime): {import_ms:.1f} ms")
    print(f"  heavy packages imported by --help: {', '.join(heavy) if heavy else 'none'}")
    groups = import_ms_by_group([*PY_STACKPIN, "validate", ONE_PROFILE])
    print("  validate (1 profile), import time by package (self, -X importtime, inflated by the tracing): "
          + ", ".join(f"{group} {value:.0f}ms" for group, value in groups.items()))
    one = ms["stackpin validate (1 profile)"]
    libraries = ms[f"python -c '{LIBRARIES}'"]
    helm = ms.get("helm lint bench/chart")
    versus = f"; helm lint {helm:.0f} ms" if helm is not None else ""
    ratio = one / libraries
    print(f"aim: cold validate of one profile within {VALIDATE_AIM_RATIO}x `python -c '{LIBRARIES}'`: "
          f"{one:.0f} ms vs {libraries:.0f} ms = {ratio:.2f}x (python -c pass {floor:.0f} ms{versus}): "
          f"{'met' if ratio <= VALIDATE_AIM_RATIO else 'NOT met'}")


if __name__ == "__main__":
    main()
