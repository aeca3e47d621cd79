"""python -m devkit.upgrade_demo WORKDIR (`make demo-upgrade`): a stack upgrade as a dependency update, end to
end, as a user runs it: check, propose, trial, promote, and one promote refused.

The packages are stand-ins: devkit/enginepkgs.py's small vllm, ai-dynamo and flashinfer-python in the
published packages' shapes (the 9.x series, so nobody mistakes them for releases), served by a real
package index on loopback (pypiserver). Dynamo 9.1.0's vLLM renames a flag the stack passes and changes a
default it relies on; Dynamo 9.2.0's vLLM removes a flag the stack passes. The stack is served on
stackpin's simulator (`--sim`), which models the stack's shape and kernels, not engine versions, so the
trial of an honest candidate finds no significant change and says it is simulated. A candidate made
slower on purpose (`--fault-candidate slow=2`) is refused. WORKDIR is made anew on each run.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from devkit import enginepkgs as pkgs
from devkit.demorun import DEMO_ENV, SHORT_SESSIONS, SHORT_TRACE, run, stackpin_in, workdir

SITE = Path(__file__).resolve().parent / "upgrade-site"  # the stack the demo upgrades (and the tests)
PROFILE = "profiles/gb300-fixture.yaml"
CANDIDATE = "profiles/gb300-fixture.dynamo-9.1.0.yaml"
PROPOSAL = "proposals/gb300-fixture-dynamo-9-1-0"
DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"
MIRROR = ["--oci-layout", "mirror/oci", "--hf-cache", "mirror/hf"]
# A short trial: a share of the rack at wall speed, answers back to back, three runs a side (bench compare's
# intervals need two or more). A real trial uses the deployment's own trace and the whole stack.
TRIAL = ["--sim", "--share", "18", "--speed", "1", "--delay-scale", "0", "--runs", "3", "--lag-limit", "50ms",
         "--trace", "trace.jsonl", *MIRROR]
TRACE = ["--sessions", str(SHORT_SESSIONS), "--seed", "1",
         *[x for k, v in SHORT_TRACE.items() for x in ("--param", f"{k}={v}")]]


def main(argv: list[str]) -> int:
    import os

    from devkit.pypiserver import serve_packages

    if len(argv) != 1:
        print("usage: python -m devkit.upgrade_demo WORKDIR", file=sys.stderr)
        return 2
    work = workdir(argv[0])
    shutil.copytree(SITE, work / "profiles")
    pkgs.upgrade_series(work / "packages")
    site_env = {"STACKPIN_CATALOG_PATH": "", "STACKPIN_CACHE_DIR": str(work / "cache")}
    sp = stackpin_in(work, **site_env)
    env = {**os.environ, **DEMO_ENV, **site_env}  # for `python -m stackpin.demo` alike

    print("# The site: the stack on Dynamo 9.0.0 (stand-in packages), its catalog, its lock, revision 1.")
    for name in ("vllm-9.0.0.tar.gz", "ai_dynamo-9.0.0-py3-none-any.whl"):
        sp("engines", "add", "--from", f"packages/{name}", "--catalog", "catalog")
    run(["python", "-m", "stackpin.demo", "mirror", "profiles"], cwd=work, env=env)
    sp("lock", PROFILE, *MIRROR)
    sp("promote", "lockfiles/gb300-fixture.lock.yaml", "-m", "Dynamo 9.0.0 stack")
    sp("trace", "gen", *TRACE, "--out", "trace.jsonl")
    with serve_packages(work / "packages") as index:
        print(f"# A package index on loopback (pypiserver) serving packages/: {index}")
        print("# 1. check: a newer Dynamo and what it pins (exit 1: an upgrade is available)")
        sp("upgrade", "check", PROFILE, "--index-url", index, expect=1)
        print("# 2. propose the newest: its vLLM removed a flag the stack passes, so it is blocked (exit 1)")
        sp("upgrade", "propose", PROFILE, "--index-url", index, "--out", "proposals/newest", expect=1)
        print("# 3. propose Dynamo 9.1.0: the rename rewritten, the changed default pinned, the cache re-captured")
        sp("upgrade", "propose", PROFILE, "--to", "dynamo==9.1.0", "--index-url", index)
    run(["python", "-m", "stackpin.demo", "mirror", CANDIDATE], cwd=work, env=env)
    print("# 4. a drill: the candidate served 2x slower is a regression, and promote refuses it (exit 1)")
    sp("upgrade", "trial", PROPOSAL, *TRIAL, "--fault-candidate", "slow=2", expect=1)
    sp("upgrade", "promote", PROPOSAL, expect=1)
    print("# 5. the honest trial: the simulator does not model engine versions, so no significant change;")
    print("#    promoted only because the flag says a no-change upgrade may go in")
    # A run the host could not keep up with is invalid, and a trial with invalid runs is inconclusive (exit
    # 1), never a verdict: on a host busy with other work, try again (twice at most), as a person would.
    for attempt in range(3):
        said = sp("upgrade", "trial", PROPOSAL, *TRIAL, "--threshold", "20%", expect=(0, 1))
        if "trial: inconclusive" not in said or attempt == 2:
            break
        print("# the host was too busy for this trial (inconclusive): again")
    if "trial: no-change" not in said:
        raise SystemExit("the honest trial found no verdict of no-change: see above")
    sp("upgrade", "promote", PROPOSAL, "--allow-no-change", "--threshold", "20%")  # the verdict recomputed at it
    sp("history", DEPLOYMENT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
