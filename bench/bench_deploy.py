"""`stackpin apply` versus `kubectl apply --server-side -k`, and `stackpin status` versus `kubectl get -o
yaml`, side by side against the same real API server (devkit/envtest.py: kube-apiserver + etcd on
loopback). Whole-process wall time, medians; both tools are the installed command-line programs.

Rows (stack gb300-disagg-wide-ep: a DynamoGraphDeployment and its ComputeDomain):
  1. first apply into a namespace without the objects (they are deleted between repeats, untimed);
  2. re-apply with nothing changed;
  3. status of the live stack vs `kubectl get` of the same three objects as YAML;
  4. what applying the same stack again would change, nothing: `stackpin diff DEPLOYMENT@live LOCK` vs
     `kubectl diff --server-side -k` (both a server-side dry run per object and a YAML diff; stackpin
     also reads the record and compares the stacks).
stackpin does more per run than kubectl (the lock is rendered and validated, CRDs and namespace
checked, every write dry-run first, members listed for pruning, the record kept); the request counts
printed say how much.

Then where a cluster command's start-up goes: the import of the cluster client (what
stackpin/deploy/kube.py's connect() imports: the official `kubernetes` client with stackpin/deploy/transport.py,
issue 37), beside the clients stackpin used before where they are installed (its own http.client and ssl edge,
lightkube with httpx2) (`python -X importtime`, cumulative, medians), and `stackpin status`'s import time by
package. Issue 37 made start-up no goal for a cluster command, which waits on the API server: the request
counts, and bench_requests.py's beside kubectl's, are what it answers to.

Aims (issue 21): a re-apply that changes nothing within 2x `kubectl apply --server-side -k`, and status
within 3x `kubectl get -o yaml`.

Run from the repository root: `python bench/bench_deploy.py [REPEATS] [--baseline DIR]` (default 10
repeats). `--baseline DIR` runs another stackpin source tree too (PYTHONPATH=DIR; a checkout from before
a change), in the same rounds. Without a kube-apiserver binary (see devkit/envtest.py) it prints why and
exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.envtest import Envtest, EnvtestUnavailable, find_tool, start_envtest  # noqa: E402
from devkit.installed import installed_stackpin  # noqa: E402
from devkit.timing import ensure_bytecode, import_ms_by_group, load_note  # noqa: E402

STACK = "gb300-disagg-wide-ep"
NAMESPACE = "dynamo"  # the namespace the rendered files name, so `kubectl apply -k` needs no override
# The rendered runtime-attestation ConfigMap (named by its content), as render wrote it.
ATTESTATION = next((ROOT / "manifests" / STACK).glob("configmap-*.yaml")).stem.removeprefix("configmap-")
OBJECTS = ("/apis/nvidia.com/v1beta1/namespaces/dynamo/dynamographdeployments/dsv41-flash",
           "/apis/resource.nvidia.com/v1beta1/namespaces/dynamo/computedomains/dsv41-flash-compute-domain",
           f"/api/v1/namespaces/dynamo/configmaps/{ATTESTATION}",
           "/api/v1/namespaces/dynamo/configmaps/stackpin-dsv41-flash")


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU: user + system) seconds of one process; CPU moves less when other work shares the cores."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd[:3])} failed ({code}): {err.read().decode(errors='replace')[-500:]}")
    return elapsed, usage.ru_utime + usage.ru_stime


def _reset(server: Envtest) -> None:
    """Delete the stack's objects and stackpin's record (untimed); no finalizers, so they go at once."""
    for path in OBJECTS:
        server.request("DELETE", path)


def _count_requests(server: Envtest, cmd: list[str], env: dict[str, str]) -> int:
    """Resource requests one run sends, as the server counts them (apiserver_request_total; discovery
    and /metrics are not resource requests and are not counted)."""
    def total() -> float:
        _, text = server.request("GET", "/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in str(text).splitlines()
                   if line.startswith("apiserver_request_total{"))
    before = total()
    _timed(cmd, env)
    return int(total() - before)




def _stackpin(python: Path) -> list[str]:
    """What the console script does, for whichever tree PYTHONPATH names (-P: not the cwd first, which is this
    one), run by `python`."""
    return [str(python), "-P", "-c", "import sys, stackpin.cli.main as m; sys.argv[0] = 'stackpin'; "
            "sys.exit((getattr(m, 'run', None) or m.main)())"]


REAPPLY_AIM = 2.0  # x kubectl apply --server-side -k, nothing changed
STATUS_AIM = 3.0  # x kubectl get -o yaml of the same objects
# What connect() imports (stackpin/deploy/kube.py), and what the clients it replaced needed.
CLIENTS = {"kubernetes + transport (now)": "import kubernetes.client, kubernetes.config.kube_config, urllib3, "
                                           "stackpin.deploy.transport",
           "http.client + ssl (before)": "import http.client, ssl",
           "lightkube + httpx2 (before that)": "import lightkube.config.kubeconfig, lightkube.config.client_adapter, "
                                               "httpx2"}


def _import_ms(statement: str, repeats: int) -> float | None:
    """Median cumulative import time (ms, `python -X importtime`) of the statement's top-level imports in a
    fresh interpreter; None when it cannot be imported here."""
    samples = []
    for _ in range(repeats):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True,
                              check=False)
        if proc.returncode:
            return None
        samples.append(sum(int(line.split("|")[1]) for line in proc.stderr.splitlines()
                           if line.startswith("import time:") and "|" in line and "cumulative" not in line
                           and not line.split("|")[2].startswith("  ")) / 1000)
    return statistics.median(samples)


# The modules of the cluster commands themselves, and the cluster client (HTTP and TLS; in a tree from before
# it, lightkube and httpx2 without msgspec, which the documents every command reads use too): what `status`
# costs beyond the models.
OWN = ("stackpin.deploy", "stackpin.history", "stackpin.cli.deploy")
CLUSTER_CLIENT = ("http", "ssl", "_ssl", "stackpin.deploy.transport", "stackpin.deploy.credentials", "kubernetes",
                  "urllib3", "socks", "dateutil", "six", "oauthlib", "requests", "requests_oauthlib",
                  "lightkube", "httpx2", "httpcore2", "h11", "h2", "hpack", "hyperframe", "anyio", "sniffio",
                  "truststore", "wsproto", "certifi", "idna", "asyncio")


def _self_ms(cmd: list[str], env: dict[str, str], prefixes: tuple[str, ...], runs: int) -> float:
    """Median self import time (ms, -X importtime) of the modules under `prefixes` in one run of `cmd`."""
    samples = []
    for _ in range(runs):
        proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=ROOT, capture_output=True, text=True,
                              check=True, env=env)
        total = 0
        for line in proc.stderr.splitlines():
            if line.startswith("import time:") and "|" in line and "self [us]" not in line:
                self_us, _, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
                total += int(self_us) if any(name == p or name.startswith(p + ".") for p in prefixes) else 0
        samples.append(total / 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repeats", nargs="?", type=int, default=10)
    parser.add_argument("--baseline", type=Path, help="another stackpin source tree, run beside (PYTHONPATH)")
    args = parser.parse_args()
    repeats = args.repeats
    ensure_bytecode()
    if args.baseline:
        ensure_bytecode(args.baseline)
    # Each stackpin runs its own tree, whatever the console script's editable install points at.
    trees = {"stackpin": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    try:
        kubectl = str(find_tool("kubectl"))
        with (tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp, installed_stackpin() as bin_dir,
              start_envtest(Path(tmp) / "envtest") as server):
            stackpin = _stackpin(bin_dir / "python")
            server.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
            env = {**os.environ, "KUBECONFIG": str(server.kubeconfig), "KUBECACHEDIR": str(Path(tmp) / "kube-cache")}
            envs = {tool: {**env, "PYTHONPATH": str(tree)} for tool, tree in trees.items()}
            envs["kubectl"] = env
            ours = ([*stackpin, "apply", f"lockfiles/{STACK}.lock.yaml"],
                    [*stackpin, "status", "dsv41-flash", "-n", NAMESPACE],
                    [*stackpin, "diff", "dsv41-flash@live", f"lockfiles/{STACK}.lock.yaml"])
            tools = {
                **dict.fromkeys(trees, ours),
                "kubectl": ([kubectl, "apply", "--server-side", "-k", f"manifests/{STACK}"],
                            [kubectl, "get", "-n", NAMESPACE, "-o", "yaml", "dynamographdeployment/dsv41-flash",
                             "computedomain/dsv41-flash-compute-domain", f"configmap/{ATTESTATION}"],
                            [kubectl, "diff", "--server-side", "-k", f"manifests/{STACK}"]),
            }
            first: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
            again: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
            status: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
            diff: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
            for tool, (apply, _, _) in tools.items():  # warm the page cache and kubectl's discovery cache
                _reset(server)
                _timed(apply, envs[tool])
            for _ in range(repeats):
                for tool, (apply, get, live) in tools.items():
                    _reset(server)
                    first[tool].append(_timed(apply, envs[tool]))
                    again[tool].append(_timed(apply, envs[tool]))
                    status[tool].append(_timed(get, envs[tool]))
                    diff[tool].append(_timed(live, envs[tool]))  # exit 0: no change (both tools)
            requests = {}
            for tool, (apply, get, live) in tools.items():
                e = envs[tool]
                _reset(server)
                requests[tool] = (_count_requests(server, apply, e), _count_requests(server, apply, e),
                                  _count_requests(server, get, e), _count_requests(server, live, e))
            apply, get, _ = ours
            _timed(apply, envs["stackpin"])  # the record back, for status to read
            groups = {tool: import_ms_by_group(get, env=envs[tool]) for tool in trees}
            own = {tool: (_self_ms(get, envs[tool], OWN, 5), _self_ms(get, envs[tool], CLUSTER_CLIENT, 5))
                   for tool in trees}
    except EnvtestUnavailable as exc:
        print(f"skipped: no Kubernetes API server to measure against: {exc}")
        return

    print(f"medians of {repeats}, whole process, same kube-apiserver on loopback, run in turn; stack {STACK} "
          f"(3 objects); {load_note()}")
    base = "baseline" in trees
    print(f"{'case':<34} {'stackpin':>9}{'  baseline' if base else ''} {'kubectl':>9}  ratio  resource requests "
          f"(stackpin / kubectl)  CPU: stackpin{' / baseline' if base else ''}")
    rows = (("first apply", first, 0), ("re-apply, nothing changed", again, 1), ("status vs get -o yaml", status, 2),
            ("diff @live vs diff --server-side", diff, 3))
    ratios = {}
    def wall(samples: list[tuple[float, float]]) -> float:
        return statistics.median(w for w, _ in samples)

    def cpu(samples: list[tuple[float, float]]) -> str:
        return f"{statistics.median(c for _, c in samples) * 1000:.0f}ms"

    for label, times, index in rows:
        mine, theirs = wall(times["stackpin"]), wall(times["kubectl"])
        before = f" {wall(times['baseline']) * 1000:>8.0f}ms" if base else ""
        ratios[index] = (mine, theirs)
        print(f"{label:<34} {mine * 1000:>7.0f}ms{before} {theirs * 1000:>7.0f}ms  {mine / theirs:4.1f}x  "
              f"{requests['stackpin'][index]:>5} / {requests['kubectl'][index]:<18} {cpu(times['stackpin'])}"
              + (f" / {cpu(times['baseline'])}" if base else ""))
    print(f"stackpin: its console script's entry point, run by the interpreter of a fresh venv (no editable install; "
          f"devkit/installed.py), apply lockfiles/{STACK}.lock.yaml; kubectl: "
          f"{_shown(kubectl)} apply --server-side -k manifests/{STACK}"
          + (f"; baseline: PYTHONPATH={trees['baseline']}" if base else ""))
    print(f"cluster client import, cumulative (-X importtime, inflated by the tracing), median of {repeats}:")
    for name, statement in CLIENTS.items():
        took = _import_ms(statement, repeats)
        print(f"  {name:<26} " + (f"{took:6.0f} ms" if took is not None else "not installed"))
    for tool, by_group in groups.items():
        print(f"{tool} status, import time by package (self, -X importtime): "
              + ", ".join(f"{group} {value:.0f}ms" for group, value in by_group.items()))
        print(f"  of which the cluster commands' own modules ({', '.join(OWN)}) {own[tool][0]:.0f}ms; the cluster "
              f"client (http.client, ssl, transport, credentials; lightkube, httpx2, ... before) {own[tool][1]:.0f}ms")
    for index, what, aim in ((1, "re-apply (nothing changed) vs kubectl apply --server-side -k", REAPPLY_AIM),
                             (2, "status vs kubectl get -o yaml", STATUS_AIM)):
        mine, theirs = ratios[index]
        print(f"aim: {what} within {aim:g}x: {mine * 1000:.0f} ms vs {theirs * 1000:.0f} ms = "
              f"{mine / theirs:.1f}x: {'met' if mine <= aim * theirs else 'NOT met'}")


def _shown(path: str) -> str:
    """A path relative to the repository when it is inside it (.venv/bin/...)."""
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return path


if __name__ == "__main__":
    main()
