"""Registry credentials, found where docker, crane and skopeo find them.

Which files, in order (the first that has an answer for a registry wins):

- an explicit file (`--docker-config FILE`), alone;
- else `$REGISTRY_AUTH_FILE`, alone (skopeo and podman take it as the default of `--authfile`, and read
  no other file when one is given: containers/common `GetDefaultAuthFile`, containers/image
  `getAuthFilePaths`);
- else, as containers/image `getAuthFilePaths` lists them: `${XDG_RUNTIME_DIR}/containers/auth.json`
  (`/run/containers/$UID/auth.json` without `XDG_RUNTIME_DIR`), `${XDG_CONFIG_HOME:-~/.config}/containers/auth.json`,
  then docker's `$DOCKER_CONFIG/config.json` (`~/.docker/config.json` without `DOCKER_CONFIG`).

Within one file, as docker's `configfile.GetAuthConfig` reads it: the registry's `credHelpers` entry, else
`credsStore`, names a helper `docker-credential-NAME` that answers alone for that file; without one, the
`auths` entry (`auth` = base64 "user:password", or `username`/`password`, and `identitytoken`). A helper
that has nothing for the registry passes on to the next file (containers/image does the same).
`auths` keys may be a registry (`nvcr.io`), a URL (`https://index.docker.io/v1/`) or, as in auth.json, a
namespace in a registry (`quay.io/org`, matched longest first).

Helpers speak docker's credential-helper protocol (docker-credential-helpers `client.Get`): `NAME get`, the
server URL on stdin, `{"ServerURL", "Username", "Secret"}` on stdout; Username `<token>` makes Secret an
identity token (an OAuth2 refresh token for the registry's token service). A helper runs only when a
registry asks for credentials (a 401), at most once per registry, with a deadline and an output bound, in
a process group of its own that is killed when it overruns; its output is never shown (it may hold secrets).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stackpin.jsonio as jsonio
from stackpin.children import die_with_parent
from stackpin.errors import ResolveError, clip
from stackpin.lock.oci.reference import DOCKER_HUB, normalize_registry
from stackpin.yamlio import read_regular

MAX_FILE_BYTES = 1 << 20  # a config.json of credentials is a few KiB
HELPER_TIMEOUT = 30.0  # seconds; cloud helpers (ecr-login, gcloud) make a network call of their own
HELPER_MAX_OUTPUT = 64 << 10  # an answer holds a username and a token: a few KiB
TOKEN_USERNAME = "<token>"  # docker's marker: the Secret is an identity token
NOT_FOUND = "credentials not found in native keychain"  # docker-credential-helpers' standard answer
DOCKER_HUB_KEY = "https://index.docker.io/v1/"  # what docker stores and asks helpers for Docker Hub under
_HELPER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Credential:
    """What a registry gets: a user and password (Basic, or the token service's GET), or an identity
    token (the token service's OAuth2 refresh_token grant). `source` says where it came from."""

    source: str
    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)

    @property
    def basic(self) -> tuple[str, str] | None:
        return (self.username, self.password) if self.username and self.username != TOKEN_USERNAME else None


def default_docker_config() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def auth_files(explicit: str | os.PathLike[str] | None = None,
               env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The files searched for credentials, in order (the module docstring says whose order)."""
    env = os.environ if env is None else env
    if explicit:
        return (Path(explicit),)
    if env.get("REGISTRY_AUTH_FILE"):
        return (Path(env["REGISTRY_AUTH_FILE"]),)
    runtime = env.get("XDG_RUNTIME_DIR")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    config_home = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    docker = Path(env["DOCKER_CONFIG"]) / "config.json" if env.get("DOCKER_CONFIG") else home / ".docker/config.json"
    return (
        Path(runtime) / "containers/auth.json" if runtime else Path(f"/run/containers/{os.getuid()}/auth.json"),
        config_home / "containers/auth.json",
        docker,
    )


def _auth_key(key: str) -> str:
    """`https://index.docker.io/v1/` and `docker.io` name the same registry in config.json."""
    host = key.split("://", 1)[-1].split("/", 1)[0]
    return normalize_registry(host)


def server_url(registry: str) -> str:
    """What docker asks a helper for: Docker Hub under its historical key, any other registry by host."""
    return DOCKER_HUB_KEY if registry == DOCKER_HUB else registry


@dataclass(frozen=True)
class _Entry:
    username: str
    password: str
    identity_token: str


@dataclass(frozen=True)
class AuthFile:
    """One parsed config.json / auth.json: what it says, not yet asked of any helper."""

    path: Path
    auths: Mapping[str, _Entry]  # key as written -> inline credentials
    cred_helpers: Mapping[str, str]  # registry (normalised) -> helper name
    creds_store: str

    def helper_for(self, registry: str) -> tuple[str, str] | None:
        """(helper name, which setting named it) for `registry`, as docker picks: credHelpers, then credsStore."""
        for key, name in self.cred_helpers.items():
            if _auth_key(key) == registry:
                return name, "credHelpers"
        return (self.creds_store, "credsStore") if self.creds_store else None

    def inline(self, registry: str, repository: str) -> _Entry | None:
        """The `auths` entry for `registry/repository`: namespaces longest first, then the registry by any
        spelling (`https://nvcr.io/v2/`, `docker.io` for Docker Hub)."""
        parts = repository.split("/") if repository else []
        for n in range(len(parts), -1, -1):
            key = "/".join([registry, *parts[:n]])
            if key in self.auths:
                return self.auths[key]
        for key in sorted(self.auths):  # sorted: which of two spellings wins does not depend on file order
            if ("://" in key or "/" not in key) and _auth_key(key) == registry:
                return self.auths[key]
        return None


def read_auth_file(path: Path) -> AuthFile | None:
    """The parsed file, None if it does not exist. Every entry is checked, so a broken one is reported
    whichever registry is asked about, naming the file and the field."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES)  # a FIFO or device is refused, never opened for a blocking read
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ResolveError(f"cannot read registry credentials {path}: {exc.strerror}") from None
    try:
        doc: Any = jsonio.loads(raw)
    except ValueError as exc:
        raise ResolveError(f"registry credentials {path} are not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ResolveError(f"registry credentials {path}: not a JSON object")
    auths = doc.get("auths") or {}
    helpers = doc.get("credHelpers") or {}
    store = doc.get("credsStore") or ""
    if not isinstance(auths, dict) or not isinstance(helpers, dict) or not isinstance(store, str):
        raise ResolveError(f"registry credentials {path}: auths and credHelpers must be objects, credsStore a string")
    for key, name in [*helpers.items(), ("credsStore", store)]:
        if name and (not isinstance(name, str) or not _HELPER_NAME.match(name)):
            where = "credsStore" if key == "credsStore" else f"credHelpers.{key}"
            raise ResolveError(f"registry credentials {path}: {where}: {clip(name)!r} is not a helper name "
                               "(docker-credential-NAME)")
    entries = {key: entry for key, value in auths.items() if (entry := _entry(path, key, value))}
    return AuthFile(path, entries, dict(helpers), store)


def _entry(path: Path, key: str, value: Any) -> _Entry | None:
    if not isinstance(value, dict):
        raise ResolveError(f"registry credentials {path}: auths.{key} is not an object")
    user, password = value.get("username") or "", value.get("password") or ""
    token = value.get("identitytoken") or ""
    if not all(isinstance(v, str) for v in (user, password, token, value.get("auth") or "")):
        raise ResolveError(f"registry credentials {path}: auths.{key}: auth, username, password and "
                           "identitytoken must be strings")
    if value.get("auth"):
        try:
            user, sep, password = base64.b64decode(value["auth"], validate=True).decode().partition(":")
        except (ValueError, binascii.Error):
            sep = ""
        if not sep:
            raise ResolveError(f"registry credentials {path}: auths.{key}.auth is not base64 of 'user:password'")
        password = password.strip("\x00")  # as containers/image reads it
    # `{}` entries are docker's marks of a login kept by a helper: nothing to use here.
    return _Entry(user, password, token) if (user and password) or token else None


class RegistryCredentials:
    """Credentials per registry, looked up when a registry first asks (never up front), each helper run
    at most once per registry; thread-safe. `deadline_at` (a time.monotonic() instant) cuts a helper's
    deadline short when the whole run has less time left."""

    def __init__(self, files: Sequence[Path], *, helper_timeout: float = HELPER_TIMEOUT,
                 helper_max_output: int = HELPER_MAX_OUTPUT, deadline_at: float | None = None) -> None:
        self.files = tuple(files)
        self.helper_timeout = helper_timeout
        self.helper_max_output = helper_max_output
        self.deadline_at = deadline_at
        self._lock = threading.Lock()
        self._parsed: list[AuthFile] | None = None
        self._helpers: dict[tuple[str, str], threading.Lock] = {}
        self._answers: dict[tuple[str, str], Credential | ResolveError | None] = {}

    def describe(self) -> str:
        """Where credentials were looked for, for an error line."""
        return ", ".join(str(p) for p in self.files)

    def lookup(self, registry: str, repository: str = "") -> Credential | None:
        """The credential for `registry` (and `repository`, for namespaced auth.json keys), or None."""
        for parsed in self._read():
            helper = parsed.helper_for(registry)
            if helper is not None:
                found = self._ask(helper[0], registry, helper[1], parsed.path)
                if found is not None:
                    return found
                continue
            entry = parsed.inline(registry, repository)
            if entry is not None:
                return Credential(str(parsed.path), entry.username, entry.password, entry.identity_token)
        return None

    def _read(self) -> list[AuthFile]:
        with self._lock:
            if self._parsed is None:
                self._parsed = [f for f in map(read_auth_file, self.files) if f is not None]
            return self._parsed

    def _ask(self, name: str, registry: str, setting: str, path: Path) -> Credential | None:
        key = (name, registry)
        with self._lock:
            gate = self._helpers.setdefault(key, threading.Lock())
        with gate:  # concurrent resolves of one registry wait for one run of its helper
            if key not in self._answers:
                try:
                    self._answers[key] = run_helper(name, registry, f"{setting} in {path}", self._timeout(),
                                                     self.helper_max_output)
                except ResolveError as exc:
                    self._answers[key] = exc
            answer = self._answers[key]
        if isinstance(answer, ResolveError):
            raise answer
        return answer

    def _timeout(self) -> float:
        if self.deadline_at is None:
            return self.helper_timeout
        return max(0.0, min(self.helper_timeout, self.deadline_at - time.monotonic()))


def run_helper(name: str, registry: str, why: str, timeout: float = HELPER_TIMEOUT,
               max_output: int = HELPER_MAX_OUTPUT) -> Credential | None:
    """`docker-credential-NAME get` for `registry`; None when the helper has nothing for it."""
    program = f"docker-credential-{name}"
    url = server_url(registry)
    rerun = f"run `echo {url} | {program} get` to see what it says"

    def fail(what: str, hint: str) -> ResolveError:
        return ResolveError(f"credential helper {program} ({why}) {what} for registry {registry}", hint)

    found = shutil.which(program)
    if found is None:
        raise fail("is not on PATH", f"install {program}, or remove its {why}")
    try:
        code, out, overran = _run_bounded([found, "get"], url.encode(), timeout, max_output)
    except OSError as exc:  # not a program this system can run (no #! line, wrong architecture)
        raise fail(f"could not be started ({exc.strerror})", f"reinstall {program}") from None
    if overran == "time":
        raise fail(f"did not answer within {timeout:g}s", f"it may be waiting for a login or a prompt; {rerun}")
    if overran == "size":
        raise fail(f"answered more than {max_output} bytes", rerun)
    text = out.decode("utf-8", "replace").strip()
    if code != 0:
        if text == NOT_FOUND:
            return None
        # Its output is not shown: a broken helper may print a secret.
        raise fail(f"failed (exit status {code})", f"log in again, or {rerun}")
    try:
        answer = jsonio.loads(text)
        username, secret = answer.get("Username") or "", answer.get("Secret") or ""
        if not isinstance(username, str) or not isinstance(secret, str):
            raise ValueError
    except (ValueError, AttributeError):
        raise fail('answered something that is not {"ServerURL", "Username", "Secret"} JSON', rerun) from None
    source = f"{program} ({why})"
    if not secret:
        return None
    if username == TOKEN_USERNAME:
        return Credential(source, username=username, identity_token=secret)
    return Credential(source, username=username, password=secret)


def _run_bounded(argv: list[str], stdin: bytes, timeout: float, limit: int) -> tuple[int, bytes, str]:
    """(exit status, stdout, "" | "time" | "size"): the program in a process group of its own, its stdout
    read up to `limit` bytes and its stderr drained unread. Once it exits, overruns its deadline or its
    output bound, the whole group is killed: nothing it started outlives this call."""
    # Its own session, so that the group can be killed; die_with_parent, so that a killed stackpin takes it along.
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=die_with_parent())  # noqa: PLW1509
    out = bytearray()
    over = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        while chunk := os.read(proc.stdout.fileno(), 65536):
            out.extend(chunk)
            if len(out) > limit:
                over.set()
                _kill_group(proc)
                return

    def drain_stderr() -> None:  # read and dropped: a full pipe must not stall the helper
        assert proc.stderr is not None
        while os.read(proc.stderr.fileno(), 65536):
            pass

    readers = [threading.Thread(target=fn, daemon=True) for fn in (read_stdout, drain_stderr)]
    for reader in readers:
        reader.start()
    code, late = -1, False
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:  # it did not read its stdin: its answer still counts
            pass
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        late = True
    finally:
        _kill_group(proc)
        proc.wait()
        for reader in readers:  # every writer is dead: the pipes end at once
            reader.join(1.0)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None and not any(r.is_alive() for r in readers):
                pipe.close()
    return code, bytes(out[:limit]), "time" if late else "size" if over.is_set() else ""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
