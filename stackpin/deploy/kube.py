"""The cluster edge: the one module that talks to a Kubernetes API server.

A kubeconfig is read as kubectl reads it: the files of $KUBECONFIG (or --kubeconfig, or ~/.kube/config)
merged by kubectl's rules (the first file to name a cluster, user or context wins, and the first
current-context), relative paths taken from the file that holds them, then the context's cluster
(server, CA file or data, insecure-skip-tls-verify, tls-server-name, proxy-url), user (tokenFile, token,
exec plugin, username/password, client certificate and key as files or data) and namespace
(stackpin/deploy/credentials.py hands the merged file to the official `kubernetes` client's loader). The
REST API is spoken with plain JSON over the client's connection pool (stackpin/deploy/transport.py), so one
code path serves core kinds, custom resources and discovery.

Every failure becomes one typed error with one line a person can act on: never a traceback, never a
credential (server messages name the user, not the token; request headers are never printed). Every
file a kubeconfig names is read only if it is a regular file of bounded size: a kubeconfig may be hostile.

One budget bounds a command's API traffic (`--request-timeout`): every request's timeout is what is
left of it, and the time each one takes is taken off. Each request is sent once, so a dead server costs
the budget once, not once per retry per request. Two exceptions: a 429 (or 5xx) with Retry-After is waited
on and sent again as kubectl does, while the wait fits in the budget (stackpin/deploy/transport.py); and when
the server refuses (401) a token read from a tokenFile, or one an exec plugin gave an earlier request, the
file is read or the plugin run again and that request sent once more (kubectl refreshes the token for the next
request instead); a refused token costs two round trips, not a retry loop. Watches are outside the
budget (`--timeout` bounds them), as are the Lease renewals, which run beside the command with timeouts
of their own.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

import msgspec

from stackpin.errors import StackpinError

if TYPE_CHECKING:
    from stackpin.deploy.transport import Answer, Transport

FIELD_MANAGER = "stackpin"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0  # the default budget of one command's requests, all together (--request-timeout)
_CONFLICT_MANAGER = re.compile(r'conflict with "([^"]*)"')


class ClusterError(StackpinError):
    """The cluster could not be reached, refused us, or is not set up for the stack (exit 2)."""


class Unreachable(ClusterError):
    """No answer from the API server (refused, reset, timed out, TLS failed)."""


class OutOfTime(Unreachable):
    """The command's request budget (--request-timeout) ran out before the server answered."""


class Forbidden(ClusterError):
    """RBAC said no (403), or the credentials were not accepted (401)."""


class Rejected(StackpinError):
    """The server checked an object and refused it (invalid, unknown field, immutable): exit 1."""

    exit_code = 1


class FieldConflict(msgspec.Struct, frozen=True):
    manager: str
    field: str  # the server's path, e.g. .spec.components[name="worker"].replicas


class Conflicts(StackpinError):
    """Server-side apply found fields another manager owns (exit 1; --force-conflicts takes them).
    One line per object: the managers and their fields."""

    exit_code = 1

    def __init__(self, subject: str, conflicts: Sequence[FieldConflict],
                 more: Sequence[tuple[str, tuple[FieldConflict, ...]]] = ()) -> None:
        self.objects = ((subject, tuple(conflicts)), *more)
        lines = []
        for name, found in self.objects:
            by_manager: dict[str, list[str]] = {}
            for c in found:
                by_manager.setdefault(c.manager, []).append(c.field)
            lines.append(f"{name}: conflict: " + "; ".join(
                f"{len(fields)} field(s) managed by {manager!r}: {', '.join(fields)}"
                for manager, fields in sorted(by_manager.items())))
        super().__init__("\n".join(lines), "take them with --force-conflicts, or change them back")

    @property
    def conflicts(self) -> tuple[FieldConflict, ...]:
        return tuple(c for _, found in self.objects for c in found)

    @classmethod
    def merge(cls, errors: Sequence[Conflicts]) -> Conflicts:
        pairs = [pair for e in errors for pair in e.objects]
        return cls(pairs[0][0], pairs[0][1], pairs[1:])


def group_kind(kind: str, group: str) -> str:
    """`Kind.group` (`Kind` for the core group): how ApplySets and kubectl name a kind."""
    return f"{kind}.{group}" if group else kind


