"""The kubeconfig matrix (issue 37): each form kubectl supports, against the real API server of tests/kube.py,
with kubectl and stackpin side by side: both let in, or both refused. Beside it, what a busy or restarted
server does: a 429 with Retry-After (a loopback front answers it once, then forwards), and a watch that gets
a 410 Expired ERROR event (a front injects it). The proxies are in-process loopback ones (HTTP CONNECT and
SOCKS5), nothing leaves the machine.

The probe is `stackpin status nothing-here` (tests/test_deploy_kubeconfig.py): a server reached with accepted
credentials answers that there is no such deployment; anything else is one error line.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stackpin.deploy.kube import CONFIGMAPS, connect
from tests.helpers import accept_forever, pipe_sockets
from tests.kube import Kube
from tests.test_deploy_kubeconfig import REACHED, connect_proxy, kubectl_works, probe, single, write

__all__ = ["connect_proxy"]  # the fixture, used by name below

CERT_PLUGIN = """import json, sys
cert, key = (open(p).read() for p in sys.argv[1:3])
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": cert, "clientKeyData": key}}))
"""


def _jwt(claims: dict[str, Any]) -> str:
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def both(kube: Kube, config: Path) -> tuple[bool, bool]:
    """(kubectl let in, stackpin let in) for one kubeconfig."""
    lines = probe(kube, config)
    return kubectl_works(kube, config), lines[0].startswith(REACHED)


def form(kube: Kube, tmp_path: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cluster fields, user) of one kubeconfig form."""
    env, ca = kube.env, {"certificate-authority": str(kube.env.ca)}
    token = env.tokens["admin"]
    d = env.workdir
    if name == "token":
        return ca, {"token": token}
    if name == "tokenFile":
        (tmp_path / "token").write_text(token + "\n")
        return ca, {"tokenFile": str(tmp_path / "token")}
    if name == "client-certificate":
        return ca, {"client-certificate": str(d / "cert-admin.crt"), "client-key": str(d / "cert-admin.key")}
    if name == "exec-token":
        script = f"import json; print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1', " \
                 f"'kind': 'ExecCredential', 'status': {{'token': {token!r}}}}}))"
        return ca, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                             "args": ["-c", script], "interactiveMode": "Never"}}
    if name == "exec-client-certificate":
        (tmp_path / "plugin.py").write_text(CERT_PLUGIN)
        return ca, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                             "args": [str(tmp_path / "plugin.py"), str(d / "cert-admin.crt"),
                                      str(d / "cert-admin.key")],
                             "interactiveMode": "Never"}}
    if name == "basic":  # the API server dropped basic auth (--basic-auth-file, removed in 1.19): both refused
        return ca, {"username": "admin", "password": token}
    if name == "tls-server-name":
        return {**ca, "tls-server-name": "kubernetes"}, {"token": token}
    if name == "insecure-skip-tls-verify":
        return {"insecure-skip-tls-verify": True}, {"token": token}
    if name == "no-ca":  # the system's roots do not hold envtest's CA: both refuse the server
        return {}, {"token": token}
    if name == "wrong-token":
        return ca, {"token": "not-the-token-0123456789"}
    raise AssertionError(name)


FORMS = {  # form -> let in (by both)
    "token": True, "tokenFile": True, "client-certificate": True, "exec-token": True,
    "exec-client-certificate": True, "basic": False, "tls-server-name": True, "insecure-skip-tls-verify": True,
    "no-ca": False, "wrong-token": False,
}


@pytest.mark.parametrize("name", list(FORMS))
def test_each_kubeconfig_form_as_kubectl_takes_it(kube: Kube, tmp_path: Path, name: str) -> None:
    cluster, user = form(kube, tmp_path, name)
    config = write(tmp_path / "config", single(kube, cluster, user))
    assert both(kube, config) == (FORMS[name], FORMS[name])


# --- proxies --------------------------------------------------------------------------------------------


