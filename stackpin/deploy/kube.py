"""The cluster edge: the one module that talks to a Kubernetes API server.

It uses the official `kubernetes` client for what a kubeconfig means (token, client certificate, exec
plugin, CA, proxy, the context's namespace) and for the HTTP connection, and speaks the REST API with
plain JSON for everything else, so one code path serves core kinds, custom resources and discovery.
The client is imported here only, when a cluster command connects (`connect`).

Every failure becomes one typed error with one line a person can act on: never a traceback, never a
credential (server messages name the user, not the token; request headers are never printed).

One budget bounds a command's API traffic (`--request-timeout`): every request's timeout is what is
left of it, and the time each one takes is taken off. urllib3's own retries are off, so a dead server
costs the budget once, not once per retry per request. Watches are outside it (`--timeout` bounds
them), as are the Lease renewals, which run beside the command with timeouts of their own.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import quote

from stackpin.errors import StackpinError

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


@dataclass(frozen=True)
class FieldConflict:
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


@dataclass(frozen=True)
class ApiResource:
    """A kind as discovery serves it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

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


CONFIGMAPS = ApiResource("", "v1", "ConfigMap", "configmaps", True)
NAMESPACES = ApiResource("", "v1", "Namespace", "namespaces", False)
CRDS = ApiResource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)


