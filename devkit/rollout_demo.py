"""python -m devkit.rollout_demo WORKDIR (`make demo-rollout`): a staged rollout across three racks, as a user
runs it, on local API servers: one rollout that goes out in two waves, and one stopped after its canary.

The racks are devkit/fleetbed.py's: one real kube-apiserver each on loopback, with stand-ins for the Dynamo
operator (it marks an applied DynamoGraphDeployment ready) and the garbage collector. The canary's endpoint
is devkit/livesim.py's: stackpin's simulator of whichever stack is live on the canary's API server, as the
Dynamo frontend would serve it on a real rack (a test bed, not hardware). The history holds revision 1 (the
launch stack), 2 (the tuned one) and 3 (the disaggregated wide-EP one); revision 3's simulator is made two-fold
slower on the canary (`--fault slow=2`), so its bench gate measures a regression: the rollout stops and the
canary is rolled back. Where no kube-apiserver can start (as for the cluster tests), it says so and stops.
WORKDIR is made anew on each run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from devkit.demorun import short_trace_text, stackpin_in, workdir

ROOT = Path(__file__).resolve().parent.parent
RACKS = ("rack-a", "rack-b", "rack-c")
DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"
STACKS = ("gb300-launch", "gb300-tuned", "gb300-disagg-wide-ep")  # revisions 1, 2, 3


def write_fleet(path: Path, kubeconfigs: list[Path], endpoint: str) -> None:
    racks = [{"name": name, "kubeconfig": str(config), "platform": "gb300-nvl72"}
             for name, config in zip(RACKS, kubeconfigs, strict=True)]
    racks[0]["endpoint"] = endpoint
    path.write_text(yaml.safe_dump({
        "apiVersion": "stackpin.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "west"},
        "spec": {"racks": racks, "waves": {"canary": "rack-a", "batchSize": 2},
                 "gates": {"ready": {"timeoutSeconds": 120}, "soakSeconds": 2,
                           "bench": {"trace": "agents.jsonl", "runs": 2, "threshold": "5%", "lagLimit": "50ms"}},
                 "onFailure": "rollback"}}, sort_keys=False), encoding="utf-8")


def main(argv: list[str]) -> int:
    from devkit.envtest import EnvtestUnavailable
    from devkit.fleetbed import fleet_bed
    from devkit.livesim import serve_live
    from stackpin.history.store import HistoryStore
    from stackpin.rollout.record import RolloutStore, State

    if len(argv) != 1:
        print("usage: python -m devkit.rollout_demo WORKDIR", file=sys.stderr)
        return 2
    work = workdir(argv[0])
    sp = stackpin_in(work)

    try:
        bed = fleet_bed([work / f"envtest-{rack}" for rack in RACKS])
        servers = bed.__enter__()
    except EnvtestUnavailable as exc:
        print(f"make demo-rollout needs a kube-apiserver, as the cluster tests do: {exc}; nothing was run")
        return 0
    try:
        print("# Three racks, each a kube-apiserver on loopback; the history: revisions 1, 2 and 3.")
        for stack in STACKS:
            sp("promote", os.path.relpath(ROOT / "lockfiles" / f"{stack}.lock.yaml", work), "-m", stack)
        (work / "agents.jsonl").write_text(short_trace_text(), encoding="utf-8")  # the canary's gate trace
        kubeconfigs = [Path(os.path.relpath(e.kubeconfig, work)) for e in servers.envs]  # as the fleet names them
        print("# Every rack runs revision 1.")
        for rack, config in zip(RACKS, kubeconfigs, strict=True):
            print(f"# {rack}:")
            sp("apply", f"{DEPLOYMENT}@1", "--kubeconfig", str(config), "--create-namespace", "--allow-stand-ins")
        store = HistoryStore(work / "history")
        slow = store.read(store.resolve(DEPLOYMENT), 3).lock.stack_digest
        with serve_live(work / kubeconfigs[0], "dynamo", "dsv41-flash", work / "history", {slow: "slow=2"},
                        share=2) as url:
            write_fleet(work / "fleet.yaml", kubeconfigs, url)
            print(f"# fleet.yaml: rack-a the canary (its endpoint {url}: the live stack, simulated), then rack-b "
                  "and rack-c; onFailure: rollback")
            print("# 1. revision 2 goes out: the canary benched on revision 1, then on 2 (a gain), then wave 2")
            # A gate whose runs a busy host stretched is inconclusive: never a pass and never a rollback, the
            # rollout pauses. The demo then resumes it (twice at most), which benches the canary again, as a
            # person would.
            sp("rollout", "start", "fleet.yaml", f"{DEPLOYMENT}@2", "--allow-recreate", "--allow-stand-ins",
               expect=(0, 1))
            rollouts = RolloutStore(work / "rollouts", "west")
            for _ in range(2):  # the record says whether it paused (its text keeps every past gate's line)
                last = rollouts.read(rollouts.ids()[-1])
                if last.state is not State.paused:
                    break
                print("# the host was too busy for the canary's gate (inconclusive, paused): resume it")
                sp("rollout", "resume", "fleet.yaml", expect=(0, 1))
            if "succeeded" not in sp("rollout", "status", "west"):
                raise SystemExit("revision 2 did not reach every rack: see above")
            print("# 2. revision 3, made two-fold slower on the canary: its gate fails, the canary is rolled back")
            print("#    to revision 2 and benched again, and wave 2 never starts (exit 1)")
            sp("rollout", "start", "fleet.yaml", f"{DEPLOYMENT}@3", "--allow-recreate", "--allow-stand-ins", expect=1)
            sp("rollout", "status", "west")
    finally:
        bed.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
