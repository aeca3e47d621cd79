"""Waiting on the cluster with a watch: until a DynamoGraphDeployment is ready, or an object is gone.

A watch (not polling) from the resourceVersion just read, re-opened until the deadline when the server
ends it early; each change is reported to `progress`. A watch ERROR event is handled as kubectl's
watch tools do: 410 Expired/Gone (the resourceVersion is older than the server keeps) means read the
object again and watch from its new resourceVersion, within the same deadline; any other is one typed
error line (WatchFailed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from stackpin.deploy.kube import ApiResource, Cluster, ClusterError
from stackpin.deploy.readiness import Readiness, readiness
from stackpin.errors import StackpinError

Progress = Callable[[str], None]


class WaitTimeout(StackpinError):
    """What was awaited did not happen in time (exit 1). `state`: the last readiness seen, if any."""

    exit_code = 1

    def __init__(self, message: str, state: Readiness | None = None) -> None:
        super().__init__(message)
        self.state = state


class WatchFailed(ClusterError):
    """The server ended a watch with an ERROR event other than 410 (exit 2)."""


def _quiet(_: str) -> None:
    pass


def _expired(subject: str, namespace: str, event: dict[str, Any]) -> bool:
    """An ERROR event's Status: True for 410 (watch again from a fresh read); WatchFailed otherwise."""
    code = event.get("code")
    if code == 410:
        return True
    reason = ": ".join(str(x) for x in (event.get("reason"), event.get("message")) if x) or "no reason given"
    raise WatchFailed(f"the watch of {subject} in namespace {namespace} ended with an error"
                      f"{f' ({code})' if code else ''}: {' '.join(reason.split())}")


def wait_ready(cluster: Cluster, res: ApiResource, namespace: str, name: str, timeout_s: float,
               progress: Progress = _quiet) -> Readiness:
    deadline = time.monotonic() + timeout_s
    subject = res.subject(name)
    while True:
        live = cluster.get(res, namespace, name)
        state = readiness(live) if live else Readiness(name, "", "", "", True, (), deleted=True)
        progress(f"{subject}: {state.summary()}")
        if state.ready:
            return state
        if live is not None:
            for kind, obj in cluster.watch(res, namespace, name, live["metadata"]["resourceVersion"],
                                           deadline - time.monotonic()):
                if kind == "BOOKMARK":
                    continue
                if kind == "ERROR" and _expired(subject, namespace, obj):
                    break  # read again, watch from there
                if kind == "DELETED":
                    state = Readiness(name, "", "", "", True, (), deleted=True)
                    break
                state = readiness(obj)
                progress(f"{subject}: {state.summary()}")
                if state.ready:
                    return state
                if time.monotonic() >= deadline:
                    break
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g}s waiting for {subject} in namespace {namespace}: "
                              f"not ready: {'; '.join(state.waiting_on())}", state)
        if live is None:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def wait_gone(cluster: Cluster, res: ApiResource, namespace: str, name: str, uid: str, timeout_s: float,
              progress: Progress = _quiet) -> None:
    """Until the object with this uid no longer exists (a foreground deletion ends once its dependents
    are gone and the garbage collector drops the finalizer)."""
    deadline = time.monotonic() + timeout_s
    subject = res.subject(name)
    while True:
        live = cluster.get(res, namespace, name)
        if live is None or live["metadata"].get("uid") != uid:
            return
        progress(f"{subject}: deleting (finalizers: {', '.join(live['metadata'].get('finalizers') or []) or 'none'})")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(f"timed out after {timeout_s:g}s waiting for {subject} in namespace {namespace} to be "
                              f"deleted (finalizers: {', '.join(live['metadata'].get('finalizers') or []) or 'none'});"
                              " nothing new was created: run apply again once it is gone")
        for kind, obj in cluster.watch(res, namespace, name, live["metadata"]["resourceVersion"], remaining):
            if kind == "ERROR" and _expired(subject, namespace, obj):
                break  # read again, watch from there
            if kind == "DELETED":
                return
