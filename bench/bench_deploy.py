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

Run from the repository root: `python bench/bench_deploy.py [REPEATS]` (default 7). Without a
kube-apiserver binary (see devkit/envtest.py) it prints why and exits 0.
"""

from __future__ import annotations

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

STACK = "gb300-disagg-wide-ep"
NAMESPACE = "dynamo"  # the namespace the rendered files name, so `kubectl apply -k` needs no override
# The rendered runtime-attestation ConfigMap (named by its content), as render wrote it.
ATTESTATION = next((ROOT / "manifests" / STACK).glob("configmap-*.yaml")).stem.removeprefix("configmap-")
OBJECTS = ("/apis/nvidia.com/v1beta1/namespaces/dynamo/dynamographdeployments/dsv41-flash",
           "/apis/resource.nvidia.com/v1beta1/namespaces/dynamo/computedomains/dsv41-flash-compute-domain",
           f"/api/v1/namespaces/dynamo/configmaps/{ATTESTATION}",
           "/api/v1/namespaces/dynamo/configmaps/stackpin-dsv41-flash")


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return elapsed


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


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    bindir = Path(sys.executable).parent
    stackpin = str(bindir / "stackpin")
    try:
        kubectl = str(find_tool("kubectl"))
        with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp, start_envtest(Path(tmp) / "envtest") as server:
            server.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
            env = {**os.environ, "KUBECONFIG": str(server.kubeconfig), "KUBECACHEDIR": str(Path(tmp) / "kube-cache")}
            tools = {
                "stackpin": ([stackpin, "apply", f"lockfiles/{STACK}.lock.yaml"],
                             [stackpin, "status", "dsv41-flash", "-n", NAMESPACE],
                             [stackpin, "diff", "dsv41-flash@live", f"lockfiles/{STACK}.lock.yaml"]),
                "kubectl": ([kubectl, "apply", "--server-side", "-k", f"manifests/{STACK}"],
                            [kubectl, "get", "-n", NAMESPACE, "-o", "yaml", "dynamographdeployment/dsv41-flash",
                             "computedomain/dsv41-flash-compute-domain", f"configmap/{ATTESTATION}"],
                            [kubectl, "diff", "--server-side", "-k", f"manifests/{STACK}"]),
            }
            first: dict[str, list[float]] = {t: [] for t in tools}
            again: dict[str, list[float]] = {t: [] for t in tools}
            status: dict[str, list[float]] = {t: [] for t in tools}
            diff: dict[str, list[float]] = {t: [] for t in tools}
            for apply, _, _ in tools.values():  # warm the page cache and kubectl's discovery cache
                _reset(server)
                _timed(apply, env)
            for _ in range(repeats):
                for tool, (apply, get, live) in tools.items():
                    _reset(server)
                    first[tool].append(_timed(apply, env))
                    again[tool].append(_timed(apply, env))
                    status[tool].append(_timed(get, env))
                    diff[tool].append(_timed(live, env))  # exit 0: no change (both tools)
            requests = {}
            for tool, (apply, get, live) in tools.items():
                _reset(server)
                requests[tool] = (_count_requests(server, apply, env), _count_requests(server, apply, env),
                                  _count_requests(server, get, env), _count_requests(server, live, env))
    except EnvtestUnavailable as exc:
        print(f"skipped: no Kubernetes API server to measure against: {exc}")
        return

    print(f"medians of {repeats}, whole process, same kube-apiserver on loopback; stack {STACK} (3 objects)")
    print(f"{'case':<34} {'stackpin':>9} {'kubectl':>9}  ratio  resource requests (stackpin / kubectl)")
    rows = (("first apply", first, 0), ("re-apply, nothing changed", again, 1), ("status vs get -o yaml", status, 2),
            ("diff @live vs diff --server-side", diff, 3))
    for label, times, index in rows:
        ours, theirs = statistics.median(times["stackpin"]), statistics.median(times["kubectl"])
        print(f"{label:<34} {ours * 1000:>7.0f}ms {theirs * 1000:>7.0f}ms  {ours / theirs:4.1f}x  "
              f"{requests['stackpin'][index]} / {requests['kubectl'][index]}")
    print(f"stackpin: {_shown(stackpin)} apply lockfiles/{STACK}.lock.yaml; kubectl: {_shown(kubectl)} apply "
          f"--server-side -k manifests/{STACK}")


def _shown(path: str) -> str:
    """A path relative to the repository when it is inside it (.venv/bin/...)."""
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return path


if __name__ == "__main__":
    main()
