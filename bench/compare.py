"""Before/after: a cold `stackpin render` of one stack and `stackpin validate` of one profile from two
checkouts of stackpin, run in turn in this virtual environment (each checkout's `stackpin` first on
PYTHONPATH, both byte-compiled), beside `helm template` and `python -c pass`.

Run from the repository root: `python bench/compare.py OTHER_CHECKOUT [N]` (N defaults to 15), for
example with OTHER_CHECKOUT made by `git worktree add ../before main`. Not part of `make bench`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # devkit sits beside bench/, not inside the installed package

from devkit.timing import ensure_bytecode, interleaved_medians, load_note  # noqa: E402

HELM = ROOT / ".bench" / "bin" / "helm"
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
PROFILE = ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"


def main() -> None:
    other = Path(sys.argv[1]).resolve()
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    if not (other / "stackpin" / "__init__.py").is_file():
        sys.exit(f"{other} is not a stackpin checkout")
    trees = {other.name: other, "this checkout": ROOT}
    for tree in trees.values():
        ensure_bytecode(tree)
    cmds: dict[str, list[str]] = {"python -c pass": [sys.executable, "-c", "pass"]}
    envs: dict[str, dict[str, str]] = {}
    if HELM.exists():
        cmds["helm template"] = [str(HELM), "template", "bench", str(ROOT / "bench" / "chart")]
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        for label, tree in trees.items():
            render_args = [str(LOCK), "--output-dir", f"{tmp}/{len(cmds)}"]
            for verb, args in (("render", render_args), ("validate", [str(PROFILE)])):
                name = f"{verb}, {label}"
                # -P: the working directory (this checkout) must not come before PYTHONPATH
                cmds[name] = [sys.executable, "-P", "-m", "stackpin", verb, *args]
                envs[name] = {"PYTHONPATH": str(tree)}
        timings = interleaved_medians(cmds, runs, envs)
    print(f"median of {runs} runs in turn; {load_note()}")
    for name, t in timings.items():
        print(f"  {name:<32} wall {t.wall * 1000:6.0f} ms   cpu {t.cpu * 1000:6.0f} ms")


if __name__ == "__main__":
    main()
