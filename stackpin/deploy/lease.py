"""One writer per deployment: a `coordination.k8s.io/v1` Lease `stackpin-<deployment>` in the
deployment's namespace, held by `stackpin apply` and `stackpin rollback --apply` for their whole run.

- Taken by create (POST: of two creators the server lets one win; tried first, as a released Lease
  is deleted), or, once the holder's lease has expired (`renewTime + leaseDurationSeconds` past) or
  it holds none, by an update pinned to the resourceVersion read (PUT: of two takers one wins, the
  other gets 409).
- Renewed every RENEW_EVERY_S by a background thread while the run lasts. A renewal that finds the
  Lease changed under it, or that cannot reach the server before the lease would expire, marks it
  lost; `Cluster.before_write` then stops the run before its next write (LeaseLost).
- Released at the end, on an error and on Ctrl-C/SIGTERM: deleted, pinned to its resourceVersion, so
  a Lease another writer has taken over is never deleted. A process killed with SIGKILL leaves it to
  expire (at most DURATION_S).
- A second writer polls up to `wait_s` (`--lock-timeout`, default 0: refuse at once, as terraform's
  `-lock-timeout`), then refuses with one line naming the holder and when its lease expires.

Expiry is judged on this machine's clock against the holder's renewTime, as client-go's leader
election does with its own observations: clocks skewed by more than a few seconds shorten or
lengthen the wait by as much.
"""

from __future__ import annotations

import datetime
import getpass
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from stackpin.deploy.kube import NAMESPACES, ApiResource, Cluster, ClusterError

LEASES = ApiResource("coordination.k8s.io", "v1", "Lease", "leases", True)
DURATION_S = 30
RENEW_EVERY_S = 10.0
RETRY_EVERY_S = 2.0  # a renewal that failed is tried again this soon
POLL_EVERY_S = 1.0  # a waiting writer looks again this often
SIDE_TIMEOUT = (5.0, 5.0)  # renewals and the release run outside the command's request budget
OPERATION_ANNOTATION = "stackpin.dev/operation"

Progress = Callable[[str], None]


class LeaseHeld(ClusterError):
    """Another writer holds the deployment's Lease (exit 2)."""


class LeaseLost(ClusterError):
    """The Lease could not be renewed, or another writer took it: the run stopped before its next write."""


def lease_name(deployment: str) -> str:
    return f"stackpin-{deployment}"


def holder_identity() -> str:
    """Who holds it, for the person who is refused: `user@host pid N` and a random part, so that two
    containers with the same host name and pid are still two holders."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container running as a bare uid)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"


def _micro(moment: datetime.datetime) -> str:
    """metav1.MicroTime as the API server writes it."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class Holder(msgspec.Struct, frozen=True):
    """A Lease as read: who holds it, and until when."""

    identity: str
    operation: str
    renewed: datetime.datetime | None
    duration_s: int

    @property
    def expires(self) -> datetime.datetime | None:
        return None if self.renewed is None else self.renewed + datetime.timedelta(seconds=self.duration_s)

    def free(self, now: datetime.datetime) -> bool:
        return not self.identity or self.expires is None or self.expires <= now


