"""`search --verify cluster --fleet FLEET.yaml`: the base and each pick that passed the lock and the engine check
deployed in turn into a scratch namespace of a real cluster, as Dynamo's "thorough" profiling deploys each
configuration: create the namespace, apply (`stackpin.deploy.apply_stack`, as the rollout applies), wait
ready (`deploy.wait.wait_ready`), soak (it must stay ready for the fleet's gates.soakSeconds), bench it at its
endpoint (`rollout.benchgate.measure`: the fleet's gates.bench trace and controls, every stack held to the
base's SLO), then tear down: delete what was applied and the namespace, and wait until they are gone.
Teardown runs whatever happens (a failed apply, a stack never ready, a bench that fails, Ctrl-C or SIGTERM,
with Ctrl-C held off while it runs), on a client of its own, so a deployment that spent its request budget
still leaves nothing behind. Then each pick is judged against the base by `bench compare`'s verdict model and
the picks are ranked by what was measured.

The cluster is the fleet file's rack (`rack`, default its canary): its kubeconfig and context. Its `endpoint`
is where a stack deployed there is served; `{namespace}` in it is replaced by the scratch namespace, for a
gateway that routes by namespace (e.g. http://gateway.example/{namespace}); without it, the endpoint serves
whatever is deployed (one stack at a time is). Scratch namespaces are `<prefix>-0` (the base), `<prefix>-1`,
...: a namespace that exists already is never used (nothing of someone else's is applied to or deleted).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stackpin.bench.compare import compare
from stackpin.deploy.kube import NAMESPACES, Cluster
from stackpin.errors import StackpinError
from stackpin.lock.lockfile import StackLock
from stackpin.rollout.fleet import BenchGate, LoadedFleet, Rack
from stackpin.search.verify import (
    BaseRefused,
    Checked,
    Note,
    Outcome,
    PickVerification,
    Verification,
    VerifyOptions,
    check_all,
    fresh_results,
    judged,
    pick_files,
    prefixed,
    ranked,
    unmeasured,
    write_records,
)

SCRATCH_LABEL = "stackpin.dev/scratch"  # on every scratch namespace: what made it, and that it is to be deleted
TEARDOWN_TIMEOUT_S = 600.0  # for the applied objects and the namespace to be gone
REQUEST_BUDGET_S = 120.0  # one deployment's API requests, all together (a fresh client per deployment)
Connect = Callable[[Rack], Cluster]


def endpoint_of(rack: Rack, namespace: str) -> str:
    if rack.endpoint is None:
        raise StackpinError(f"rack {rack.name}: no endpoint: verification benches each stack where the rack serves "
                            "it (give the rack an endpoint; {namespace} in it names the scratch namespace)")
    return rack.endpoint.replace("{namespace}", namespace)


def chosen_rack(fleet: LoadedFleet, name: str | None) -> Rack:
    spec = fleet.fleet.spec
    if name is None:
        return spec.canary
    found = next((r for r in spec.racks if r.name == name), None)
    if found is None:
        raise StackpinError(f"{fleet.path}: no rack {name!r} (racks: {', '.join(r.name for r in spec.racks)})")
    return found


def bench_gate(fleet: LoadedFleet, runs: int, trace: Path | None, slo_text: str | None) -> tuple[BenchGate, Path]:
    """The fleet's gates.bench with `runs`, and `trace` / `slo_text` when given; the trace's path."""
    gate = fleet.fleet.spec.gates.bench
    if gate is None and trace is None:
        raise StackpinError(f"{fleet.path}: spec.gates.bench is not set: give it (its trace and controls bench "
                            "each stack), or a trace")
    gate = (gate or BenchGate(trace=str(trace))).model_copy(update={"runs": runs})
    if slo_text is not None:
        gate = gate.model_copy(update={"slo": slo_text})
    return gate, (trace.absolute() if trace is not None else fleet.resolve(gate.trace))


def connect_rack(fleet: LoadedFleet, rack: Rack, budget_s: float = REQUEST_BUDGET_S) -> Cluster:
    from stackpin.deploy.kube import connect

    kubeconfig = str(fleet.resolve(rack.kubeconfig)) if rack.kubeconfig else None
    return connect(kubeconfig, rack.context, budget_s)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs, as Ctrl-C does: the teardown runs on both."""
    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        original = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: the caller's own handling stands
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, original)


