"""The cluster edge's HTTP and credentials (stackpin/deploy/transport.py, credentials.py) where the real API
server of tests/kube.py cannot show them: a token that changes while a command runs (a rotated tokenFile, an
exec plugin's token refused or expired), basic auth, a server that closes kept-alive connections, an answer
too large to read. The server here is a plain HTTP endpoint on loopback standing in for the API server's
authentication: it accepts the one Authorization header the test says is current and answers 401 otherwise.
Everything else the edge does (TLS, client certificates, CAs, tls-server-name, proxies, kubectl's merge) is
tested against the real API server in tests/test_deploy_kubeconfig.py."""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stackpin.deploy import transport
from stackpin.deploy.kube import ClusterError, connect


class Endpoint:
    def __init__(self) -> None:
        self.accept = "Bearer first"
        self.seen: list[str | None] = []  # each request's Authorization header
        self.connections = 0
        self.close_after_answer = False
        self.closed = threading.Event()  # set when the server has closed a connection after its answer
        self.body = b'{"kind": "Namespace"}'


@pytest.fixture
def endpoint() -> Iterator[tuple[Endpoint, str]]:
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            state.connections += 1

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            header = self.headers.get("Authorization")
            state.seen.append(header)
            ok = header == state.accept
            body = state.body if ok else b'{"kind": "Status", "message": "Unauthorized"}'
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if state.close_after_answer:  # as a server dropping idle connections does: no Connection: close
                self.close_connection = True

        def finish(self) -> None:
            super().finish()
            if state.close_after_answer:
                state.closed.set()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def kubeconfig(tmp_path: Path, server: str, user: dict[str, Any]) -> str:
    path = tmp_path / "config"
    path.write_text(json.dumps({
        "current-context": "c", "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


def get(config: str) -> Any:
    cluster = connect(config, None)
    return cluster, cluster.request("GET", "/api/v1/namespaces/default")


def test_a_rotated_token_file_is_read_again_when_the_server_refuses_the_old_token(
        endpoint: tuple[Endpoint, str], tmp_path: Path) -> None:
    state, server = endpoint
    token = tmp_path / "token"
    token.write_text("first\n")
    cluster, (status, _) = get(kubeconfig(tmp_path, server, {"tokenFile": str(token)}))
    assert status == 200
    token.write_text("second\n")  # the kubelet rotates a projected token in place
    state.accept = "Bearer second"
    assert cluster.request("GET", "/api/v1/namespaces/default")[0] == 200
    assert state.seen == ["Bearer first", "Bearer first", "Bearer second"]


def test_a_token_the_file_still_holds_is_not_sent_twice(endpoint: tuple[Endpoint, str], tmp_path: Path) -> None:
    state, server = endpoint
    token = tmp_path / "token"
    token.write_text("wrong\n")
    assert get(kubeconfig(tmp_path, server, {"tokenFile": str(token)}))[1][0] == 401
    assert state.seen == ["Bearer wrong"]


PLUGIN = """import json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
status = {"token": pathlib.Path(sys.argv[2]).read_text().strip()}
if len(sys.argv) > 3:
    status["expirationTimestamp"] = sys.argv[3]
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}))
"""


def plugin_user(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], Path, Path]:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    runs, token = tmp_path / "runs", tmp_path / "plugin-token"
    token.write_text("first")
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(tmp_path / "plugin.py"), str(runs), str(token), *extra],
                     "interactiveMode": "Never"}}, runs, token


def test_an_exec_plugin_runs_once_and_again_when_the_server_refuses_its_token(
        endpoint: tuple[Endpoint, str], tmp_path: Path) -> None:
    state, server = endpoint
    user, runs, token = plugin_user(tmp_path)
    cluster, (status, _) = get(kubeconfig(tmp_path, server, user))
    assert status == 200 and cluster.request("GET", "/api/v1/namespaces/default")[0] == 200
    assert runs.read_text().count("run") == 1  # kept: the credential has no expiry
    token.write_text("second")
    state.accept = "Bearer second"
    assert cluster.request("GET", "/api/v1/namespaces/default")[0] == 200
    assert runs.read_text().count("run") == 2
    assert state.seen == ["Bearer first", "Bearer first", "Bearer first", "Bearer second"]


def test_a_token_the_plugin_just_gave_is_not_asked_for_again(endpoint: tuple[Endpoint, str], tmp_path: Path) -> None:
    state, server = endpoint
    state.accept = "Bearer other"
    user, runs, _ = plugin_user(tmp_path)
    assert get(kubeconfig(tmp_path, server, user))[1][0] == 401
    assert runs.read_text().count("run") == 1 and state.seen == ["Bearer first"]


def test_an_expired_exec_credential_is_asked_for_again(endpoint: tuple[Endpoint, str], tmp_path: Path) -> None:
    state, server = endpoint
    user, runs, _ = plugin_user(tmp_path, "2020-01-01T00:00:00Z")
    cluster, (status, _) = get(kubeconfig(tmp_path, server, user))
    assert status == 200 and cluster.request("GET", "/api/v1/namespaces/default")[0] == 200
    # Loading the kubeconfig ran it once; its credential expired, so each request asks again (as kubectl's).
    assert runs.read_text().count("run") == 3


@pytest.mark.parametrize(("output", "why"), [
    ("not json", "did not print an ExecCredential (not JSON)"),
    ('{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {"token": "t"}}',
     "printed apiVersion 'client.authentication.k8s.io/v1beta1', configured client.authentication.k8s.io/v1"),
    ('{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": '
     '{"clientCertificateData": "x"}}', "gave neither a token nor a client certificate and key"),
])
def test_a_plugin_that_gives_no_usable_token_is_one_line(endpoint: tuple[Endpoint, str], tmp_path: Path,
                                                         output: str, why: str) -> None:
    _, server = endpoint
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": ["-c", f"print({output!r})"]}}
    with pytest.raises(ClusterError) as caught:
        get(kubeconfig(tmp_path, server, user))
    assert str(caught.value) == f"kubeconfig context c: exec plugin {sys.executable}: {why}"