class ApiResource(msgspec.Struct, frozen=True, eq=False):
    """A kind as discovery serves it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    # Discovery's storageVersionHash: which version the server stores the kind as (see stored_as).
    # Not part of equality or the hash (below: a Struct has no per-field compare=False).
    storage_hash: str | None = None

    def _identity(self) -> tuple[str, str, str, str, bool]:
        return self.group, self.version, self.kind, self.plural, self.namespaced

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, ApiResource)
        return self._identity() == other._identity()

    def __ne__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, ApiResource)
        return self._identity() != other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> str:
        return group_kind(self.kind, self.group)

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        return base + (f"/{quote(name, safe='')}" if name else "")

    def subject(self, name: str) -> str:
        """kubectl's spelling: `dynamographdeployment.nvidia.com/dsv41-flash`."""
        return f"{self.kind.lower()}{'.' + self.group if self.group else ''}/{name}"

    def stored_as(self, version: str) -> bool | None:
        """Whether the server stores this kind as `version`; None when discovery did not say. The API
        server's storageVersionHash is the first 8 bytes of sha256(`group/version/Kind`) of the storage
        version, base64 (k8s.io/apiserver/pkg/endpoints/discovery: StorageVersionHash)."""
        if not self.storage_hash:
            return None
        import base64
        import hashlib

        digest = hashlib.sha256(f"{self.group}/{version}/{self.kind}".encode()).digest()[:8]
        return base64.b64encode(digest).decode() == self.storage_hash


CONFIGMAPS = ApiResource("", "v1", "ConfigMap", "configmaps", True)
NAMESPACES = ApiResource("", "v1", "Namespace", "namespaces", False)
CRDS = ApiResource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)


