"""kubeconfig features as kubectl reads them (stackpin/deploy/kube.py and credentials.py),
each against the real API server of tests/kube.py, and beside kubectl where kubectl can say the same file
works: $KUBECONFIG lists merged (first wins, paths relative to their own file), tokenFile, inline
certificate data, exec plugins (KUBERNETES_EXEC_INFO, apiVersion v1 and v1beta1, one line when one fails),
tls-server-name, proxy-url; files a context names that are not regular files are refused unread.

The probe is `stackpin status nothing-here`: a server reached with accepted credentials answers that there is
no such deployment; anything else is one error line."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from devkit.envtest import find_tool
from stackpin.cli.main import main
from tests.helpers import accept_forever, pipe_sockets
from tests.kube import Kube

REACHED = "error: no stackpin deployment nothing-here in namespace "


def probe(kube: Kube, config: Path | None = None, env: dict[str, str] | None = None) -> list[str]:
    """stderr lines of `stackpin status nothing-here` (exit 2 either way)."""
    args = ["status", "nothing-here", "-n", kube.namespace, *(["--kubeconfig", str(config)] if config else [])]
    result = CliRunner().invoke(main, args, env=env)
    text = result.output
    assert "Traceback" not in text and not [u for u, t in kube.env.tokens.items() if t in text], text
    assert result.exit_code == 2, text
    return result.stderr.splitlines()


def kubectl_works(kube: Kube, config: Path | None = None, env: dict[str, str] | None = None) -> bool:
    """Whether kubectl reads the same kubeconfig and is let in (a list of the test's ConfigMaps)."""
    cmd = [str(find_tool("kubectl")), *(["--kubeconfig", str(config)] if config else []), "get", "configmaps",
           "-n", kube.namespace]
    return subprocess.run(cmd, capture_output=True, env={**os.environ, **(env or {})}, timeout=60,
                          check=False).returncode == 0


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def single(kube: Kube, cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": kube.env.url, **cluster}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


def test_the_kubeconfig_list_is_merged_as_kubectl_merges_it(kube: Kube, tmp_path: Path) -> None:
    """First file to name an entry wins it whole, and the first current-context; a relative path is relative to
    the file that holds it; empty entries and missing files are skipped."""
    token = kube.env.tokens["admin"]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "ca.crt").write_bytes(kube.env.ca.read_bytes())
    (tmp_path / "b" / "token").write_text(token + "\n")
    first = write(tmp_path / "a" / "config", {"current-context": "merged", "contexts": [
        {"name": "merged", "context": {"cluster": "c", "user": "u"}}]})
    second = write(tmp_path / "b" / "config", {
        "current-context": "nowhere",
        "clusters": [{"name": "c", "cluster": {"server": kube.env.url, "certificate-authority": "ca.crt"}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "merged", "context": {"cluster": "none", "user": "none"}}]})
    third = write(tmp_path / "c" / "config", {"users": [{"name": "u", "user": {"token": "not-the-token-0123"}}]})
    listed = os.pathsep.join([str(first), "", str(tmp_path / "absent"), str(second), str(third)])
    env = {"KUBECONFIG": listed}
    assert probe(kube, env=env)[0].startswith(REACHED + kube.namespace)
    assert kubectl_works(kube, env=env)
    # The other way round, the third file's user (a token the server does not know) wins, for both tools.
    env = {"KUBECONFIG": os.pathsep.join([str(first), str(third), str(second)])}
    assert probe(kube, env=env) == [
        f"error: {kube.env.url}: the credentials of kubeconfig context merged were not accepted (401 Unauthorized)"]
    assert not kubectl_works(kube, env=env)


def test_inline_certificate_data_and_a_client_certificate_from_it(kube: Kube, tmp_path: Path) -> None:
    d = kube.env.workdir
    b64 = {name: base64.b64encode((d / name).read_bytes()).decode() for name in ("cert-admin.crt", "cert-admin.key")}
    config = write(tmp_path / "config", single(
        kube, {"certificate-authority-data": base64.b64encode(kube.env.ca.read_bytes()).decode()},
        {"client-certificate-data": b64["cert-admin.crt"], "client-key-data": b64["cert-admin.key"]}))
    assert probe(kube, config)[0].startswith(REACHED)
    assert kubectl_works(kube, config)


PLUGIN = """import json, os, sys
info = json.loads(os.environ.get("KUBERNETES_EXEC_INFO") or "{}")
if info.get("apiVersion") != sys.argv[1] or info.get("spec", {}).get("interactive") is not False:
    sys.exit("no KUBERNETES_EXEC_INFO for " + sys.argv[1] + ": " + json.dumps(info))
if os.environ.get("FROM_KUBECONFIG") != "yes":
    sys.exit("the kubeconfig's env did not reach the plugin")
print(json.dumps({"apiVersion": sys.argv[1], "kind": "ExecCredential", "status": {"token": sys.argv[2]}}))
"""


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_an_exec_plugin_is_run_as_kubectl_runs_it(kube: Kube, tmp_path: Path, version: str) -> None:
    """As plugins built on client-go's exec package need: KUBERNETES_EXEC_INFO names the configured apiVersion."""
    api_version = f"client.authentication.k8s.io/{version}"
    (tmp_path / "plugin.py").write_text(PLUGIN)
    config = write(tmp_path / "config", single(kube, {"certificate-authority": str(kube.env.ca)}, {"exec": {
        "apiVersion": api_version, "command": sys.executable, "interactiveMode": "Never",
        "args": [str(tmp_path / "plugin.py"), api_version, kube.env.tokens["admin"]],
        "env": [{"name": "FROM_KUBECONFIG", "value": "yes"}]}}))
    assert probe(kube, config)[0].startswith(REACHED)
    assert kubectl_works(kube, config)


def test_a_failing_or_missing_exec_plugin_is_one_line_naming_the_context(kube: Kube, tmp_path: Path) -> None:
    failing = {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
               "args": ["-c", "import sys; sys.stderr.write('token expired\\nrun: cloud login\\n'); sys.exit(3)"]}
    config = write(tmp_path / "config", single(kube, {"certificate-authority": str(kube.env.ca)}, {"exec": failing}))
    [line] = probe(kube, config)
    assert line == (f"error: kubeconfig context c: exec plugin {sys.executable}: exited 3: "
                    "token expired run: cloud login")
    missing = {**failing, "command": str(tmp_path / "no-such-plugin")}
    config = write(tmp_path / "config", single(kube, {"certificate-authority": str(kube.env.ca)}, {"exec": missing}))
    [line] = probe(kube, config)
    assert line.startswith(f"error: kubeconfig context c: exec plugin {tmp_path / 'no-such-plugin'}: ")
    assert "No such file or directory" in line


@pytest.mark.parametrize("field", ["tokenFile", "certificate-authority", "client-key"])
def test_a_file_the_context_names_that_is_not_a_regular_file_is_refused_unread(kube: Kube, tmp_path: Path,
                                                                               field: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # read whole, it would block for ever
    d = kube.env.workdir
    user = {"tokenFile": str(fifo)} if field == "tokenFile" else \
        {"client-certificate": str(d / "cert-admin.crt"), "client-key": str(fifo if field == "client-key" else
                                                                            d / "cert-admin.key")}
    ca = fifo if field == "certificate-authority" else kube.env.ca
    config = write(tmp_path / "config", single(kube, {"certificate-authority": str(ca)}, user))
    assert probe(kube, config) == [f"error: kubeconfig {config}: context c: {field} {fifo}: not a regular file of "
                                   "at most 1048576 bytes"]


TLS_CASES = [
    # The server's certificate names 127.0.0.1 and `kubernetes`, not `elsewhere.example`.
    ("tls-server-name-matches", {"tls-server-name": "kubernetes"}, None),
    ("tls-server-name-differs", {"tls-server-name": "elsewhere.example"}, "elsewhere.example"),
    # Without a CA the system's roots are trusted, and envtest's own CA is not among them; with
    # insecure-skip-tls-verify (and no CA) the server is not verified at all.
    ("no-ca", {"certificate-authority": None}, "certificate verify failed"),
    ("insecure-skip-tls-verify", {"certificate-authority": None, "insecure-skip-tls-verify": True}, None),
]


@pytest.mark.parametrize(("cluster", "refused"), [c[1:] for c in TLS_CASES], ids=[c[0] for c in TLS_CASES])
def test_the_server_is_verified_as_kubectl_verifies_it(kube: Kube, tmp_path: Path, cluster: dict[str, Any],
                                                      refused: str | None) -> None:
    """tls-server-name is the name checked in the server's certificate; the CA, or else the system's roots,
    is whom it must be signed by; insecure-skip-tls-verify checks nothing. Both tools agree on each."""
    fields = {k: v for k, v in {"certificate-authority": str(kube.env.ca), **cluster}.items() if v is not None}
    config = write(tmp_path / "config", single(kube, fields, {"token": kube.env.tokens["admin"]}))
    [line] = probe(kube, config)
    if refused is None:
        assert line.startswith(REACHED)
    else:
        assert line.startswith(f"error: could not reach the API server {kube.env.url}: TLS: ") and refused in line, line
    assert kubectl_works(kube, config) is (refused is None)


@pytest.fixture
def connect_proxy() -> Iterator[tuple[str, list[str]]]:
    """An HTTP CONNECT proxy on loopback: its URL, and the targets it was asked for."""
    listener = socket.create_server(("127.0.0.1", 0))
    asked: list[str] = []

    def serve(client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and (chunk := client.recv(4096)):
            head += chunk
        target = head.split(b" ")[1].decode()
        asked.append(target)
        host, _, port = target.rpartition(":")
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        threading.Thread(target=pipe_sockets, args=(upstream, client), daemon=True).start()
        pipe_sockets(client, upstream)

    accept_forever(listener, serve)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", asked
    listener.close()


def test_proxy_url_carries_the_connection(kube: Kube, tmp_path: Path, connect_proxy: tuple[str, list[str]]) -> None:
    url, asked = connect_proxy
    config = write(tmp_path / "config", single(kube, {"certificate-authority": str(kube.env.ca), "proxy-url": url},
                                               {"token": kube.env.tokens["admin"]}))
    assert probe(kube, config)[0].startswith(REACHED)
    assert asked and set(asked) == {kube.env.url.removeprefix("https://")}