def read_holder(lease: dict[str, Any]) -> Holder:
    spec = lease.get("spec") or {}
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    duration = spec.get("leaseDurationSeconds")
    return Holder(str(spec.get("holderIdentity") or ""), str(annotations.get(OPERATION_ANNOTATION) or ""),
                  _parse(spec.get("renewTime")), duration if isinstance(duration, int) else DURATION_S)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class DeploymentLease:
    """The Lease while this process holds it (state that changes as it is renewed: not frozen)."""

    def __init__(self, cluster: Cluster, namespace: str, deployment: str, operation: str,
                 identity: str | None = None, duration_s: int = DURATION_S) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.deployment = deployment
        self.name = lease_name(deployment)
        self.operation = operation
        self.identity = identity or holder_identity()
        self.duration_s = duration_s
        self._live: dict[str, Any] | None = None
        self._renewed_at = 0.0  # monotonic time of the last successful write of the Lease
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def subject(self) -> str:
        return f"lease/{self.name} in namespace {self.namespace}"

    def _body(self, live: dict[str, Any] | None, *, take: bool) -> dict[str, Any]:
        now = _micro(_now())
        spec = dict((live or {}).get("spec") or {})
        if take:
            transitions = spec.get("leaseTransitions")
            spec["leaseTransitions"] = (transitions if isinstance(transitions, int) else 0) + (live is not None)
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.duration_s, renewTime=now)
        metadata: dict[str, Any] = {
            "name": self.name, "namespace": self.namespace,
            "labels": {"app.kubernetes.io/managed-by": "stackpin", "app.kubernetes.io/part-of": self.deployment},
            "annotations": {OPERATION_ANNOTATION: self.operation}}
        if live is not None:
            metadata["resourceVersion"] = live["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    # --- taking it ----------------------------------------------------------------------------------

    def _try_take(self, create_first: bool) -> Holder | None:
        """One attempt: None when taken, else the holder in the way. `create_first` on the first attempt:
        a released Lease is deleted, so usually there is none and one request takes it."""
        written = self.cluster.create(LEASES, self._body(None, take=True)) if create_first else None
        if written is None:  # there is one (or may be): take it over if it is free
            live = self.cluster.get(LEASES, self.namespace, self.name)
            if live is None:  # released in between
                written = self.cluster.create(LEASES, self._body(None, take=True))
            else:
                holder = read_holder(live)
                if not holder.free(_now()) and holder.identity != self.identity:
                    return holder
                written = self.cluster.replace(LEASES, self._body(live, take=True))
        if written is None:  # another writer was quicker: look again
            again = self.cluster.get(LEASES, self.namespace, self.name)
            return read_holder(again) if again else Holder("", "", None, DURATION_S)
        self._live, self._renewed_at = written, time.monotonic()
        return None

    def acquire(self, wait_s: float, progress: Progress) -> None:
        deadline = time.monotonic() + wait_s
        said = False
        attempts = 0
        while (holder := self._try_take(create_first=attempts == 0)) is not None:
            attempts += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise LeaseHeld(self._held_message(holder, wait_s),
                                "wait for it to finish, or pass --lock-timeout SECONDS to wait")
            if not said and holder.identity:
                progress(f"waiting up to {wait_s:g}s for {self.subject}, held by {holder.identity}")
                said = True
            time.sleep(min(POLL_EVERY_S, left))
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
        self._thread.start()

    def _held_message(self, holder: Holder, wait_s: float) -> str:
        what = f" ({holder.operation})" if holder.operation else ""
        expires = holder.expires
        if expires is None:
            until = "no expiry recorded"
        else:
            left = max(0, round((expires - _now()).total_seconds()))
            until = f"until {_micro(expires)[:19]}Z (in {left}s) unless its holder renews it"
        waited = f" after waiting {wait_s:g}s" if wait_s > 0 else ""
        who = holder.identity or "another writer"
        return (f"deployment {self.namespace}/{self.deployment} is being changed by {who}{what}: {self.subject} "
                f"is held, {until}; refused{waited}")

    # --- keeping it ---------------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        pause = RENEW_EVERY_S
        while not self._stop.wait(pause):
            pause = RENEW_EVERY_S if self._renew_once() else RETRY_EVERY_S
            if self._lost:
                return

    def _renew_once(self) -> bool:
        """True when renewed; a failure marks the lease lost once it may have expired, or at once when
        another writer has it."""
        try:
            with self._lock:
                live = self._live
            written = self.cluster.replace(LEASES, self._body(live, take=False), timeout=SIDE_TIMEOUT)
            if written is None:
                current = self.cluster.get(LEASES, self.namespace, self.name)
                if current is None or read_holder(current).identity != self.identity:
                    holder = read_holder(current).identity if current else "nobody (it was deleted)"
                    self._mark_lost(f"{holder} holds it now")
                    return False
                written = current  # a renewal whose answer was lost: ours still
            with self._lock:
                self._live, self._renewed_at = written, time.monotonic()
            return True
        except ClusterError as exc:
            if time.monotonic() - self._renewed_at >= self.duration_s - RETRY_EVERY_S:
                self._mark_lost(f"not renewed for {self.duration_s}s: {exc.message}")
            return False

    def _mark_lost(self, why: str) -> None:
        with self._lock:
            self._lost = self._lost or why

    def check(self) -> None:
        """Raise LeaseLost unless the lease is still ours: called before every write."""
        with self._lock:
            lost = self._lost
            if lost is None and time.monotonic() - self._renewed_at >= self.duration_s - RETRY_EVERY_S:
                lost = self._lost = f"not renewed for {self.duration_s - RETRY_EVERY_S:g}s"
        if lost:
            raise LeaseLost(f"lost {self.subject} ({lost}): stopped before the next write, so that two writers "
                            "never change the deployment at once", "run it again: the apply converges")

    # --- letting it go ------------------------------------------------------------------------------

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SIDE_TIMEOUT[0] + SIDE_TIMEOUT[1] + 1)
        with self._lock:
            live, lost = self._live, self._lost
        if live is None or lost:
            return
        try:  # pinned to the version this process wrote: never deletes another writer's lease
            self.cluster.delete(LEASES, self.namespace, self.name, resource_version=live["metadata"]["resourceVersion"],
                                timeout=SIDE_TIMEOUT)
        except ClusterError:
            pass  # it expires on its own within DURATION_S


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (kubectl's pod stop, a CI cancel) unwinds like Ctrl-C, so the lease is released."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        sys.exit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _quiet(_: str) -> None:
    pass


@contextmanager
def holding(cluster: Cluster, namespace: str, deployment: str, operation: str, *, wait_s: float = 0.0,
            create_namespace: bool = False, progress: Progress = _quiet) -> Iterator[DeploymentLease]:
    """Hold the deployment's Lease for the body of the `with`; every write the body makes through
    `cluster` first checks that it is still held."""
    lease = DeploymentLease(cluster, namespace, deployment, operation)
    if create_namespace and cluster.get(NAMESPACES, None, namespace) is None:
        # The Lease lives in the namespace: create it first (the apply would, a moment later).
        cluster.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        progress(f"namespace/{namespace} created")
    with _sigterm_unwinds():
        try:
            lease.acquire(wait_s, progress)
        except ClusterError as exc:
            if f'namespaces "{namespace}" not found' in exc.message:  # the Lease's POST: no such namespace
                raise ClusterError(f"namespace {namespace} does not exist",
                                   "create it, or pass --create-namespace") from None
            raise
        cluster.before_write = lease.check
        try:
            yield lease
        finally:
            cluster.before_write = None
            lease.release()
