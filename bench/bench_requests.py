"""Round trips per cluster command, beside kubectl's for the same work (issue 37: against a remote API
server the requests, not start-up, are what a user waits for).

Every HTTP request each command sends is counted by a loopback HTTPS front (devkit/kubefront.py) in
front of a real kube-apiserver + etcd (devkit/envtest.py): discovery, /version and watches included,
which the server's apiserver_request_total leaves out. Both tools run as their command-line programs
(stackpin from this tree, kubectl from the venv), against the same namespace, one after the other:

  1. first apply into a namespace without the objects;
  2. re-apply with nothing changed: `stackpin apply LOCK` vs `kubectl apply --server-side` of the
     rendered object files (`-f` each, and `-k` the rendered directory);
  3. `stackpin status` vs `kubectl get` of the same objects.

kubectl keeps discovery in a cache directory (KUBECACHEDIR here, warmed by a first run, as on a
workstation); its count with a cold cache is printed too. stackpin keeps no cache between commands.
stackpin does more than kubectl per apply (the Lease, preflight of kinds, nodes and server version,
the ApplySet record, members listed for pruning, a server-side dry run before any write): the
request list printed for each stackpin row says which request serves what.

Run from the repository root: `python bench/bench_requests.py`. Without a kube-apiserver binary it
prints why and exits 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.envtest import Envtest, EnvtestUnavailable, find_tool, start_envtest  # noqa: E402
from devkit.kubefront import Front, Seen, front_of  # noqa: E402

STACK = "gb300-disagg-wide-ep"
NAMESPACE = "dynamo"  # the namespace the rendered files name
NO_CHANGE_AIM = 10  # requests of a no-change `stackpin apply` (tests/test_deploy_requests.py holds it)
STACKPIN = [sys.executable, "-c", "import sys, stackpin.cli.main as m; sys.argv[0] = 'stackpin'; sys.exit(m.run())"]


def _run(cmd: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[-4:])} failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-800:]}")


def _count(front: Front, cmd: list[str], env: dict[str, str]) -> list[Seen]:
    front.reset()
    _run(cmd, env)
    return front.reset()


def _reset(server: Envtest) -> None:
    """Delete the stack's objects, stackpin's record and any Lease (no finalizers: they go at once)."""
    for plural, base in (("dynamographdeployments", "/apis/nvidia.com/v1beta1"),
                         ("computedomains", "/apis/resource.nvidia.com/v1beta1"), ("configmaps", "/api/v1")):
        for item in server.ok("GET", f"{base}/namespaces/{NAMESPACE}/{plural}")["items"]:
            if item["metadata"]["name"] != "kube-root-ca.crt":
                server.request("DELETE", f"{base}/namespaces/{NAMESPACE}/{plural}/{item['metadata']['name']}")


def main() -> None:
    manifests = ROOT / "manifests" / STACK
    files = sorted(p for p in manifests.glob("*.yaml") if p.name != "kustomization.yaml")
    names = [f"{p.stem.split('-', 1)[0]}/{p.stem.split('-', 1)[1]}" for p in files]
    try:
        kubectl = str(find_tool("kubectl"))
        with tempfile.TemporaryDirectory(prefix="bench-requests-") as tmp, \
                start_envtest(Path(tmp) / "envtest") as server, front_of(server) as front:
            server.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
            config = front.kubeconfig(server.kubeconfig)
            cache = Path(tmp) / "kube-cache"
            env = {**os.environ, "KUBECONFIG": str(config), "KUBECACHEDIR": str(cache), "PYTHONPATH": str(ROOT)}
            ours = {"apply": [*STACKPIN, "apply", f"lockfiles/{STACK}.lock.yaml", "--allow-stand-ins"],
                    "status": [*STACKPIN, "status", "dsv41-flash", "-n", NAMESPACE]}
            k_apply_f = [kubectl, "apply", "--server-side", *(a for p in files for a in ("-f", str(p)))]
            k_apply_k = [kubectl, "apply", "--server-side", "-k", str(manifests)]
            k_get = [kubectl, "get", "-n", NAMESPACE, "-o", "yaml", *names]

            _reset(server)
            s_first = _count(front, ours["apply"], env)
            s_again = _count(front, ours["apply"], env)
            s_status = _count(front, ours["status"], env)
            _reset(server)
            shutil.rmtree(cache, ignore_errors=True)
            k_first_cold = _count(front, k_apply_f, env)
            k_again_f = _count(front, k_apply_f, env)
            k_again_k = _count(front, k_apply_k, env)
            k_get_warm = _count(front, k_get, env)
            shutil.rmtree(cache, ignore_errors=True)
            k_again_cold = _count(front, k_apply_f, env)
            shutil.rmtree(cache, ignore_errors=True)
            k_get_cold = _count(front, k_get, env)
            _reset(server)
            _count(front, k_apply_f, env)  # warm cache, objects absent before
            _reset(server)
            k_first = _count(front, k_apply_f, env)
    except EnvtestUnavailable as exc:
        print(f"skipped: no Kubernetes API server to count against: {exc}")
        return

    print(f"HTTP requests per command (every request, discovery included), stack {STACK} ({len(files)} objects), "
          "same kube-apiserver behind a counting loopback front")
    print(f"{'case':<30} {'stackpin':>8} {'kubectl':>8} {'kubectl, cold cache':>20}")
    rows = (("first apply", s_first, k_first, k_first_cold),
            ("re-apply, nothing changed", s_again, k_again_f, k_again_cold),
            ("status vs get -o yaml", s_status, k_get_warm, k_get_cold))
    for label, mine, theirs, cold in rows:
        print(f"{label:<30} {len(mine):>8} {len(theirs):>8} {len(cold):>20}")
    print(f"kubectl apply --server-side -k (nothing changed, warm cache): {len(k_again_k)}")
    for label, seen in (("stackpin apply, nothing changed", s_again), ("stackpin status", s_status),
                        ("kubectl apply --server-side -f, nothing changed", k_again_f),
                        ("kubectl get", k_get_warm)):
        print(f"{label}:")
        for s in seen:
            dry = " (dry run)" if s.query.get("dryRun") else ""
            print(f"  {s}{dry}")
    met = len(s_again) <= NO_CHANGE_AIM
    print(f"aim: no-change stackpin apply in at most {NO_CHANGE_AIM} requests: {len(s_again)}: "
          f"{'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