def test_a_token_no_header_can_carry_is_refused_unprinted(endpoint: tuple[Endpoint, str], tmp_path: Path) -> None:
    state, server = endpoint
    token = tmp_path / "token"
    token.write_text("secret-part\nrest\n")
    with pytest.raises(ClusterError) as caught:
        get(kubeconfig(tmp_path, server, {"tokenFile": str(token)}))
    assert str(caught.value) == (f"kubeconfig {tmp_path / 'config'}: context c: tokenFile {token}: the token is empty "
                                 "or holds a character a header cannot carry")
    assert state.seen == []


def test_username_and_password_are_basic_auth(endpoint: tuple[Endpoint, str], tmp_path: Path) -> None:
    state, server = endpoint
    state.accept = "Basic " + base64.b64encode(b"ann:pa:ss").decode()
    assert get(kubeconfig(tmp_path, server, {"username": "ann", "password": "pa:ss"}))[1][0] == 200


def test_a_connection_the_server_closed_while_idle_is_replaced(endpoint: tuple[Endpoint, str],
                                                               tmp_path: Path) -> None:
    state, server = endpoint
    cluster, (status, _) = get(kubeconfig(tmp_path, server, {"token": "first"}))
    assert status == 200 and state.connections == 1
    assert cluster.request("GET", "/api/v1/namespaces/default")[0] == 200
    assert state.connections == 1  # kept alive
    state.close_after_answer = True
    for _ in range(3):
        state.closed.clear()
        assert cluster.request("GET", "/api/v1/namespaces/default")[0] == 200
        assert state.closed.wait(10)  # closed while idle, before the next request
    assert state.connections == 3 and len(state.seen) == 5  # each request sent once, on a new connection


def test_an_answer_larger_than_the_bound_is_not_read(endpoint: tuple[Endpoint, str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    state, server = endpoint
    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1024)
    state.body = b'{"kind": "List", "items": "' + b"x" * 4096 + b'"}'
    with pytest.raises(ClusterError) as caught:
        get(kubeconfig(tmp_path, server, {"token": "first"}))
    assert str(caught.value) == f"{server}: GET /api/v1/namespaces/default: an answer larger than 1024 bytes; not read"


@pytest.mark.parametrize(("cluster", "why"), [
    ({"server": "ftp://127.0.0.1:9"}, "server 'ftp://127.0.0.1:9' is not an https:// or http:// URL"),
    ({"server": "https://127.0.0.1:9", "proxy-url": "ftp://127.0.0.1:1080"},
     "proxy-url: a ftp proxy is not supported (http://, https:// and socks5:// are, as kubectl's)"),
    ({"server": "https://127.0.0.1:9", "certificate-authority-data": "not base64!"},
     "certificate-authority-data is not base64"),
    ({"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": "yes"},
     "insecure-skip-tls-verify must be true or false"),
])
def test_a_cluster_entry_that_cannot_be_used_is_one_line_before_any_connection(
        tmp_path: Path, cluster: dict[str, Any], why: str) -> None:
    path = tmp_path / "config"
    path.write_text(json.dumps({
        "current-context": "c", "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    with pytest.raises(ClusterError) as caught:
        connect(str(path), None)
    assert str(caught.value) == f"kubeconfig {path}: context c: {why}"


def test_the_environment_proxy_is_used_as_kubectl_uses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$HTTPS_PROXY carries an https server's connection unless $NO_PROXY names the server; a loopback
    server never goes through it (Go's rule, so kubectl's). A proxy stackpin cannot use is one line, naming
    the variable, before any connection."""
    monkeypatch.setenv("HTTPS_PROXY", "ftp://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    remote = kubeconfig(tmp_path, "https://10.255.255.1:6443", {"token": "t"})
    with pytest.raises(ClusterError) as caught:
        connect(remote, None)
    assert str(caught.value) == f"kubeconfig {remote}: context c: proxy-url: a ftp proxy is not supported " \
                                "(http://, https:// and socks5:// are, as kubectl's)"
    monkeypatch.setenv("NO_PROXY", "10.255.255.1")
    connect(remote, None)  # bypassed: nothing to refuse
    monkeypatch.delenv("NO_PROXY")
    connect(kubeconfig(tmp_path, "https://127.0.0.1:6443", {"token": "t"}), None)  # loopback: never proxied


@pytest.mark.parametrize(("body", "why"), [
    ("while True:\n    sys.stdout.buffer.write(b'x' * 65536)", "printed more than 1048576 bytes"),
    ("time.sleep(600)", "gave no credential in time"),
])
def test_a_plugin_that_prints_without_end_or_hangs_is_stopped_at_its_bound(tmp_path: Path, body: str,
                                                                          why: str) -> None:
    """Its output is read as it comes and stopped at the bound (the client's ExecProvider reads it whole:
    6 GB in 4.6 s before a check); one that prints nothing is stopped at the deadline; neither outlives it."""
    import os
    import time

    pids = tmp_path / "pid"
    script = f"import os, sys, time\nopen({str(pids)!r}, 'w').write(str(os.getpid()))\n{body}\n"
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": ["-c", script]}}
    started = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        connect(kubeconfig(tmp_path, "https://127.0.0.1:9", user), None, request_timeout_s=2)
    assert time.monotonic() - started < 20
    assert str(caught.value) == f"kubeconfig context c: exec plugin {sys.executable}: {why}"
    with pytest.raises(ProcessLookupError):
        os.kill(int(pids.read_text()), 0)