def create_scratch(cluster: Cluster, namespace: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {SCRATCH_LABEL: "search-verify"}}}
    if cluster.create(NAMESPACES, body) is None:
        raise StackpinError(f"namespace {namespace} exists already: a scratch namespace must be new (nothing of "
                            "another's is applied to or deleted)", "give another --scratch-prefix")


def teardown(cluster: Cluster, lock: StackLock, namespace: str, note: Note,
             timeout_s: float = TEARDOWN_TIMEOUT_S) -> None:
    """Delete what apply wrote to `namespace` (the stack's objects, its ApplySet parent and Lease), then the
    namespace, and wait until each is gone (a namespace is gone once the cluster emptied it)."""
    from stackpin.deploy.applyset import parent_name
    from stackpin.deploy.kube import CONFIGMAPS
    from stackpin.deploy.lease import LEASES, lease_name
    from stackpin.deploy.objects import DGD_KIND, key_of, stack_objects
    from stackpin.deploy.wait import wait_gone

    deadline = time.monotonic() + timeout_s
    deployment = lock.stack_profile.metadata.deployment
    targets = [(CONFIGMAPS, parent_name(deployment), "Background"), (LEASES, lease_name(deployment), "Background")]
    for obj in stack_objects(lock, namespace).objects:
        key = key_of(obj)
        res = cluster.resource_for(key.group_kind)
        if res is not None and res.namespaced:
            # What the operator made of the DynamoGraphDeployment (and a ComputeDomain's channels) goes first.
            owner = key.kind in (DGD_KIND, "ComputeDomain")
            targets.append((res, key.name, "Foreground" if owner else "Background"))
    for res, name, propagation in reversed(targets):  # the DynamoGraphDeployment before what it refers to
        live = cluster.get(res, namespace, name)
        if live is None:
            continue
        cluster.delete(res, namespace, name, propagation=propagation, uid=live["metadata"]["uid"])
        wait_gone(cluster, res, namespace, name, live["metadata"]["uid"], max(deadline - time.monotonic(), 1.0))
    live = cluster.get(NAMESPACES, None, namespace)
    if live is not None:
        cluster.delete(NAMESPACES, None, namespace, uid=live["metadata"]["uid"])
        wait_gone(cluster, NAMESPACES, "", namespace, live["metadata"]["uid"], max(deadline - time.monotonic(), 1.0))
    note(f"namespace {namespace}: deleted, gone")


def _soak(cluster: Cluster, lock: StackLock, namespace: str, seconds: float, note: Note) -> None:
    from stackpin.deploy.objects import DGD_KIND, key_of, stack_objects
    from stackpin.deploy.readiness import readiness

    dgd = next(key_of(o) for o in stack_objects(lock, namespace).objects if o["kind"] == DGD_KIND)
    res = cluster.resource_for(dgd.group_kind)
    assert res is not None  # wait_ready found it
    deadline = time.monotonic() + seconds
    if seconds > 0:
        note(f"soaking {seconds:g}s")
    while True:
        live = cluster.get(res, namespace, dgd.name)
        state = readiness(live) if live else None
        if state is None or not state.ready:
            raise StackpinError(f"{dgd.name} in {namespace} stopped being ready while soaking: "
                                f"{state.summary() if state else 'deleted'}")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(2.0, left))


def deploy_and_measure(fleet: LoadedFleet, rack: Rack, checked: Checked, namespace: str, gate: BenchGate,
                       trace: Path, out_dir: Path, label: str, note: Note, *, allow_stand_ins: bool = False,
                       connect: Connect | None = None) -> tuple[Path, ...]:
    """Create `namespace`, apply the stack there, wait ready, soak, bench it `gate.runs` times at the rack's
    endpoint; tear down whatever happens. The result files."""
    from stackpin.deploy.apply import ApplyOptions, apply_stack
    from stackpin.deploy.objects import DGD_KIND, key_of, stack_objects
    from stackpin.deploy.wait import wait_ready
    from stackpin.rollout.benchgate import measure

    lock = checked.lock
    assert lock is not None
    spec = fleet.fleet.spec
    ready_s = spec.gates.ready.timeout_seconds
    cluster = connect(rack) if connect else connect_rack(fleet, rack)
    create_scratch(cluster, namespace)
    note(f"namespace {namespace}: created")
    try:
        with _terminate_as_interrupt():
            apply_stack(cluster, checked.source, ApplyOptions(namespace=namespace, timeout_s=ready_s,
                                                              allow_stand_ins=allow_stand_ins),
                        progress=note, warn=lambda m: note(f"warning: {m}"))
            dgd = next(key_of(o) for o in stack_objects(lock, namespace).objects if o["kind"] == DGD_KIND)
            res = cluster.resource_for(dgd.group_kind)
            if res is None:
                raise StackpinError(f"rack {rack.name}: the cluster does not serve {dgd.group_kind}")
            wait_ready(cluster, res, namespace, dgd.name, ready_s)
            note(f"{dgd.name} ready in {namespace}")
            _soak(cluster, lock, namespace, spec.gates.soak_seconds, note)
            return measure(endpoint_of(rack, namespace), lock, gate, trace, out_dir, label, note)
    finally:
        original = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the teardown short
        try:
            teardown(connect(rack) if connect else connect_rack(fleet, rack), lock, namespace, note)
        finally:
            signal.signal(signal.SIGINT, original)


