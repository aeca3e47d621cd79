"""One or two examples for every command's --help, kept in one place so that a test can hold each to the
options its command has (tests/test_cli_conventions.py)."""

from __future__ import annotations

import click

LOCK = "lockfiles/gb300-tuned.lock.yaml"
PROFILE = "profiles/deepseek-v4.1-flash/gb300-tuned.yaml"
DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"

EXAMPLES: dict[str, tuple[str, ...]] = {
    "init": ("stackpin init stacks/ --from gb200-tuned --name rack7",
             "stackpin init --list"),
    "validate": ("stackpin validate profiles/ --fail-on warning",
                 "stackpin validate --upgrade-to vllm==0.33.0 profiles/",
                 "stackpin validate --manifests manifests/"),
    "lock": ("stackpin lock profiles/deepseek-v4.1-flash/",
             "stackpin lock --check profiles/deepseek-v4.1-flash/"),
    "mirror": ("stackpin mirror lockfiles/ --to oci:site/oci     # every pinned image and cache, from the registries",
               "stackpin mirror lockfiles/ --to registry.site:5000/nvcr --hf-cache ~/.cache/huggingface/hub "
               "--hf-to site/hf"),
    "render": ("stackpin render                                   # every lock in lockfiles/ -> manifests/",
               f"stackpin render {LOCK} --stdout | kubectl apply --dry-run=server -f -"),
    "diff": ("stackpin diff lockfiles/gb300-launch.lock.yaml lockfiles/gb300-tuned.lock.yaml",
             f"stackpin diff {DEPLOYMENT}@1 {DEPLOYMENT}@2 -o json"),
    "show": (f"stackpin show {PROFILE}",),
    "promote": (f"stackpin promote {LOCK} -m 'Tuned kernels and CUDA graphs'",),
    "history": ("stackpin history", f"stackpin history {DEPLOYMENT} --verify"),
    "rollback": (f"stackpin rollback {DEPLOYMENT} --to 1 -m 'tuned regressed'",
                 f"stackpin rollback {DEPLOYMENT} --if-regressed"),
    "apply": (f"stackpin apply {DEPLOYMENT} --dry-run", f"stackpin apply {LOCK} --wait --kubeconfig rack1.yaml"),
    "status": (f"stackpin status {DEPLOYMENT} -o json",),
    "report": (f"stackpin report {DEPLOYMENT} --out report.html",),
    "import": ("stackpin import dgd.yaml --platform gb300-nvl72 --out profiles/imported.yaml",),
    "rules": ("stackpin rules -o json",),
    "schema": ("stackpin schema > stackprofile.schema.json",),
    "autotune capture-job": (f"stackpin autotune capture-job {PROFILE} --storage fast-rwx --out capture.yaml",),
    "autotune pack": ("stackpin autotune pack cache/ --push registry.example/dsv41/autotune:gb300",),
    "autotune inspect": ("stackpin autotune inspect cache/",),
    "autotune verify": (f"stackpin autotune verify cache/ {PROFILE}",),
    "engines list": ("stackpin engines list",),
    "engines add": ("stackpin engines add vllm==0.33.0",),
    "upgrade check": ("stackpin upgrade check profiles/",
                      "stackpin upgrade check profiles/ --find-links wheels/ -o json",
                      "stackpin upgrade check profiles/ --feed github:ai-dynamo/dynamo "
                      "--feed registry:nvcr.io/nvidia/ai-dynamo/vllm-runtime"),
    "engines diff": ("stackpin engines diff vllm 0.31.0 0.33.0",),
    "engines check": (f"stackpin engines check {LOCK}",),
    "engines setup-check": ("stackpin engines setup-check",),
    "upgrade propose": ("stackpin upgrade propose profiles/deepseek-v4.1-flash/gb300-tuned.yaml --to dynamo==1.7.0",
                        "stackpin upgrade propose p/stack.yaml --to dynamo==1.7.0 --find-links airgap/ -o json"),
    "trace gen": ("stackpin trace gen --sessions 200 --seed 1 --out agents.jsonl",),
    "trace stats": ("stackpin trace stats agents.jsonl",),
    "trace import": ("stackpin trace import mooncake.jsonl --out agents.jsonl",),
    "sim serve": (f"stackpin sim serve {LOCK} --share 18 --speed 4 --port 8000",
                  f"stackpin sim serve {LOCK} --backend dynamo --share 9"),
    "sim curve": (f"stackpin sim curve {LOCK} --at 80",),
    "sim figures": ("stackpin sim figures --leave-one-out",),
    "bench run": (f"stackpin bench run --endpoint http://127.0.0.1:8000 --trace agents.jsonl --lock {LOCK} "
                  "--agents 1,8,32 --out tuned.json",),
    "rollout gitops": (f"stackpin rollout gitops gitops/fleet/gb300-fleet.yaml {DEPLOYMENT}@2 --output-dir "
                       "gitops/fleet/argocd --format argocd --repo-url https://git.example.invalid/YOUR-ORG/stackpin.git",
                       f"stackpin rollout gitops fleet.yaml {DEPLOYMENT}@2 --output-dir out/ --format flux "
                       "--source stackpin"),
    "bench compare": ("stackpin bench compare launch.json tuned.json --threshold 5%",),
    "bench plot": ("stackpin bench plot launch.json tuned.json --out curve.png",),
    "bench attach": (f"stackpin bench attach {DEPLOYMENT}@2 tuned.json",),
    "bench job": (f"stackpin bench job --lock {LOCK} --endpoint http://frontend:8000 --trace agents.jsonl "
                  "--pods 4 --image registry.example.com/stackpin:0.1.0 --out bench-job.yaml",),
    "bench merge": ("stackpin bench merge pod-*.json --out merged.json",),
    "upgrade trial": ("stackpin upgrade trial upgrades/dynamo-1.7.0/ --sim --share 18 --speed 4 --runs 3",
                      "stackpin upgrade trial upgrades/dynamo-1.7.0/ --endpoint http://candidate:8000 "
                      "--current-endpoint http://current:8000 --trace agents.jsonl --agents 1,8,32"),
    "upgrade promote": ("stackpin upgrade promote upgrades/dynamo-1.7.0/",
                        "stackpin upgrade promote upgrades/dynamo-1.7.0/ --allow-no-change -m 'same speed, newer "
                        "engines'"),
    "rollout start": (f"stackpin rollout start fleet.yaml {DEPLOYMENT}@2",),
    "rollout status": ("stackpin rollout status gb300-west -o json",),
    "rollout pause": ("stackpin rollout pause gb300-west",),
    "rollout resume": ("stackpin rollout resume fleet.yaml",),
    "rollout abort": ("stackpin rollout abort gb300-west --rollback",),
    "plan": ("stackpin plan --agents 10000 launch.json rubin.json --mature tuned.json --chart plan.png",),
    "search": ("stackpin search profiles/deepseek-v4.1-flash/gb300-tuned.yaml --slo tps=80,ttft=10s --trace "
               "agents.jsonl --racks 2 --top 3 --chart front.png",
               "stackpin search profiles/deepseek-v4.1-flash/vera-rubin-tuned.yaml --slo tps=80,ttft=10s --trace "
               "agents.jsonl --dry-run --format json --model roofline --out proposals/vr --force"),
    "site probe": ("stackpin site probe profiles/deepseek-v4.1-flash/vera-rubin-tuned.yaml --apply",
                   "stackpin site probe --platform vera-rubin-nvl72 --image IMAGE --selector example.com/pool=rubin "
                   "--nodes 18 --out probe.yaml"),
    "site import": ("stackpin site import probe.log --from-cluster --selector example.com/pool=rubin --out "
                    "site/site.yaml",
                    "stackpin site import probe.log --platform vera-rubin-nvl72 --strict --out site/site.yaml"),
}


def add_examples(command: click.Command, path: tuple[str, ...]) -> None:
    """`command`'s --help ends with its examples (kept as click wrote the rest); a group's subcommands' too."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            add_examples(sub, (*path, name))
    elif (lines := EXAMPLES.get(" ".join(path))) is not None:
        command.epilog = "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
