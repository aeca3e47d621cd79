"""A kubeconfig context's cluster and user as what the HTTP exchange needs: a TLS context, the name the
server's certificate is checked against, a proxy, and the Authorization header, read as kubectl (client-go)
reads them.

cluster: certificate-authority (file) or certificate-authority-data (only that CA is trusted; neither: the
system's), insecure-skip-tls-verify (kept off when a CA is given: kubectl refuses such a file, stackpin
verifies), tls-server-name, proxy-url (http:// proxies, through a CONNECT tunnel; without one $HTTPS_PROXY /
$HTTP_PROXY and $NO_PROXY, and never for localhost or a loopback address, as Go's net/http decides).
user, first that applies: tokenFile (read again when the server refuses its token), token, an exec plugin
(client.authentication.k8s.io v1alpha1, v1beta1 or v1; run as kubectl runs it, its token kept until its
expirationTimestamp, run again once when the server refuses it), username and password; and a client
certificate and key (files or data) beside any of them.
Not supported, each one line naming the context: auth-provider (kubectl keeps only oidc; use an exec plugin
such as kubelogin), exec plugins that return a client certificate, provideClusterInfo, proxies that are not
http://.

Every failure is a CredentialError with one line a person can act on, never a credential in it; the
caller (stackpin/deploy/kube.py) names the kubeconfig and context. Files were checked (regular, bounded)
before this module reads them; the tokenFile it reads again is bounded too.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAX_CREDENTIAL_BYTES = 1024 * 1024  # a CA bundle, a certificate, a key or a token file a kubeconfig names
MAX_PLUGIN_OUTPUT_BYTES = 1024 * 1024
EXEC_API_VERSIONS = frozenset(f"client.authentication.k8s.io/{v}" for v in ("v1alpha1", "v1beta1", "v1"))


class CredentialError(Exception):
    """The context's cluster or user cannot be used as written (one line, no credential in it)."""