def verify_cluster(base: Path, picks: Sequence[Path], fleet_path: Path, *, rack_name: str | None = None,
                   trace: Path | None = None, slo_text: str | None = None, options: VerifyOptions | None = None,
                   scratch_prefix: str = "stackpin-verify", allow_stand_ins: bool = False,
                   connect: Connect | None = None, on_note: Note | None = None) -> Verification:
    """Lock and engine-check the base and `picks`, then deploy, measure and tear down each in turn (the base
    first) on the fleet's rack, judge each pick against the base, rank; write each pick's lock, results and
    record. The base failing to deploy or measure is BaseRefused (exit 1): nothing can be judged against it."""
    from stackpin.bench.resultfile import read_evidence
    from stackpin.rollout.benchgate import pinned_slo
    from stackpin.rollout.fleet import load_fleet

    note = on_note or (lambda _: None)
    options = options or VerifyOptions()
    fleet = load_fleet(fleet_path)
    rack = chosen_rack(fleet, rack_name)
    endpoint_of(rack, "x")  # no endpoint: refused before anything is locked or deployed
    gate, trace_path = bench_gate(fleet, options.runs, trace, slo_text)
    checked_base, checked = check_all(base, picks, options, note)
    assert checked_base.lock is not None
    gate = pinned_slo(gate, checked_base.lock)  # every stack held to the base's SLO (bench compare needs one)
    where = f"cluster {rack.name}"
    slo = None if gate.slo in (None, "none") else gate.slo
    assert checked_base.lock_path is not None
    base_dir = checked_base.lock_path.with_name(checked_base.lock_path.name.removesuffix(".lock.yaml") + ".results")
    base_dir.mkdir(parents=True, exist_ok=True)
    for stale in base_dir.glob("base-*.json"):
        stale.unlink()
    try:
        base_files = deploy_and_measure(fleet, rack, checked_base, f"{scratch_prefix}-0", gate, trace_path, base_dir,
                                        "base", prefixed(note, f"base {scratch_prefix}-0: "),
                                        allow_stand_ins=allow_stand_ins, connect=connect)
    except StackpinError as exc:
        raise BaseRefused(f"{base}: the base could not be measured on rack {rack.name}: {' '.join(exc.lines())}",
                          "nothing can be judged against it") from None
    base_results = [read_evidence(p) for p in base_files]
    records: list[tuple[Path, PickVerification]] = []
    for index, pick in enumerate(checked, 1):
        record_path, namespace = pick_files(pick.profile)[2], f"{scratch_prefix}-{index}"
        if pick.refused:
            records.append((record_path, unmeasured(pick, checked_base, where, str(trace_path), slo, options,
                                                    Outcome.refused, pick.problems)))
            continue
        record = unmeasured(pick, checked_base, where, str(trace_path), slo, options, Outcome.failed, (), namespace)
        record = record.model_copy(update={"base_results": [str(p) for p in base_files]})
        results = fresh_results(pick.profile)
        try:
            files = deploy_and_measure(fleet, rack, pick, namespace, gate, trace_path, results, "pick",
                                       prefixed(note, f"pick {namespace}: "), allow_stand_ins=allow_stand_ins,
                                       connect=connect)
            comparison = compare(base_results, [read_evidence(p) for p in files], threshold=options.threshold)
        except StackpinError as exc:
            problem = " ".join(" ".join(exc.lines()).split())
            note(f"pick {pick.profile}: failed on rack {rack.name}: {problem}")
            records.append((record_path, record.model_copy(update={"problems": [problem]})))
            continue
        record = record.model_copy(update={"pick_results": [str(p) for p in files]})
        records.append((record_path, judged(record, comparison)))
    out = ranked(records)
    write_records(out)
    return Verification(base, where, out)