class Cluster:
    """One API server, as a kubeconfig context names it. Methods map HTTP statuses to typed errors;
    404 is an ordinary answer (None / False) where "not there" is expected."""

    def __init__(self, transport: Transport, server: str, context: str, namespace: str | None,
                 request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._transport = transport
        self.server = server
        self.context = context
        self.context_namespace = namespace
        self.request_timeout_s = request_timeout_s
        self._budget_left = request_timeout_s
        self._budget_lock = threading.Lock()
        self._answered = False  # any HTTP answer yet: a failure after one is a lost server, not an unreached one
        # Namespaces this run has seen exist (a namespaced object read, created or updated in one):
        # preflight need not read them again.
        self.namespaces_seen: set[str] = set()
        # Called before every write that is not a dry run (the deployment's Lease: LeaseLost stops the
        # run before a write it no longer has the right to make).
        self.before_write: Callable[[], None] | None = None

    def _guard(self, dry_run: bool) -> None:
        if not dry_run and self.before_write is not None:
            self.before_write()

    # --- the one request function -------------------------------------------------------------------

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), body: Any = None,
                content_type: str = "application/json", what: str = "",
                timeout: tuple[float, float] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON body). Raises Unreachable when no HTTP answer came back. Without an
        explicit `timeout` the request runs on the command's budget (see the module docstring)."""
        budgeted = timeout is None
        started = time.monotonic()
        try:
            deadline = None
            if timeout is None:
                timeout = self._budget_timeout(method, what or path)
                deadline = started + timeout[1]  # what is left of the budget (or READ_TIMEOUT_S)
            resp = self._send(method, path, query, body, content_type, what, timeout, deadline=deadline)
            data = resp.content  # read whole by _send: a connection lost mid-body is Unreachable there
        except Unreachable as exc:
            if budgeted and self._spend(started) <= 0.05 and not isinstance(exc, OutOfTime):
                raise self._out_of_time(method, what or path) from None  # it timed out on what was left
            raise
        if budgeted:
            self._spend(started)
        self._answered = True
        try:
            parsed = msgspec.json.decode(data) if data else None  # a list of members: twice json's speed
        except msgspec.DecodeError:
            parsed = data.decode("utf-8", errors="replace")
        return resp.status_code, parsed

    def _spend(self, started: float) -> float:
        """Take the time since `started` off the budget; what is left."""
        with self._budget_lock:
            self._budget_left -= time.monotonic() - started
            return self._budget_left

    def _budget_timeout(self, method: str, what: str) -> tuple[float, float]:
        with self._budget_lock:
            left = self._budget_left
        if left <= 0:
            raise self._out_of_time(method, what)
        return min(CONNECT_TIMEOUT_S, left), min(READ_TIMEOUT_S, left)

    def _out_of_time(self, method: str, what: str) -> Unreachable:
        # A write is named once the server has answered something: before that (apply's first request
        # creates its Lease) the server is simply not answering.
        verb = "" if method == "GET" or not self._answered else f" during {method} of {what}"
        return OutOfTime(f"the API server {self.server} did not answer within --request-timeout "
                         f"{self.request_timeout_s:g}s (all requests together){verb}",
                         "is the server healthy (its etcd up)? raise --request-timeout if it is only slow")

    def _send(self, method: str, path: str, query: Sequence[tuple[str, str]], body: Any, content_type: str,
              what: str, timeout: tuple[float, float], stream: bool = False, deadline: float | None = None) -> Answer:
        """One HTTP exchange, sent once; the body read whole unless `stream`. Failures without an
        answer are Unreachable; a credential's (an exec plugin, a tokenFile) a ClusterError naming the context.
        `deadline` (monotonic): no Retry-After wait past it; by default the request's own timeout."""
        if deadline is None:
            deadline = time.monotonic() + timeout[0] + timeout[1]
        from stackpin.deploy.credentials import CredentialError
        from stackpin.deploy.transport import Busy, TooLarge

        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = json.dumps(body).encode()  # JSON is YAML too: apply-patch+yaml takes it as it is
        try:
            return self._transport.send(method, path, query, headers, content, timeout, stream,
                                        float("inf") if stream else deadline)
        except StackpinError:
            raise
        except CredentialError as exc:
            raise ClusterError(f"kubeconfig context {self.context}: {exc}") from None
        except Busy as exc:
            raise OutOfTime(f"the API server {self.server} is busy: it asked to wait {exc} (429 Retry-After) during "
                            f"{method} of {what or path}, more than is left of --request-timeout "
                            f"{self.request_timeout_s:g}s", "try again later, or raise --request-timeout") from None
        except TooLarge as exc:
            raise ClusterError(f"{self.server}: {method} {what or path}: {exc}; not read") from None
        except Exception as exc:  # noqa: BLE001 - http.client, ssl and socket errors, all one line
            raise self._unreachable(exc, method, what or path) from None

    def _unreachable(self, exc: Exception, method: str, what: str) -> ClusterError:
        reason = _reason(exc)
        if not self._answered:
            return Unreachable(f"could not reach the API server {self.server}: {reason} (it never answered; "
                               "nothing was read or written)")
        verb = "" if method == "GET" else f" during {method} of {what}"
        return Unreachable(f"lost the API server {self.server}{verb}: {reason}")

    def _raise(self, status: int, data: Any, method: str, subject: str) -> NoReturn:
        message = data.get("message") if isinstance(data, dict) else None
        message = _one_line(str(message or data or f"HTTP {status}"))
        if status in (401, 403):
            raise Forbidden(f"{subject}: {message}" if status == 403 else
                            f"{self.server}: the credentials of kubeconfig context {self.context} were not accepted "
                            f"(401 {message})")
        if status == 409 and isinstance(data, dict):
            causes = (data.get("details") or {}).get("causes") or []
            conflicts = [FieldConflict(_manager(c.get("message", "")), c.get("field", ""))
                         for c in causes if c.get("reason") == "FieldManagerConflict"]
            if conflicts:
                raise Conflicts(subject, conflicts)
        if status in (400, 422):
            raise Rejected(f"{subject}: the server refused it: {message}")
        raise ClusterError(f"{subject}: {method} failed ({status}): {message}")

    # --- operations ---------------------------------------------------------------------------------

    def get(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        status, data = self.request("GET", res.path(namespace, name))
        if status == 404:
            return None
        if status >= 300:
            self._raise(status, data, "GET", res.subject(name))
        self._seen(res, {"metadata": {"namespace": namespace}})
        return dict(data)

    def list(self, res: ApiResource, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        status, data = self.request("GET", res.path(namespace), query=[("labelSelector", label_selector)])
        if status == 404:
            return []
        if status >= 300:
            self._raise(status, data, "GET", f"{res.plural}.{res.group}" if res.group else res.plural)
        kind = res.kind
        items = [dict(item) for item in data.get("items") or []]
        for item in items:  # list items come without apiVersion/kind
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", kind)
        return items

    def apply(self, res: ApiResource, obj: dict[str, Any], *, force: bool = False, dry_run: bool = False,
              field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply with strict field validation; returns the object as the server has it."""
        self._guard(dry_run)
        name = obj["metadata"]["name"]
        query = [("fieldManager", field_manager), ("fieldValidation", "Strict")]
        if force:
            query.append(("force", "true"))
        if dry_run:
            query.append(("dryRun", "All"))
        subject = res.subject(name)
        status, data = self.request("PATCH", res.path(obj["metadata"].get("namespace"), name), query=query, body=obj,
                                    content_type="application/apply-patch+yaml", what=subject)
        if status >= 300:
            self._raise(status, data, "PATCH", subject)
        self._seen(res, obj, dry_run)
        return dict(data)

    def delete(self, res: ApiResource, namespace: str | None, name: str, *, propagation: str = "Background",
               uid: str | None = None, resource_version: str | None = None, dry_run: bool = False,
               timeout: tuple[float, float] | None = None) -> bool:
        """Delete; False when it was already gone. `uid` makes it delete that object only, never a
        newer one of the same name; `resource_version`, only as it was read."""
        self._guard(dry_run)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            body["preconditions"] = preconditions
        if dry_run:
            body["dryRun"] = ["All"]
        subject = res.subject(name)
        status, data = self.request("DELETE", res.path(namespace, name), body=body, what=subject, timeout=timeout)
        if status == 404:
            return False
        if status == 409 and preconditions:  # the precondition failed: someone already replaced or changed it
            return False
        if status >= 300:
            self._raise(status, data, "DELETE", subject)
        return True

    def create(self, res: ApiResource, obj: dict[str, Any], *,
               timeout: tuple[float, float] | None = None) -> dict[str, Any] | None:
        """Create (POST); None when an object of that name already exists: of two creators, one wins."""
        meta = obj["metadata"]
        subject = res.subject(meta["name"])
        status, data = self.request("POST", res.path(meta.get("namespace")), body=obj, what=subject, timeout=timeout)
        if status == 409:
            return None
        if status >= 300:
            self._raise(status, data, "POST", subject)
        self._seen(res, obj)
        return dict(data)

    def replace(self, res: ApiResource, obj: dict[str, Any], *,
                timeout: tuple[float, float] | None = None) -> dict[str, Any] | None:
        """Update (PUT) the object as read (its metadata.resourceVersion); None when it changed since or
        is gone: of two writers of one version, one wins."""
        meta = obj["metadata"]
        subject = res.subject(meta["name"])
        status, data = self.request("PUT", res.path(meta.get("namespace"), meta["name"]), body=obj, what=subject,
                                    timeout=timeout)
        if status in (404, 409):
            return None
        if status >= 300:
            self._raise(status, data, "PUT", subject)
        self._seen(res, obj)
        return dict(data)

    def _seen(self, res: ApiResource, obj: dict[str, Any], dry_run: bool = False) -> None:
        namespace = obj["metadata"].get("namespace")
        if res.namespaced and namespace and not dry_run:
            self.namespaces_seen.add(namespace)

    def watch(self, res: ApiResource, namespace: str | None, name: str, resource_version: str,
              timeout_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) for one object from `resource_version` on, for at most `timeout_s`."""
        seconds = max(1, int(timeout_s))
        query = [("watch", "1"), ("fieldSelector", f"metadata.name={name}"), ("resourceVersion", resource_version),
                 ("timeoutSeconds", str(seconds)), ("allowWatchBookmarks", "true")]
        resp = self._send("GET", res.path(namespace), query, None, "", res.subject(name),
                          (CONNECT_TIMEOUT_S, seconds + 10.0), stream=True)
        self._answered = True
        try:
            if resp.status_code == 410:  # an expired resourceVersion refused outright: as the ERROR event says it
                gone = _json(resp.read())
                yield "ERROR", gone if isinstance(gone, dict) and gone.get("code") == 410 else {"code": 410}
                return
            if resp.status_code >= 300:
                self._raise(resp.status_code, _json(resp.read()), "WATCH", res.subject(name))
            for line in resp.iter_lines():
                event = _json(line)
                if isinstance(event, dict) and isinstance(event.get("object"), dict):
                    yield str(event.get("type")), event["object"]
        except Exception as exc:  # noqa: BLE001 - a dropped watch ends like a timed-out one
            if isinstance(exc, StackpinError):
                raise
        finally:
            resp.close()

    def resources(self, group: str, version: str) -> dict[str, ApiResource] | None:
        """Discovery of one group version: kind -> resource; None when the server does not serve it."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        status, data = self.request("GET", path)
        if status == 404:
            return None
        if status >= 300:
            self._raise(status, data, "GET", path)
        out = {}
        for r in data.get("resources") or []:
            if "/" not in r["name"]:  # skip subresources (dynamographdeployments/status)
                out[r["kind"]] = ApiResource(group, version, r["kind"], r["name"], bool(r.get("namespaced")),
                                             r.get("storageVersionHash") or None)
        return out

    def preferred_version(self, group: str) -> str | None:
        if not group:
            return "v1"
        status, data = self.request("GET", f"/apis/{group}")
        if status == 404:
            return None
        if status >= 300:
            self._raise(status, data, "GET", f"/apis/{group}")
        return str(data["preferredVersion"]["version"])

    def resource_for(self, group_kind: str) -> ApiResource | None:
        """The served resource of `Kind.group` at the group's preferred version; None if not served."""
        kind, _, group = group_kind.partition(".")
        version = self.preferred_version(group)
        return (self.resources(group, version) or {}).get(kind) if version else None

    def whoami(self) -> str:
        """The user name the server sees (SelfSubjectReview); "unknown" if it will not say."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        status, data = self.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body)
        if status >= 300 or not isinstance(data, dict):
            return "unknown"
        return str(((data.get("status") or {}).get("userInfo") or {}).get("username") or "unknown")


def _json(data: bytes | None) -> Any:
    try:
        return msgspec.json.decode(data) if data else None
    except msgspec.DecodeError:
        return None


def _manager(message: str) -> str:
    found = _CONFLICT_MANAGER.search(message)
    return found.group(1) if found else message


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _reason(exc: BaseException) -> str:
    """A short cause: `connection refused`, `connection closed mid-request`, `no answer within 60s`."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = type(exc).__name__
        wrapped = getattr(exc, "reason", None)
        if name in ("MaxRetryError", "ProxyError", "SSLError") and isinstance(wrapped, BaseException) or \
                name == "SSLError" and exc.args and isinstance(wrapped := exc.args[0], BaseException):
            exc = wrapped  # urllib3's wrappers: the cause is inside
            continue
        text = str(exc)
        if "Connection refused" in text or name == "ConnectionRefusedError":
            return "connection refused"
        if "Server disconnected" in text or "Connection aborted" in text or "reset by peer" in text or \
                name in ("RemoteProtocolError", "ReadError", "WriteError", "ConnectionResetError",
                         "BrokenPipeError"):
            return "connection closed mid-request"
        if "timed out" in text.lower() or name.endswith("Timeout"):
            return "no answer in time"
        if "SSL" in name or "CERTIFICATE" in text.upper() or "[SSL" in text:
            return "TLS: " + _one_line(text.split("\n")[-1])[:200]
        nxt = getattr(exc, "reason", None)
        if not isinstance(nxt, BaseException):
            nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            return _one_line(f"{name}: {text}")[:300]
        exc = nxt
    return "unknown error"


MAX_KUBECONFIG_BYTES = 4 * 1024 * 1024
_SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))
# The kubeconfig fields that name files, resolved against the file that holds them (as client-go does).
_PATH_FIELDS = {"cluster": ("certificate-authority",), "user": ("client-certificate", "client-key", "tokenFile")}


def _kubeconfig_files(kubeconfig: str | None) -> list[str]:
    """The files to merge, as kubectl picks them: --kubeconfig alone (it must exist), else each file of
    $KUBECONFIG that exists (empty entries and missing files are skipped), else ~/.kube/config."""
    import os

    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            why = "not a regular file" if os.path.exists(kubeconfig) else "no such file"
            raise ClusterError(f"kubeconfig {kubeconfig}: {why}")
        return [kubeconfig]
    listed = os.environ.get("KUBECONFIG", "")
    paths = [p for p in listed.split(os.pathsep) if p] if listed else ["~/.kube/config"]
    return [p for p in paths if os.path.lexists(os.path.expanduser(p))]


def _read_kubeconfig(path: str) -> dict[str, Any]:
    """One kubeconfig file as a mapping, every list checked and every file path made absolute."""
    import os
    from pathlib import Path

    import yaml

    from stackpin.yamlio import load_data, read_regular

    full = os.path.expanduser(path)
    try:
        raw = read_regular(Path(full), MAX_KUBECONFIG_BYTES)
    except OSError as exc:
        if exc.errno == 0:  # a FIFO, a device, a directory or a huge file: it would block or exhaust memory
            raise ClusterError(f"kubeconfig {path}: not a regular file of at most {MAX_KUBECONFIG_BYTES} bytes") \
                from None
        raise ClusterError(f"kubeconfig {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        doc = load_data(raw)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise ClusterError(f"kubeconfig {path}: cannot be read ({_one_line(str(exc))[:200]})") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ClusterError(f"kubeconfig {path}: cannot be read (not a mapping)")
    base = os.path.dirname(os.path.abspath(full))
    for section, key in _SECTIONS:
        entries = doc.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise ClusterError(f"kubeconfig {path}: cannot be read ({section} is not a list)")
        for entry in entries:
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and
                    isinstance(entry.get(key) or {}, dict)):
                raise ClusterError(f"kubeconfig {path}: cannot be read ({section}: each needs a name and a {key} "
                                   "mapping)")
            body = entry[key] = dict(entry.get(key) or {})
            for field in _PATH_FIELDS.get(key, ()):
                if isinstance(body.get(field), str) and body[field]:
                    body[field] = os.path.join(base, os.path.expanduser(body[field]))
            command = (body.get("exec") or {}).get("command") if isinstance(body.get("exec"), dict) else None
            if isinstance(command, str) and os.sep in command:  # a path, not a name looked up on PATH
                body["exec"] = {**body["exec"], "command": os.path.join(base, command)}
    if not isinstance(doc.get("current-context") or "", str):
        raise ClusterError(f"kubeconfig {path}: cannot be read (current-context is not a string)")
    return doc


def _merged(files: Sequence[str]) -> dict[str, Any]:
    """kubectl's merge: the first file to name a cluster, user or context wins it whole; the first
    current-context set wins."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": [], "current-context": None}
    for path in files:
        doc = _read_kubeconfig(path)
        for section, _ in _SECTIONS:
            seen = {e["name"] for e in merged[section]}
            for entry in doc.get(section) or ():
                if entry["name"] not in seen:
                    seen.add(entry["name"])
                    merged[section].append(entry)
        merged["current-context"] = merged["current-context"] or doc.get("current-context") or None
    return merged


def _credential_file(where: str, context: str, field: str, path: str | None) -> None:
    """A file the context names (CA, client certificate or key, token) must be a regular file of bounded
    size: the TLS library and the token reader read it whole, and a FIFO would block them for ever."""
    import os
    import stat

    from stackpin.deploy.credentials import MAX_CREDENTIAL_BYTES

    if not path:
        return
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ClusterError(f"kubeconfig {where}: context {context}: {field} {path}: "
                           f"{exc.strerror or 'cannot be read'}") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CREDENTIAL_BYTES:
        raise ClusterError(f"kubeconfig {where}: context {context}: {field} {path}: not a regular file of at most "
                           f"{MAX_CREDENTIAL_BYTES} bytes")


def _base64(field: str, value: Any) -> None:
    """A `*-data` field must be base64 (the client's loader would raise binascii's error)."""
    import base64
    import binascii

    from stackpin.deploy.credentials import CredentialError

    try:
        if not isinstance(value, str):
            raise ValueError
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise CredentialError(f"{field} is not base64") from None


def connect(kubeconfig: str | None, context: str | None, request_timeout_s: float = REQUEST_TIMEOUT_S) -> Cluster:
    """A Cluster for a kubeconfig context, read as kubectl reads it (default $KUBECONFIG, which may
    list several files, or ~/.kube/config; see the module docstring). Nothing is written back to the
    kubeconfig. `request_timeout_s`: the budget of all the command's requests together."""
    import os
    from urllib.parse import urlsplit

    from stackpin.extras import require

    require("cluster")
    from stackpin.deploy import credentials
    from stackpin.deploy.transport import Transport

    files = _kubeconfig_files(kubeconfig)
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if not files:
        raise ClusterError(f"kubeconfig {where}: no such file")
    merged = _merged(files)
    names = [e["name"] for e in merged["contexts"]]
    chosen = context or merged["current-context"]
    if not chosen:
        raise ClusterError(f"kubeconfig {where}: no current-context, and no --context given "
                           f"(contexts: {', '.join(sorted(names)) or 'none'})")
    if chosen not in names:
        raise ClusterError(f"kubeconfig {where}: no context {chosen!r} "
                           f"(contexts: {', '.join(sorted(names)) or 'none'})")
    ctx = next(e["context"] for e in merged["contexts"] if e["name"] == chosen)
    for section, key, name in (("clusters", "cluster", ctx.get("cluster")), ("users", "user", ctx.get("user"))):
        if name is not None and name not in {e["name"] for e in merged[section]}:
            raise ClusterError(f"kubeconfig {where}: context {chosen} names {key} {name!r}, which is not defined")
    if not ctx.get("cluster"):
        raise ClusterError(f"kubeconfig {where}: context {chosen} names no cluster")
    cluster = next(e["cluster"] for e in merged["clusters"] if e["name"] == ctx["cluster"])
    user: dict[str, Any] = next((e["user"] for e in merged["users"] if e["name"] == ctx.get("user")), {})
    namespace = ctx.get("namespace")
    for field, holder in (("certificate-authority", cluster), ("client-certificate", user), ("client-key", user),
                          ("tokenFile", user)):
        if not holder.get(field + "-data"):
            path = holder.get(field)
            _credential_file(where, chosen, field, path if isinstance(path, str) else None)
    try:
        server = cluster.get("server")
        if not isinstance(server, str) or not server:
            raise credentials.CredentialError("its cluster names no server")
        try:
            parts = urlsplit(server)
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError:
            raise credentials.CredentialError(f"server {server!r} is not a URL") from None
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise credentials.CredentialError(f"server {server!r} is not an https:// or http:// URL")
        if namespace is not None and not isinstance(namespace, str):
            raise credentials.CredentialError("namespace must be a string")
        for field in ("certificate-authority", "certificate-authority-data", "tls-server-name", "proxy-url"):
            if cluster.get(field) is not None and not isinstance(cluster[field], str):
                raise credentials.CredentialError(f"{field} must be a string")
        for field, holder in (("certificate-authority-data", cluster), ("client-certificate-data", user),
                              ("client-key-data", user)):
            if holder.get(field) is not None:
                _base64(field, holder[field])
        if not isinstance(cluster.get("insecure-skip-tls-verify", False), bool):
            raise credentials.CredentialError("insecure-skip-tls-verify must be true or false")
        if user.get("exec") is not None and not isinstance(user["exec"], dict):
            raise credentials.CredentialError("exec must be a mapping")
    except credentials.CredentialError as exc:
        raise ClusterError(f"kubeconfig {where}: context {chosen}: {exc}") from None
    try:
        configuration, creds = credentials.load(merged, chosen, user, request_timeout_s)
    except credentials.CredentialError as exc:
        # An exec plugin's failure is the context's, as when it runs again for a later request.
        prefix = f"kubeconfig context {chosen}" if str(exc).startswith("exec plugin") else \
            f"kubeconfig {where}: context {chosen}"
        raise ClusterError(f"{prefix}: {exc}") from None
    if cluster.get("certificate-authority") or cluster.get("certificate-authority-data"):
        configuration.verify_ssl = True  # a CA beside insecure-skip-tls-verify: kubectl refuses it, stackpin verifies
    transport = Transport(configuration, creds)
    return Cluster(transport, server.rstrip("/"), chosen, namespace or None, request_timeout_s)
