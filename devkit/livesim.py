"""A test and demo bed, not part of stackpin: the serving endpoint of one rack, as the Dynamo operator and
its frontend would give it, with no GPUs and no operator.

On a real rack, `stackpin apply` writes a DynamoGraphDeployment to the rack's API server; the Dynamo
operator rolls it out (new pods, the old ones drained) and the deployment's frontend serves it at the
rack's OpenAI-compatible endpoint. `serve_live` stands in for both: it reads which stack is live on the
rack's API server (the stack digest and revision the applied DynamoGraphDeployment carries, read by
`stackpin.deploy.status` from the in-cluster ApplySet record), polls it every POLL_S seconds, and forwards
each request on its loopback endpoint to an in-process stackpin simulator of that stack (the lock of the
live revision from the history, `DEPLOYMENT@REV`; the record's own lock for a stack applied from a
lockfile), started once per stack digest, with `faults[digest]` (e.g. `slow=2`) injected into that
stack's simulator only. The switch is instant where a real rollout takes minutes; a real rack's endpoint
(the fleet file's `endpoint`) replaces this bed and nothing else changes.

While no stack is live (or its lock cannot be found) it answers 503; while the API server cannot be read
it keeps serving the last stack it saw, as a rack keeps serving when its control plane is away.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import msgspec

from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.sim.faults import FaultSpec

POLL_S = 0.5
# Hop-by-hop headers (RFC 9110 7.6.1) and the body's framing: this hop frames the body itself.
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"}


class _Live:
    """The stack live on the rack, and a simulator per stack digest seen (kept: a rollback is instant)."""

    def __init__(self, kubeconfig: Path, namespace: str, deployment: str, history: Path,
                 faults: Mapping[str, FaultSpec], share: int, servers: ExitStack) -> None:
        from stackpin.deploy.kube import connect

        # One client for the bed's life: no request budget (a command's), since it polls until stopped.
        self.cluster = connect(str(kubeconfig), None, request_timeout_s=math.inf)
        self.namespace, self.deployment, self.history = namespace, deployment, history
        self.faults, self.share, self.servers = faults, share, servers
        self.sims: dict[str, str] = {}  # stack digest -> simulator URL
        self.url: str | None = None  # where requests go now
        self.why = "not read yet"  # why nothing is served, for the 503's message
        self.lock = threading.Lock()

    def poll(self) -> None:
        from stackpin.deploy.kube import ClusterError
        from stackpin.deploy.status import deployment_status

        try:
            report = deployment_status(self.cluster, self.deployment, self.namespace)
        except ClusterError as exc:
            if "no stackpin deployment" in exc.message:  # nothing applied (yet): nothing served
                self._serve(None, exc.message)
            return  # an API server away: the rack keeps serving what it served
        digest = report.stack_digest
        if digest is None:
            self._serve(None, f"{self.deployment} has no live objects")
            return
        if digest not in self.sims:
            lock = self._lock(digest, report.revision, report.last_applied.lock if report.last_applied else None)
            if lock is None:
                self._serve(None, f"no lock of the live stack {digest} (revision {report.revision}) in "
                                  f"{self.history} or the record")
                return
            from stackpin.sim.server import serve_in_thread
            from stackpin.sim.stack import sim_stack

            handle = self.servers.enter_context(serve_in_thread(sim_stack(lock), share=self.share,
                                                                faults=self.faults.get(digest)))
            self.sims[digest] = handle.url
        self._serve(self.sims[digest])

    def _serve(self, url: str | None, why: str = "") -> None:
        with self.lock:
            self.url, self.why = url, why

    def _lock(self, digest: str, revision: int | None, recorded: dict[str, object] | None) -> StackLock | None:
        """The live stack's lock: revision `revision` of the deployment's history, else the record's copy."""
        from stackpin.history.store import HistoryStore

        if revision is not None:
            store = HistoryStore(self.history)
            for key in store.keys():
                if key.name == self.deployment:
                    try:
                        lock = store.read(key, revision).lock
                    except StackpinError:
                        continue
                    if lock.stack_digest == digest:
                        return lock
        if recorded is not None:
            lock = msgspec.convert(recorded, StackLock)
            return lock if lock.stack_digest == digest else None
        return None


def _handler(live: _Live) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as a frontend serves them

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._forward()

        def do_POST(self) -> None:  # noqa: N802
            self._forward()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's signature
            pass

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with live.lock:
                url, why = live.url, live.why
            if url is None:
                self._answer(503, {"error": {"message": f"no stack is live on this rack: {why}",
                                             "type": "unavailable"}})
                return
            target = urllib.parse.urlsplit(url)
            upstream = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=600)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS | {"host"}}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP_HEADERS:
                        self.send_header(name, value)
                length = answer.getheader("Content-Length")
                if length is not None:  # a JSON answer: whole
                    data = answer.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                # A stream: each piece passed on as it arrives (wfile is unbuffered), re-chunked for this hop.
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while piece := answer.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
            except (OSError, http.client.HTTPException):
                self.close_connection = True  # the client or the simulator went away: so does this hop
            finally:
                upstream.close()  # a client gone mid-stream: the simulator sees it and stops generating

        def _answer(self, status: int, payload: dict[str, object]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Forward


@contextmanager
def serve_live(cluster_kubeconfig: Path, namespace: str, deployment: str, history: Path,
               faults: Mapping[str, str], *, share: int = 1) -> Iterator[str]:
    """A loopback URL serving the stack live on the rack (see the module docstring) while the block runs.
    `faults`: stack digest -> `--fault` spec for that stack's simulator; `share`: serve that fraction of
    each stack (the simulator's --share), for short test and demo benches."""
    specs = {digest: FaultSpec.parse(text) for digest, text in faults.items()}  # a bad spec: one line, first
    with ExitStack() as servers:
        live = _Live(cluster_kubeconfig, namespace, deployment, history, specs, share, servers)
        live.poll()  # the URL serves the live stack from the first request
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(POLL_S):
                try:
                    live.poll()
                except StackpinError as exc:  # a lock that cannot be simulated, a broken history
                    live._serve(None, exc.message)  # said in the 503s; the next poll tries again
                except ValueError as exc:  # a record's lock that is no lock (msgspec's ValidationError)
                    live._serve(None, " ".join(str(exc).split())[:300])

        poller = threading.Thread(target=poll, name="livesim-poll", daemon=True)
        poller.start()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(live))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="livesim-http", daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            stop.set()
            server.shutdown()
            server.server_close()
            poller.join(10)
