"""A kubeconfig context's cluster and user, read by the official `kubernetes` client's loader
(kubernetes.config.kube_config.KubeConfigLoader): the CA, insecure-skip-tls-verify, tls-server-name,
proxy-url (http://, https:// and socks5:// proxies), the client certificate, tokenFile, token, exec plugins
that give a token or a client certificate, the auth-provider (oidc, refreshed with its refresh-token), and
username / password.

Three narrow wraps where the loader does not do what kubectl does, each said where it is:
- an exec plugin's output is read incrementally to MAX_PLUGIN_OUTPUT_BYTES within a deadline
  (`run_plugin`): the client's ExecProvider reads it whole with communicate(), so a plugin that prints
  without end fills memory (6 GB in 4.6 s) before anything is checked; and its loader logs a failed plugin
  and goes on with no credential, where kubectl stops with the plugin's error;
- a token from a tokenFile or an exec plugin that the server refuses (401) is read or asked for again, once
  (`Credentials.refresh`): kubectl re-reads a rotated tokenFile and re-runs a plugin after a 401; the client
  only runs a plugin again when its expirationTimestamp has passed;
- $HTTPS_PROXY / $NO_PROXY are honoured as Go's net/http honours them: the client reads them too, but
  would send a loopback server's requests through the proxy.

Every failure is a CredentialError with one line a person can act on, never a credential in it; the
caller (stackpin/deploy/kube.py) names the kubeconfig and context. Files were checked (regular, bounded)
before this module lets the loader read them. Imported only by cluster commands (kube.connect).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from kubernetes.client import Configuration
from kubernetes.config import kube_config
from kubernetes.config.config_exception import ConfigException

_kube_config: Any = kube_config  # the loader's module has no type hints

MAX_CREDENTIAL_BYTES = 1024 * 1024  # a CA bundle, a certificate, a key or a token file a kubeconfig names
MAX_PLUGIN_OUTPUT_BYTES = 1024 * 1024
EXEC_API_VERSIONS = frozenset(f"client.authentication.k8s.io/{v}" for v in ("v1alpha1", "v1beta1", "v1"))


class CredentialError(Exception):
    """The context's cluster or user cannot be used as written (one line, no credential in it)."""