class Cluster:
    """One API server, as a kubeconfig context names it. Methods map HTTP statuses to typed errors;
    404 is an ordinary answer (None / False) where "not there" is expected."""

    def __init__(self, api: Any, server: str, context: str, namespace: str | None,
                 request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._api = api
        self.server = server
        self.context = context
        self.context_namespace = namespace
        self.request_timeout_s = request_timeout_s
        self._budget_left = request_timeout_s
        self._budget_lock = threading.Lock()
        self._answered = False  # any HTTP answer yet: a failure after one is a lost server, not an unreached one
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
            if timeout is None:
                timeout = self._budget_timeout(method, what or path)
            resp = self._send(method, path, query, body, content_type, what, timeout)
            try:
                data = resp.read()
            except Exception as exc:  # noqa: BLE001 - the connection died while the body was read
                raise self._unreachable(exc, method, what or path) from None
        except Unreachable as exc:
            if budgeted and self._spend(started) <= 0.05 and not isinstance(exc, OutOfTime):
                raise self._out_of_time(method, what or path) from None  # it timed out on what was left
            raise
        if budgeted:
            self._spend(started)
        self._answered = True
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data.decode("utf-8", errors="replace")
        return int(resp.status), parsed

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
        verb = "" if method == "GET" else f" during {method} of {what}"
        return OutOfTime(f"the API server {self.server} did not answer within --request-timeout "
                         f"{self.request_timeout_s:g}s (all requests together){verb}",
                         "is the server healthy (its etcd up)? raise --request-timeout if it is only slow")

    def _send(self, method: str, path: str, query: Sequence[tuple[str, str]], body: Any, content_type: str,
              what: str, timeout: tuple[float, float]) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            serialized = self._api.param_serialize(method=method, resource_path=path, query_params=list(query),
                                                   header_params=headers, body=body, auth_settings=["BearerToken"])
            return self._api.call_api(*serialized, _request_timeout=timeout)
        except StackpinError:
            raise
        except Exception as exc:  # noqa: BLE001 - urllib3, ssl, exec-plugin and client errors, all one line
            raise self._unreachable(exc, method, what or path) from None

    def _unreachable(self, exc: Exception, method: str, what: str) -> ClusterError:
        reason = _reason(exc)
        if type(exc).__name__ == "ConfigException":  # an exec plugin failed while refreshing the token
            return ClusterError(f"kubeconfig context {self.context}: {reason}")
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
        return dict(data)

    def watch(self, res: ApiResource, namespace: str | None, name: str, resource_version: str,
              timeout_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) for one object from `resource_version` on, for at most `timeout_s`."""
        seconds = max(1, int(timeout_s))
        query = [("watch", "1"), ("fieldSelector", f"metadata.name={name}"), ("resourceVersion", resource_version),
                 ("timeoutSeconds", str(seconds)), ("allowWatchBookmarks", "true")]
        resp = self._send("GET", res.path(namespace), query, None, "", res.subject(name),
                          (CONNECT_TIMEOUT_S, seconds + 10.0))
        self._answered = True
        if resp.status >= 300:
            resp.read()
            self._raise(int(resp.status), _json(resp.data), "WATCH", res.subject(name))
        try:
            for line in resp.response:
                event = _json(line)
                if isinstance(event, dict) and isinstance(event.get("object"), dict):
                    yield str(event.get("type")), event["object"]
        except Exception as exc:  # noqa: BLE001 - a dropped watch ends like a timed-out one
            if isinstance(exc, StackpinError):
                raise
        finally:
            resp.response.release_conn()

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
                out[r["kind"]] = ApiResource(group, version, r["kind"], r["name"], bool(r.get("namespaced")))
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
        return json.loads(data) if data else None
    except ValueError:
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
        text = str(exc)
        if "Connection refused" in text or name == "ConnectionRefusedError":
            return "connection refused"
        if "RemoteDisconnected" in text or "Connection aborted" in text or "reset by peer" in text or \
                name in ("ProtocolError", "RemoteDisconnected", "ConnectionResetError", "IncompleteRead"):
            return "connection closed mid-request"
        if "timed out" in text.lower() or name in ("ReadTimeoutError", "ConnectTimeoutError"):
            return "no answer in time"
        if "SSL" in name or "CERTIFICATE" in text.upper():
            return "TLS: " + _one_line(text.split("\n")[-1])[:200]
        if name == "ConfigException":
            return _one_line(text)[:300]
        nxt = getattr(exc, "reason", None)
        if not isinstance(nxt, BaseException):
            nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            return _one_line(f"{name}: {text}")[:300]
        exc = nxt
    return "unknown error"


MAX_KUBECONFIG_BYTES = 4 * 1024 * 1024


def connect(kubeconfig: str | None, context: str | None, request_timeout_s: float = REQUEST_TIMEOUT_S) -> Cluster:
    """A Cluster for a kubeconfig context, read as kubectl reads it (default $KUBECONFIG, which may
    list several files, or ~/.kube/config). Nothing is written back to the kubeconfig.
    `request_timeout_s`: the budget of all the command's requests together."""
    import os
    import warnings

    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import list_kube_config_contexts, new_client_from_config
    from urllib3.exceptions import InsecureRequestWarning

    # A context with insecure-skip-tls-verify is the user's choice, made once in the kubeconfig;
    # kubectl does not warn on every request, and neither does stackpin.
    warnings.simplefilter("ignore", InsecureRequestWarning)

    if kubeconfig and not os.path.isfile(kubeconfig):
        why = "not a regular file" if os.path.exists(kubeconfig) else "no such file"
        raise ClusterError(f"kubeconfig {kubeconfig}: {why}")
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    # The client reads every file whole: a FIFO, a device or a huge file would block or exhaust memory.
    for path in ([kubeconfig] if kubeconfig else os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)):
        full = os.path.expanduser(path)
        if full and os.path.exists(full) and (not os.path.isfile(full) or os.path.getsize(full) > MAX_KUBECONFIG_BYTES):
            raise ClusterError(f"kubeconfig {path}: not a regular file of at most {MAX_KUBECONFIG_BYTES} bytes")
    import yaml

    try:
        contexts, active = list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        chosen = active
        if context:
            chosen = next((c for c in contexts if c.get("name") == context), None)
            if chosen is None:
                names = ", ".join(sorted(str(c.get("name")) for c in contexts)) or "none"
                raise ClusterError(f"kubeconfig {where}: no context {context!r} (contexts: {names})")
        configuration = type.__call__(Configuration)  # a fresh one, not a copy of the client's global default
        configuration.retries = False  # one try per request: the budget is spent once (module docstring)
        api = new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, persist_config=False, client_configuration=configuration)
    except ConfigException as exc:
        raise ClusterError(f"kubeconfig {where}: {_one_line(str(exc))[:300]}") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError, yaml.YAMLError) as exc:
        raise ClusterError(f"kubeconfig {where}: cannot be read ({_one_line(str(exc))[:200]})") from None
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return Cluster(api, str(api.configuration.host), str((chosen or {}).get("name") or ""), namespace,
                   request_timeout_s)