def _text(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise CredentialError(f"{field} must be a string")
    return value


def _data(body: Mapping[str, Any], field: str) -> bytes | None:
    """A `*-data` field: base64 of PEM text."""
    value = _text(body, field)
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise CredentialError(f"{field} is not base64") from None


def tls_context(cluster: Mapping[str, Any], user: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS settings of an https server: whom to trust, and the client certificate to show."""
    ca_file, ca_data = _text(cluster, "certificate-authority"), _data(cluster, "certificate-authority-data")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise CredentialError("insecure-skip-tls-verify must be true or false")
    try:
        if ca_file or ca_data:  # only this CA: create_default_context then loads no system roots
            context = ssl.create_default_context(cafile=ca_file,
                                                 cadata=ca_data.decode("ascii", "replace") if ca_data else None)
        elif insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context()
        _client_certificate(context, user)
    except ssl.SSLError as exc:
        raise CredentialError(f"TLS: {exc.reason or exc}") from None
    except OSError as exc:
        raise CredentialError(f"TLS: {exc.strerror or exc}") from None
    context.set_alpn_protocols(["http/1.1"])
    return context


def _client_certificate(context: ssl.SSLContext, user: Mapping[str, Any]) -> None:
    cert_file, key_file = _text(user, "client-certificate"), _text(user, "client-key")
    cert_data, key_data = _data(user, "client-certificate-data"), _data(user, "client-key-data")
    cert, key = cert_data or cert_file, key_data or key_file
    if cert is None and key is None:
        return
    if cert is None or key is None:
        raise CredentialError("a client certificate needs both client-certificate and client-key (or their -data)")
    if isinstance(cert, str) and isinstance(key, str):
        context.load_cert_chain(cert, key)
        return
    # ssl reads a certificate and key from files only: data goes through a private directory, removed at once.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="stackpin-tls-") as tmp:
        paths = []
        for name, value in (("cert.pem", cert), ("key.pem", key)):
            if isinstance(value, str):
                paths.append(value)
                continue
            path = os.path.join(tmp, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(value)
            paths.append(path)
        context.load_cert_chain(paths[0], paths[1])


def server_name(cluster: Mapping[str, Any]) -> str | None:
    """tls-server-name: the name sent in SNI and checked in the server's certificate."""
    return _text(cluster, "tls-server-name")


def proxy_for(cluster: Mapping[str, Any], scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """(proxy host, port, CONNECT headers) for the server, or None to connect directly."""
    url, named = _text(cluster, "proxy-url"), "proxy-url"
    if url is None:
        url, named = _environment_proxy(scheme, host), f"${scheme.upper()}_PROXY"
        if url is None:
            return None
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port or 80
    except ValueError:
        raise CredentialError(f"{named} is not a URL") from None
    if parts.scheme != "http" or not parts.hostname:
        what = f"a {parts.scheme}:// proxy" if parts.scheme else "a proxy without a scheme"
        raise CredentialError(f"{named}: {what} is not supported (an http:// proxy is)")
    headers = {}
    if parts.username is not None:
        headers["Proxy-Authorization"] = _basic(unquote(parts.username), unquote(parts.password or ""))
    return parts.hostname, port, headers


def _environment_proxy(scheme: str, host: str) -> str | None:
    """$HTTPS_PROXY / $HTTP_PROXY unless $NO_PROXY names the host; localhost and loopback never go through one."""
    if not any(k.lower().endswith("_proxy") for k in os.environ):
        return None
    import urllib.request

    from stackpin.lock.oci.reference import is_loopback_host

    if is_loopback_host(host):
        return None
    proxy = urllib.request.getproxies_environment().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _bearer(token: str, what: str) -> str:
    """The header of a token; one that could not be sent as a header value (a line break inside, another
    control character) is refused without printing it, where http.client's error would quote it."""
    if not token or any(ord(c) < 0x20 or ord(c) == 0x7F for c in token) or not token.isascii():
        raise CredentialError(f"{what}: the token is empty or holds a character a header cannot carry")
    return "Bearer " + token


class Auth:
    """The Authorization header of each request (a fixed one here, or none), and what to do when the server
    refuses it (401)."""

    def __init__(self, value: str | None = None) -> None:
        self._value = value

    def header(self) -> str | None:
        return self._value

    def refresh(self, refused: str | None) -> bool:
        """After a 401 for the header `refused`: whether a different credential is now at hand (the
        request is then sent once more)."""
        return self._value != refused


class TokenFile(Auth):
    """A token file, read at the first request and again when the server refuses what it held (a
    projected service-account token is rotated in place)."""

    def __init__(self, path: str, fallback: str | None) -> None:
        super().__init__()
        self._path = path
        self._fallback = fallback

    def _read(self) -> str:
        from stackpin.yamlio import read_regular

        try:
            token = read_regular(Path(self._path), MAX_CREDENTIAL_BYTES).decode("utf-8", "replace").strip()
        except OSError as exc:
            if self._fallback:
                return _bearer(self._fallback, "token")
            raise CredentialError(f"tokenFile {self._path}: {exc.strerror or 'cannot be read'}") from None
        return _bearer(token, f"tokenFile {self._path}")

    def header(self) -> str | None:
        if self._value is None:
            self._value = self._read()
        return self._value

    def refresh(self, refused: str | None) -> bool:
        self._value = self._read()
        return self._value != refused


class Plugin(Auth):
    """An exec credential plugin, run as kubectl runs it: the kubeconfig's env after the process's own,
    KUBERNETES_EXEC_INFO (the configured apiVersion, not interactive), no terminal input. Its token is kept
    until its expirationTimestamp; a token the server refuses that an earlier request used makes it run once
    more (one it just gave is not asked for again)."""

    def __init__(self, spec: Mapping[str, Any], timeout_s: float) -> None:
        super().__init__()
        self._timeout_s = max(timeout_s, 1.0)
        command = spec.get("command")
        if not isinstance(command, str) or not command:
            raise CredentialError("exec plugin: command must be a string")
        self.command = command
        self._version = spec.get("apiVersion")
        if self._version not in EXEC_API_VERSIONS:
            raise CredentialError(f"exec plugin {command}: apiVersion {self._version!r} is not one of "
                                  f"{', '.join(sorted(EXEC_API_VERSIONS))}")
        args, env = spec.get("args") or [], spec.get("env") or []
        if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise CredentialError(f"exec plugin {command}: args must be a list of strings")
        if not (isinstance(env, list) and all(isinstance(e, dict) and isinstance(e.get("name"), str) and
                                              isinstance(e.get("value", ""), str) for e in env)):
            raise CredentialError(f"exec plugin {command}: env must be a list of name and value")
        if spec.get("provideClusterInfo"):
            raise CredentialError(f"exec plugin {command}: provideClusterInfo is not supported")
        self._args = [command, *args]
        self._env = {e["name"]: e.get("value", "") for e in env}
        self._expires = float("inf")
        self._fresh = False  # the token was given for the request being sent, not an earlier one
        self._lock = threading.Lock()  # the Lease renewals run beside the command's own requests

    def _run(self) -> None:
        import subprocess

        info = json.dumps({"kind": "ExecCredential", "apiVersion": self._version, "spec": {"interactive": False}})
        env = {**os.environ, **self._env, "KUBERNETES_EXEC_INFO": info}
        where = f"exec plugin {self.command}"
        try:
            done = subprocess.run(self._args, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=self._timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise CredentialError(f"{where}: gave no credential within {self._timeout_s:g}s") from None
        except OSError as exc:
            raise CredentialError(f"{where}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            said = " ".join(done.stderr[-2000:].decode("utf-8", "replace").split())
            raise CredentialError(f"{where}: exited {done.returncode}{': ' + said if said else ''}")
        if len(done.stdout) > MAX_PLUGIN_OUTPUT_BYTES:
            raise CredentialError(f"{where}: printed more than {MAX_PLUGIN_OUTPUT_BYTES} bytes")
        try:
            credential = json.loads(done.stdout)
        except ValueError:
            raise CredentialError(f"{where}: did not print an ExecCredential (not JSON)") from None
        status = credential.get("status") if isinstance(credential, dict) else None
        if not isinstance(status, dict) or credential.get("kind") != "ExecCredential":
            raise CredentialError(f"{where}: did not print an ExecCredential with a status")
        if credential.get("apiVersion") != self._version:
            raise CredentialError(f"{where}: printed apiVersion {credential.get('apiVersion')!r}, configured "
                                  f"{self._version}")
        token = status.get("token")
        if not isinstance(token, str) or not token:
            why = "a client certificate, which is not supported" if status.get("clientCertificateData") else \
                "no token"
            raise CredentialError(f"{where}: gave {why}")
        self._value = _bearer(token, where)
        self._expires = _expiry(status.get("expirationTimestamp"))
        self._fresh = True

    def header(self) -> str | None:
        with self._lock:
            if self._value is None or time.time() >= self._expires:
                self._run()
            else:
                self._fresh = False
            return self._value

    def refresh(self, refused: str | None) -> bool:
        with self._lock:
            if self._value != refused:  # another request already refreshed it
                return True
            if self._fresh:
                return False
            self._run()
            return self._value != refused


def _expiry(stamp: Any) -> float:
    """An RFC 3339 time as epoch seconds; no time (or one that cannot be read): kept for the whole run."""
    if not isinstance(stamp, str):
        return float("inf")
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return float("inf")


def user_auth(user: Mapping[str, Any], timeout_s: float) -> Auth:
    """The user's Authorization, kubectl's order: tokenFile (falling back on token), token, exec, basic.
    `timeout_s` bounds an exec plugin's run."""
    token, token_file = _text(user, "token"), _text(user, "tokenFile")
    if token_file:
        return TokenFile(token_file, token)
    if token:
        return Auth(_bearer(token, "token"))
    spec = user.get("exec")
    if spec is not None:
        if not isinstance(spec, dict):
            raise CredentialError("exec must be a mapping")
        return Plugin(spec, timeout_s)
    username, password = _text(user, "username"), _text(user, "password")
    if username is not None or password is not None:
        return Auth(_basic(username or "", password or ""))
    return Auth()