def _read_bounded(process: Any, deadline: float, where: str) -> tuple[bytes, bytes]:
    """stdout (at most MAX_PLUGIN_OUTPUT_BYTES, else refused as soon as it passes it) and the tail of stderr,
    read as they come until both close; the process killed past `deadline` or the bound."""
    import selectors

    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ, out)
        sel.register(process.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise CredentialError(f"{where}: gave no credential in time")
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is out and len(out) > MAX_PLUGIN_OUTPUT_BYTES:
                    raise CredentialError(f"{where}: printed more than {MAX_PLUGIN_OUTPUT_BYTES} bytes")
                if key.data is err and len(err) > 4096:
                    del err[:-2048]
    return bytes(out), bytes(err)


def run_plugin(spec: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """An exec plugin's ExecCredential status, run as kubectl runs it: the kubeconfig's env after the
    process's own, KUBERNETES_EXEC_INFO (the configured apiVersion, not interactive), no terminal input."""
    import subprocess

    command, version = spec.get("command"), spec.get("apiVersion")
    if not isinstance(command, str) or not command:
        raise CredentialError("exec plugin: command must be a string")
    where = f"exec plugin {command}"
    if version not in EXEC_API_VERSIONS:
        raise CredentialError(f"{where}: apiVersion {version!r} is not one of {', '.join(sorted(EXEC_API_VERSIONS))}")
    args, env = spec.get("args") or [], spec.get("env") or []
    if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        raise CredentialError(f"{where}: args must be a list of strings")
    if not (isinstance(env, list) and all(isinstance(e, dict) and isinstance(e.get("name"), str) and
                                          isinstance(e.get("value", ""), str) for e in env)):
        raise CredentialError(f"{where}: env must be a list of name and value")
    info = json.dumps({"kind": "ExecCredential", "apiVersion": version, "spec": {"interactive": False}})
    environ = {**os.environ, **{e["name"]: e.get("value", "") for e in env}, "KUBERNETES_EXEC_INFO": info}
    try:
        process = subprocess.Popen([command, *args], env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
    except OSError as exc:
        raise CredentialError(f"{where}: {exc.strerror or exc}") from None
    try:
        out, err = _read_bounded(process, time.monotonic() + max(timeout_s, 1.0), where)
        code = process.wait(timeout=max(timeout_s, 1.0))
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    if code != 0:
        said = " ".join(err[-2000:].decode("utf-8", "replace").split())
        raise CredentialError(f"{where}: exited {code}{': ' + said if said else ''}")
    from stackpin.jsonio import NestingError, loads

    try:
        credential = loads(out)
    except NestingError as exc:
        raise CredentialError(f"{where}: did not print an ExecCredential ({exc})") from None
    except ValueError:
        raise CredentialError(f"{where}: did not print an ExecCredential (not JSON)") from None
    status = credential.get("status") if isinstance(credential, dict) else None
    if not isinstance(status, dict) or credential.get("kind") != "ExecCredential":
        raise CredentialError(f"{where}: did not print an ExecCredential with a status")
    if credential.get("apiVersion") != version:
        raise CredentialError(f"{where}: printed apiVersion {credential.get('apiVersion')!r}, configured {version}")
    token = status.get("token")
    if isinstance(token, str) and token:
        _check_token(token, where)
    elif not (isinstance(status.get("clientCertificateData"), str) and isinstance(status.get("clientKeyData"), str)):
        raise CredentialError(f"{where}: gave neither a token nor a client certificate and key")
    return status


def _check_token(token: str, what: str) -> None:
    """A token that could not be sent as a header value (a line break inside, another control character) is
    refused without printing it, where the HTTP library's error would quote it."""
    if not token or any(ord(c) < 0x20 or ord(c) == 0x7F for c in token) or not token.isascii():
        raise CredentialError(f"{what}: the token is empty or holds a character a header cannot carry")


class _Loader(_kube_config.KubeConfigLoader):  # type: ignore[misc]
    """The client's loader with its exec plugin run by `run_plugin` (see the module docstring)."""

    def __init__(self, config: dict[str, Any], context: str, plugin_timeout_s: float) -> None:
        super().__init__(config, active_context=context, config_base_path="")  # paths are absolute already
        self.plugin_timeout_s = plugin_timeout_s
        self.plugin_runs = 0

    def _load_user_token(self) -> bool | None:
        # client-go reads a tokenFile in preference to token (token is its fallback) and reads it again when
        # the server refuses it (a projected token rotated in place); the client's loader takes token first.
        path = self._user.safe_get("tokenFile")
        if not path:
            return super()._load_user_token()  # type: ignore[no-any-return]
        from pathlib import Path

        from stackpin.yamlio import read_regular

        try:
            token = read_regular(Path(path), MAX_CREDENTIAL_BYTES).decode("utf-8", "replace").strip()
        except OSError as exc:
            token = self._user.safe_get("token")
            if not token:
                raise CredentialError(f"tokenFile {path}: {exc.strerror or 'cannot be read'}") from None
        _check_token(token, f"tokenFile {path}")
        self.token = f"Bearer {token}"
        return True

    def _load_from_exec_plugin(self) -> bool | None:
        if "exec" not in self._user:
            return None
        status = run_plugin(self._user["exec"].value, self.plugin_timeout_s)
        self.plugin_runs += 1
        if status.get("token"):
            self.token = f"Bearer {status['token']}"
        else:  # the loader's own handling of a certificate a plugin gives: files it removes at exit
            for attr, field in (("cert_file", "clientCertificateData"), ("key_file", "clientKeyData")):
                setattr(self, attr, _kube_config.FileOrData(status, None, data_key_name=field, file_base_path="",
                                               base64_file_content=False).as_file())
        if status.get("expirationTimestamp"):
            self.expiry = _kube_config.parse_rfc3339(status["expirationTimestamp"])
        return True


class Credentials:
    """The Authorization header of each request, and what to do when the server refuses it (401)."""

    def __init__(self, loader: Any, configuration: Configuration, user: Mapping[str, Any]) -> None:
        self._loader, self._configuration = loader, configuration
        # What kubectl reads again after a 401: a tokenFile (rotated in place), an exec plugin's token.
        self._renewable = bool(user.get("tokenFile") or (user.get("exec") and not user.get("token")))
        self._fresh = False  # the plugin ran for the request being sent: its token is not asked for again
        self._runs_seen = 0  # plugin runs before the last header (the one at load counts for the first request)
        self._lock = threading.Lock()  # the Lease renewals run beside the command's own requests

    def header(self) -> str | None:
        with self._lock:
            try:
                value = self._configuration.get_api_key_with_prefix("BearerToken")  # runs the loader's refresh hook
            except ConfigException as exc:
                raise CredentialError(str(exc)) from None
            self._fresh = self._loader.plugin_runs != self._runs_seen
            self._runs_seen = self._loader.plugin_runs
            return str(value) if value else None

    def refresh(self, refused: str | None) -> bool:
        """After a 401 for the header `refused`: whether a different credential is now at hand (the request
        is then sent once more)."""
        with self._lock:
            current = self._configuration.api_key.get("BearerToken")
            if current != refused:  # another request already renewed it
                return True
            if not self._renewable or self._fresh:
                return False
            try:
                self._loader._load_authentication()
            except (ConfigException, OSError) as exc:
                raise CredentialError(str(getattr(exc, "strerror", None) or exc)) from None
            self._loader._set_config(self._configuration)
            self._fresh = True
            self._runs_seen = self._loader.plugin_runs
            return self._configuration.api_key.get("BearerToken") != refused


def environment_proxy(scheme: str, host: str) -> str | None:
    """$HTTPS_PROXY / $HTTP_PROXY unless $NO_PROXY names the host; localhost and loopback never go through one
    (Go's net/http)."""
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


def load(config: dict[str, Any], context: str, user: Mapping[str, Any], plugin_timeout_s: float) \
        -> tuple[Configuration, Credentials]:
    """The client's Configuration for `context` of the merged kubeconfig `config` (every path in it absolute),
    and the credentials each request sends."""
    from urllib.parse import urlsplit

    try:
        loader = _Loader(config, context, plugin_timeout_s)
        configuration = Configuration()
        loader.load_and_set(configuration)
    except ConfigException as exc:
        raise CredentialError(" ".join(str(exc).split())) from None
    except OSError as exc:
        raise CredentialError(exc.strerror or str(exc)) from None
    token = configuration.api_key.get("BearerToken")
    if token:
        _check_token(token.partition(" ")[2], "token")
    parts = urlsplit(configuration.host)
    if getattr(configuration, "_proxy_from_env", True):  # no proxy-url: the client took $*_PROXY, but not Go's rule
        configuration.proxy = environment_proxy(parts.scheme, parts.hostname or "")
    if configuration.proxy:
        scheme = urlsplit(configuration.proxy).scheme
        if scheme not in ("http", "https", "socks5", "socks5h"):
            raise CredentialError(f"proxy-url: a {scheme or 'scheme-less'} proxy is not supported (http://, "
                                  "https:// and socks5:// are, as kubectl's)")
    return configuration, Credentials(loader, configuration, user)