@pytest.fixture
def socks5_proxy() -> Iterator[tuple[str, list[str]]]:
    """A SOCKS5 proxy on loopback (no authentication, CONNECT only): its URL, and the targets asked for."""
    listener = socket.create_server(("127.0.0.1", 0))
    asked: list[str] = []

    def exactly(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    def serve(client: socket.socket) -> None:
        try:
            _, count = exactly(client, 2)
            exactly(client, count)
            client.sendall(b"\x05\x00")  # no authentication
            _, cmd, _, kind = exactly(client, 4)
            if kind == 1:
                host = socket.inet_ntoa(exactly(client, 4))
            elif kind == 3:
                host = exactly(client, exactly(client, 1)[0]).decode()
            else:
                raise OSError("address type")
            (port,) = struct.unpack("!H", exactly(client, 2))
            asked.append(f"{host}:{port}")
            upstream = socket.create_connection((host, port))
            client.sendall(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", 0))
        except OSError:
            client.close()
            return
        threading.Thread(target=pipe_sockets, args=(upstream, client), daemon=True).start()
        pipe_sockets(client, upstream)

    accept_forever(listener, serve)
    yield f"socks5://127.0.0.1:{listener.getsockname()[1]}", asked
    listener.close()


@pytest.mark.parametrize("kind", ["http", "socks5"])
def test_a_proxy_carries_both_tools(kube: Kube, tmp_path: Path, kind: str, connect_proxy: tuple[str, list[str]],
                                    socks5_proxy: tuple[str, list[str]]) -> None:
    url, asked = connect_proxy if kind == "http" else socks5_proxy
    config = write(tmp_path / "config", single(kube, {"certificate-authority": str(kube.env.ca), "proxy-url": url},
                                               {"token": kube.env.tokens["admin"]}))
    assert probe(kube, config)[0].startswith(REACHED)
    stackpin_asked = len(asked)
    assert stackpin_asked and set(asked) == {kube.env.url.removeprefix("https://")}
    assert kubectl_works(kube, config)
    assert len(asked) > stackpin_asked  # kubectl went through it too


# --- a front: HTTPS on loopback with the API server's own certificate, forwarding to it ---------------------
# (https, not http: kubectl sends no credential to an http:// server.)


class Front:
    """What the front does to the next requests, and what it saw."""

    def __init__(self) -> None:
        self.busy = 0  # answer this many requests 429 Retry-After: 1 before forwarding
        self.expire_watch = False  # answer a watch with one ERROR event (410 Expired)
        self.seen: list[tuple[str, str, str | None]] = []  # method, path, Authorization


@pytest.fixture
def front(kube: Kube) -> Iterator[tuple[Front, str]]:
    state = Front()
    tls = ssl.create_default_context(cafile=str(kube.env.ca))
    target = kube.env.url.removeprefix("https://")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            state.seen.append((self.command, self.path, self.headers.get("Authorization")))
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if state.busy > 0:
                state.busy -= 1
                self._answer(429, b'{"kind":"Status","code":429,"message":"too many requests"}', {"Retry-After": "1"})
                return
            if state.expire_watch and "watch=" in self.path:
                event = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                     "message": "too old resource version", "reason": "Expired",
                                                     "code": 410}}
                self._answer(200, json.dumps(event).encode() + b"\n", {}, close=True)
                return
            host, _, port = target.rpartition(":")
            upstream = http.client.HTTPSConnection(host, int(port), context=tls, timeout=60)
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "connection", "accept-encoding")}
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            upstream.close()
            self._answer(answer.status, data, {"Content-Type": answer.getheader("Content-Type") or "application/json"})

        def _answer(self, status: int, body: bytes, headers: dict[str, str], close: bool = False) -> None:
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", **headers}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = close

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815 - http.server's names

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(kube.env.ca, kube.env.workdir / "certs" / "apiserver.key")
    server.socket = served.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def front_config(kube: Kube, tmp_path: Path, server: str, user: dict[str, Any]) -> Path:
    doc = single(kube, {}, user)
    doc["clusters"][0]["cluster"] = {"server": server, "certificate-authority": str(kube.env.ca)}
    return write(tmp_path / "config", doc)


def test_a_busy_server_s_retry_after_is_waited_on_by_both(kube: Kube, tmp_path: Path,
                                                          front: tuple[Front, str]) -> None:
    """A 429 with Retry-After: 1 is waited on and the request sent again, by kubectl and by stackpin; a wait
    longer than --request-timeout has left is one line, not a sleep past it."""
    state, server = front
    config = front_config(kube, tmp_path, server, {"token": kube.env.tokens["admin"]})
    state.busy = 1
    assert probe(kube, config)[0].startswith(REACHED)
    assert state.busy == 0 and len(state.seen) == 2 and state.seen[0][1] == state.seen[1][1]
    state.busy = 1
    assert kubectl_works(kube, config)
    assert state.busy == 0
    state.busy = 1
    cluster = connect(str(config), None, request_timeout_s=0.5)
    from stackpin.deploy.kube import OutOfTime

    with pytest.raises(OutOfTime) as caught:
        cluster.get(CONFIGMAPS, kube.namespace, "nothing-here")
    assert "asked to wait 1s (429 Retry-After)" in str(caught.value)


def test_a_watch_that_gets_410_ends_with_the_error_event(kube: Kube, tmp_path: Path,
                                                          front: tuple[Front, str]) -> None:
    """A watch whose resourceVersion the server no longer has gets one ERROR event (410 Expired): the watch
    gives it as an ("ERROR", Status) pair, for the caller to list again, and ends."""
    state, server = front
    config = front_config(kube, tmp_path, server, {"token": kube.env.tokens["admin"]})
    state.expire_watch = True
    cluster = connect(str(config), None)
    events = list(cluster.watch(CONFIGMAPS, kube.namespace, "any", "1", 5))
    assert [(kind, obj.get("code"), obj.get("reason")) for kind, obj in events] == [("ERROR", 410, "Expired")]


def test_an_oidc_auth_provider_sends_its_id_token_as_kubectl_does(kube: Kube, tmp_path: Path,
                                                                  front: tuple[Front, str]) -> None:
    """auth-provider oidc with an unexpired id-token: both send it as the bearer token (this server has no
    OIDC issuer configured, so both are refused alike)."""
    state, server = front
    token = _jwt({"iss": "https://issuer.invalid", "sub": "ann", "exp": 4102444800})
    provider = {"name": "oidc", "config": {"client-id": "stackpin", "id-token": token,
                                           "idp-issuer-url": "https://issuer.invalid"}}
    config = front_config(kube, tmp_path, server, {"auth-provider": provider})
    assert probe(kube, config) == [f"error: {server}: the credentials of kubeconfig context c were not accepted "
                                   "(401 Unauthorized)"]
    assert not kubectl_works(kube, config)
    assert {auth for _, _, auth in state.seen} == {f"Bearer {token}"}
