"""Pytest fixtures running a real CNCF distribution registry (Debian `docker-registry`) on loopback.

- `registry`: open registry, filesystem storage in a temp dir, deletes enabled.
- `auth_registry`: registry with `auth: token`; a token service in this module (http.server in a
  thread) checks basic credentials and issues RS256 JWTs that the registry verifies against a
  self-signed certificate made with the `openssl` CLI. Anonymous requests get a token with no access,
  as public token services do, so the registry itself answers 401. It also answers the OAuth2
  refresh_token grant (a form POST, distribution's docs/spec/auth/oauth.md) for its `identity_token`,
  unless `oauth` is switched off (then a POST gets 404, as from a token service without OAuth2).
- `basic_registry`: registry with `auth: htpasswd` (HTTP Basic against a bcrypt htpasswd file).

Both are session-scoped. A missing binary FAILS the tests that use them: CI installs it with
scripts/install-test-services.sh.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from devkit.registry import RegistryUnavailable, start_registry

SERVICE = "stackpin-test-registry"
ISSUER = "stackpin-test-token-service"


@dataclass
class RunningRegistry:
    host: str
    url: str
    storage: Path

    def blob_path(self, digest: str) -> Path:
        """Where distribution's filesystem driver keeps a blob's bytes."""
        hex_ = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hex_[:2] / hex_ / "data"


@dataclass
class AuthRegistry(RunningRegistry):
    username: str = "stackpin"
    password: str = "s3cret-pass"
    identity_token: str = "stackpin-refresh-token-1"
    oauth: bool = True
    token_requests: list[str] = field(default_factory=list)
    oauth_requests: list[dict[str, str]] = field(default_factory=list)  # the POSTed forms, in order

    def docker_config(self, directory: Path, *, inline_auth: bool = True) -> Path:
        """A docker config.json holding this registry's credentials; returns its path."""
        if inline_auth:
            entry = {"auth": base64.b64encode(f"{self.username}:{self.password}".encode()).decode()}
        else:
            entry = {"username": self.username, "password": self.password}
        path = directory / "config.json"
        path.write_text(json.dumps({"auths": {self.host: entry}}))
        return path


@contextmanager
def _start(tmp: Path, auth: dict[str, object] | None) -> Iterator[tuple[str, Path]]:
    """devkit's registry; a missing or broken binary FAILS the test (CI installs it)."""
    try:
        with start_registry(tmp, auth) as started:
            yield started
    except RegistryUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRegistry]:
    """An open registry on 127.0.0.1:<free port>."""
    tmp = tmp_path_factory.mktemp("registry")
    with _start(tmp, None) as (host, storage):
        yield RunningRegistry(host=host, url=f"http://{host}", storage=storage)


# --- token service --------------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _Signer:
    """RS256 with a self-signed certificate; the registry trusts the certificate (rootcertbundle)
    and finds the key through the JWT's `x5c` header."""

    def __init__(self, tmp: Path) -> None:
        self.key, self.cert = tmp / "token.key", tmp / "token.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
             "-subj", "/CN=stackpin-test-token", "-keyout", str(self.key), "-out", str(self.cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-outform", "DER"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
        self.x5c = base64.b64encode(der).decode()

    def token(self, access: list[dict[str, object]]) -> str:
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {
            "iss": ISSUER,
            "sub": "stackpin",
            "aud": SERVICE,
            "iat": now - 5,
            "nbf": now - 5,
            "exp": now + 600,
            "jti": f"{now}-{time.monotonic_ns()}",
            "access": access,
        }
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)],
            input=signing_input.encode(), check=True, capture_output=True,
        ).stdout  # fmt: skip
        return f"{signing_input}.{_b64url(signature)}"


def _token_server(signer: _Signer, reg: AuthRegistry) -> ThreadingHTTPServer:
    expected = "Basic " + base64.b64encode(f"{reg.username}:{reg.password}".encode()).decode()

    def grant(scopes: list[str]) -> list[dict[str, object]]:
        access: list[dict[str, object]] = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        return access

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            given = self.headers.get("Authorization")
            reg.token_requests.append(" ".join(query.get("scope", [])))
            if given is not None and given != expected:
                self._answer(401, {"details": "bad credentials"})
                return
            token = signer.token(grant(query.get("scope", [])) if given == expected else [])
            self._answer(200, {"token": token, "access_token": token, "expires_in": 600})

        def do_POST(self) -> None:  # the OAuth2 token endpoint (docs/spec/auth/oauth.md)
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            reg.oauth_requests.append(form)
            if not reg.oauth:
                self._answer(404, {"details": "no OAuth2 here"})
                return
            if self.headers.get("Content-Type") != "application/x-www-form-urlencoded" or not form.get("client_id"):
                self._answer(400, {"error": "invalid_request"})
                return
            if form.get("grant_type") != "refresh_token" or form.get("refresh_token") != reg.identity_token:
                self._answer(400, {"error": "invalid_grant"})
                return
            token = signer.token(grant(form.get("scope", "").split()))
            self._answer(200, {"access_token": token, "scope": form.get("scope", ""), "expires_in": 600})

        def _answer(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthRegistry]:
    """A registry demanding Bearer tokens from a loopback token service (`auth: token`)."""
    tmp = tmp_path_factory.mktemp("auth-registry")
    reg = AuthRegistry(host="", url="", storage=tmp / "storage")
    server = _token_server(_Signer(tmp), reg)
    auth = {
        "token": {
            "realm": f"http://127.0.0.1:{server.server_address[1]}/token",
            "service": SERVICE,
            "issuer": ISSUER,
            "rootcertbundle": str(tmp / "token.pem"),
        }
    }
    try:
        with _start(tmp, auth) as (host, _):
            reg.host, reg.url = host, f"http://{host}"
            yield reg
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class BasicRegistry(RunningRegistry):
    username: str = "basic-user"
    password: str = "basic-pass-1"


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BasicRegistry]:
    """A registry demanding HTTP Basic credentials (`auth: htpasswd`, bcrypt, as distribution requires)."""
    import bcrypt

    tmp = tmp_path_factory.mktemp("basic-registry")
    reg = BasicRegistry(host="", url="", storage=tmp / "storage")
    hashed = bcrypt.hashpw(reg.password.encode(), bcrypt.gensalt(rounds=4)).decode()
    (tmp / "htpasswd").write_text(f"{reg.username}:{hashed}\n")
    with _start(tmp, {"htpasswd": {"realm": "stackpin-basic", "path": str(tmp / "htpasswd")}}) as (host, storage):
        reg.host, reg.url, reg.storage = host, f"http://{host}", storage
        yield reg
