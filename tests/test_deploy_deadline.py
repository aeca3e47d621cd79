"""One deadline per cluster command (--request-timeout, all its requests together), against a real
kube-apiserver whose etcd has been stopped: the server takes connections and never answers, which
used to cost `status` 180 s and `apply` 61 s (a 60 s read timeout per request, and urllib3 retrying).

The server here is one of this module's own (devkit.envtest, no CRDs: nothing gets as far as
needing them), so that stopping its etcd leaves the other tests' server alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.envtest import Envtest, EnvtestUnavailable, start_envtest
from stackpin.deploy.kube import REQUEST_TIMEOUT_S
from tests.kube import dead_kubeconfig, lockfile

STACKPIN = Path(sys.executable).with_name("stackpin")


@pytest.fixture(scope="module")
def etcd_down(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Envtest]:
    try:
        with start_envtest(tmp_path_factory.mktemp("etcd-down"), crds=False) as env:
            env.etcd.send_signal(signal.SIGKILL)  # as a crashed or partitioned etcd: the API server stays up
            env.etcd.wait()
            yield env
    except EnvtestUnavailable as exc:
        pytest.skip(f"no Kubernetes API server: {exc}")


def test_every_cluster_command_fails_within_its_request_timeout_with_one_line(etcd_down: Envtest,
                                                                              tmp_path: Path) -> None:
    env = etcd_down
    commands = {
        "status": ["status", "dsv41-flash"],
        "apply": ["apply", lockfile("gb300-tuned"), "--allow-stand-ins"],
        "diff @live": ["diff", "dsv41-flash@live", lockfile("gb300-tuned")],
        "history --cluster": ["history", "dsv41-flash", "--cluster"],
    }
    runs = {}
    started = time.monotonic()
    # What a process costs before its first request (imports, rendering the lock), on this machine now:
    # the same command against a closed port, which fails at once.
    dead, _ = dead_kubeconfig(tmp_path)
    baseline = subprocess.Popen([str(STACKPIN), "apply", lockfile("gb300-tuned"), "--allow-stand-ins", "--kubeconfig",
                                 str(dead)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    for name, args in commands.items():  # all at once: the default deadline is the slow one
        for limit in ("4", None):
            if limit is None and name not in ("status", "apply"):
                continue
            extra = ["--request-timeout", limit] if limit else []
            runs[(name, limit)] = (time.monotonic(), subprocess.Popen(
                [str(STACKPIN), *args, "--kubeconfig", str(env.kubeconfig), "-n", "dynamo", *extra],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path))
    ended: dict[tuple[str, str | None], float] = {}
    while len(ended) < len(runs) and time.monotonic() - started < REQUEST_TIMEOUT_S + 60:
        for key, (_, proc) in runs.items():
            if key not in ended and proc.poll() is not None:
                ended[key] = time.monotonic()
        time.sleep(0.05)
    baseline.communicate(timeout=120)
    assert baseline.returncode == 2
    overhead = time.monotonic() - started
    for (name, limit), (begun, proc) in runs.items():
        _, err = proc.communicate(timeout=1)
        took = ended[(name, limit)] - begun
        seconds = float(limit) if limit else REQUEST_TIMEOUT_S
        assert proc.returncode == 2, (name, err)
        assert err.splitlines() == [
            f"error: the API server {env.url} did not answer within --request-timeout {seconds:g}s (all requests "
            "together) (hint: is the server healthy (its etcd up)? raise --request-timeout if it is only slow)"], name
        # the deadline, plus the process's start-up, with room for a loaded machine
        assert seconds <= took < seconds + overhead + 5, (name, limit, took, overhead)
