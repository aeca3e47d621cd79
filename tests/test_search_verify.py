"""Every pick checked before it is offered (stackpin/search/verify*.py): the base and the picks locked against
the demo mirror's stand-ins, each through the pinned vLLM's own engine check (.enginecheck/, on CPU), then
measured against the base: on the Dynamo bed (NVIDIA Dynamo 1.6.1's frontend, KV router and mocker from
.dynamobed/), or deployed in turn into scratch namespaces of a real kube-apiserver (devkit/fleetbed.py).

What stands in on the cluster (no operator, no controller manager, no GPUs): devkit/fleetbed.py's operator
stand-in marks each DynamoGraphDeployment ready, its garbage collector finishes foreground deletions;
`_NamespaceController` below finishes a scratch namespace's deletion once it is empty, as
kube-controller-manager's namespace controller does; the rack's endpoint (`http://127.0.0.1:PORT/{namespace}`)
is `_Gateway`, which serves each namespace's live stack on stackpin's simulator (devkit/livesim.py), as a
gateway routing to the scratch namespace's Dynamo frontend would.

The picks: `numSpeculativeTokens: 3` and `maxNumSeqs: 32` (both start in vLLM as declared), and the worker's
`engineArgs: {--max-num-active-seqs: 128}`, an engine argument validate does not model, which vLLM 0.31.0 refuses
above the pool's maxNumSeqs of 64 (config/scheduler.py:336-343). The engine check refuses it, in vLLM's own
words. Tests that measure run beside a CPU burner.
"""

from __future__ import annotations

import http.client
import os
import shutil
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.demorun import short_trace_text
from devkit.envtest import Envtest
from devkit.fleetbed import FleetBed
from stackpin.bench.controlled import BenchControls
from stackpin.bench.resultfile import read_result
from stackpin.bench.sessions import read_trace
from stackpin.bench.tracegen import default_shape, generate, render
from stackpin.demo.mirror import build_demo_mirror
from stackpin.profile.loader import load_profile
from stackpin.search.verify import (
    BaseRefused,
    Outcome,
    PickVerification,
    VerifyOptions,
    ranked,
)
from stackpin.upgrade.trial import LockOptions
from tests.helpers import cpu_burners
from tests.kube import fleet_or_skip
from tests.ownenv import own_env

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"
ENGINE_PYTHON = Path(os.environ.get("STACKPIN_ENGINE_PYTHON", ROOT / ".enginecheck" / "vllm-0.31.0" / "bin" / "python"))
DYNAMO_ENV = Path(os.environ.get("STACKPIN_DYNAMO_ENV", ROOT / ".dynamobed" / "dynamo-1.6.1"))
REFUSED = ("worker: vLLM 0.31.0 fails at config: ValidationError: 1 validation error for SchedulerConfig",
           "max_num_active_seqs (128) cannot be greater than max_num_seqs (64).")
PICKS = {"spec3": "speculative:\n    numSpeculativeTokens: 3\n",
         "active": "placement:\n    pools:\n      worker:\n        engineArgs:\n          --max-num-active-seqs: 128\n",
         "seqs32": "placement:\n    pools:\n      worker:\n        maxNumSeqs: 32\n"}


@pytest.fixture(scope="module")
def engine() -> Path:
    return own_env(ENGINE_PYTHON, ROOT / ".enginecheck" / "UNAVAILABLE", "engine check", "engine-env",
                   "STACKPIN_REQUIRE_ENGINE_CHECK").absolute()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("mirror")
    build_demo_mirror(dest, [load_profile(BASE).profile])
    return dest


def _site(directory: Path, picks: list[str]) -> tuple[Path, list[Path]]:
    """The base profile and picks beside it, as `stackpin search` writes them (BASE.search-N.yaml)."""
    base = directory / "base.yaml"
    shutil.copy(BASE, base)
    paths = []
    for n, name in enumerate(picks, 1):
        path = directory / f"base.search-{n}.yaml"
        path.write_text(f"apiVersion: stackpin.dev/v1\nkind: StackProfile\nextends: base.yaml\nmetadata:\n"
                        f"  name: gb300-tuned\nspec:\n  {PICKS[name]}", encoding="utf-8")
        paths.append(path)
    return base, paths


def _options(directory: Path, mirror: Path, engine: Path, runs: int = 2) -> VerifyOptions:
    return VerifyOptions(lockdir=directory / "lockfiles", engine_python=engine, runs=runs, threshold=0.1,
                         lock=LockOptions(oci_layout=str(mirror / "oci"), hf_cache=str(mirror / "hf")))


def _refused_by_vllm(problems: list[str]) -> bool:
    """One problem: vLLM's own refusal, its first line and its words (pydantic's repr of the input follows)."""
    return len(problems) == 1 and problems[0].startswith(REFUSED[0]) and REFUSED[1] in problems[0]


def _read(path: Path) -> PickVerification:
    return PickVerification.model_validate_json(path.read_text(encoding="utf-8"))


# --- the Dynamo bed ------------------------------------------------------------------------------------------

def test_two_picks_verified_on_the_dynamo_bed_and_one_refused_by_the_engine(tmp_path: Path, mirror: Path,
                                                                          engine: Path) -> None:
    from stackpin.search.verify_bed import verify_bed
    from stackpin.upgrade.trialbed import DynamoBed

    dynamo = own_env(DYNAMO_ENV / "bin" / "python", ROOT / ".dynamobed" / "UNAVAILABLE", "Dynamo bed", "dynamo-env",
                     "STACKPIN_REQUIRE_DYNAMO").parent.parent
    base, picks = _site(tmp_path, ["spec3", "active", "seqs32"])
    # Short: 8 sessions of two or three turns, one agent, answers back to back (TTFT p90 cannot be judged on so
    # few requests: bench compare says so, and the outcome cannot be a pass).
    trace = tmp_path / "trace.jsonl"
    trace.write_text(render(generate(8, 1, default_shape().with_overrides(
        {"first_input.median": "800", "turn_input.median": "200", "output.median": "30", "output.min": "20",
         "output.max": "60", "turns.median": "2", "turns.max": "3", "delay_ms.median": "0", "delay_ms.max": "0"}))))
    controls = BenchControls(trace=read_trace(trace), agents=(1,), lag_limit_s=0.05)
    notes: list[str] = []
    with cpu_burners():
        done = verify_bed(base, picks, DynamoBed(env=str(dynamo), share=9), controls, str(trace),
                          options=_options(tmp_path, mirror, engine), on_note=notes.append)
    assert done.where == "dynamo bed"
    by_pick = {Path(r.pick).name: (path, r) for path, r in done.picks}
    assert sorted(by_pick) == ["base.search-1.yaml", "base.search-2.yaml", "base.search-3.yaml"]
    # The pick the engine refuses is dropped with the engine's own words, never benched.
    path, refused = by_pick["base.search-2.yaml"]
    assert refused.outcome is Outcome.refused and not refused.passed and refused.rank is None
    assert _refused_by_vllm(refused.problems), refused.problems
    assert refused.pick_results == [] and not list((tmp_path / "base.search-2.results").glob("*.json"))
    assert any(n.startswith(f"pick {picks[1]}: refused by engines check: {REFUSED[0]}") and REFUSED[1] in n
               for n in notes)
    # The two others benched against the base on the bed, alternated, two runs a side.
    for name in ("base.search-1.yaml", "base.search-3.yaml"):
        path, record = by_pick[name]
        assert _read(path) == record  # the record beside the pick is what was returned
        assert record.engine_check == ["ok worker: vllm 0.31.0"]
        assert [Path(p).name for p in record.base_results] == ["base-1.json", "base-2.json"]
        assert [Path(p).name for p in record.pick_results] == ["pick-1.json", "pick-2.json"]
        for side, digest in ((record.base_results, record.base_digest), (record.pick_results, record.stack_digest)):
            for result in map(read_result, map(Path, side)):
                assert result.stack.digest == digest
                assert result.simulation is not None and result.simulation.backend == "dynamo 1.6.1"
        assert record.measured_metric == "single-agent tok/s" and record.measured is not None
        assert record.outcome in (Outcome.inconclusive, Outcome.regression), record.problems
        assert not record.passed and record.rank is None  # inconclusive is never a pass
        if record.outcome is Outcome.inconclusive:
            assert any(p.startswith("TTFT p90 at 1 agent: too few valid requests") for p in record.problems)
    runs = [n.split(": ", 1)[1].split(":")[0] for n in notes if n.startswith(f"{picks[0]}: run ")]
    assert runs == ["run 1/2 base", "run 1/2 pick", "run 2/2 pick", "run 2/2 base"]  # ABBA
    # The refused pick comes after the measured ones.
    assert [Path(r.pick).name for _, r in done.picks][-1] == "base.search-2.yaml"


def _record(name: str, outcome: Outcome, measured: float | None) -> tuple[Path, PickVerification]:
    record = PickVerification(
        pick=name, base="base.yaml", where="dynamo bed", lock=None, stack_digest=None, base_lock="b.lock.yaml",
        base_digest="sha256:0", engine_check=[], outcome=outcome, passed=outcome.passed, problems=[], runs=2,
        trace="t.jsonl", slo=None, threshold=0.05, base_results=[], pick_results=[], metrics=[], main_metric=None,
        measured_metric="tok/s per GPU at the SLO", measured=measured, measured_text=None)
    return Path(name + ".verify.json"), record


def test_only_passed_picks_are_ranked_and_by_what_was_measured() -> None:
    """An inconclusive pick measured fastest is not ranked above, or among, those that passed."""
    order = ranked([_record("a", Outcome.no_change, 40.0), _record("b", Outcome.inconclusive, 90.0),
                    _record("c", Outcome.gain, 55.0), _record("d", Outcome.refused, None),
                    _record("e", Outcome.regression, 20.0), _record("f", Outcome.failed, None)])
    assert [(r.pick, r.rank) for _, r in order] == [("c", 1), ("a", 2), ("b", None), ("e", None), ("f", None),
                                                    ("d", None)]
    assert [r.passed for _, r in order] == [True, True, False, False, False, False]


# --- a real cluster (kube-apiservers) -------------------------------------------------------------------------

class _NamespaceController:
    """Stands in for kube-controller-manager's namespace controller on scratch namespaces: once one being
    deleted holds none of what apply writes (ConfigMaps, Leases, DynamoGraphDeployments, ComputeDomains), its
    `kubernetes` finalizer is removed (the finalize subresource) and the API server deletes it."""

    KINDS = ("/api/v1/namespaces/{ns}/configmaps", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
             "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments",
             "/apis/resource.nvidia.com/v1beta1/namespaces/{ns}/computedomains")

    def __init__(self, env: Envtest) -> None:
        self.env, self.stop = env, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            for ns in self.env.ok("GET", "/api/v1/namespaces?labelSelector=stackpin.dev%2Fscratch")["items"]:
                name = ns["metadata"]["name"]
                if not ns["metadata"].get("deletionTimestamp"):
                    continue
                if any(self.env.ok("GET", kind.format(ns=name))["items"] for kind in self.KINDS):
                    continue
                self.env.request("PUT", f"/api/v1/namespaces/{name}/finalize",
                                 {**ns, "spec": {"finalizers": []}})

    def __enter__(self) -> _NamespaceController:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)


class _Gateway:
    """http://127.0.0.1:PORT/NAMESPACE/...: each namespace's live stack (devkit.livesim, started on the first
    request for it) behind one address, as a gateway routing to a namespace's frontend would."""

    def __init__(self, env: Envtest, history: Path) -> None:
        self.env, self.history = env, history
        self.lives: dict[str, str] = {}
        self.lock = threading.Lock()
        self.stack = ExitStack()
        gateway = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._forward()

            def do_POST(self) -> None:  # noqa: N802
                self._forward()

            def _forward(self) -> None:
                _, namespace, rest = self.path.split("/", 2)
                target = urllib.parse.urlsplit(gateway.live(namespace))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=600)
                try:
                    upstream.request(self.command, "/" + rest, body=body or None,
                                     headers={k: v for k, v in self.headers.items()
                                              if k.lower() not in ("host", "connection", "content-length")})
                    answer = upstream.getresponse()
                    self.send_response(answer.status)
                    for name, value in answer.getheaders():
                        if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                            self.send_header(name, value)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while piece := answer.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                except (OSError, http.client.HTTPException):
                    self.close_connection = True
                finally:
                    upstream.close()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.server.daemon_threads = True

    def live(self, namespace: str) -> str:
        from devkit.livesim import serve_live

        with self.lock:
            if namespace not in self.lives:
                self.lives[namespace] = self.stack.enter_context(
                    serve_live(self.env.kubeconfig, namespace, "dsv41-flash", self.history, {}, share=18))
            return self.lives[namespace]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> _Gateway:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.stack.close()


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FleetBed, _Gateway]]:
    with fleet_or_skip(tmp_path_factory, ["rack-a"]) as bed, _NamespaceController(bed.envs[0]), \
            _Gateway(bed.envs[0], tmp_path_factory.mktemp("history")) as gateway:
        yield bed, gateway


def _fleet(directory: Path, env: Envtest, endpoint: str, ready_s: float = 60) -> Path:
    (directory / "agents.jsonl").write_text(short_trace_text(), encoding="utf-8")
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "stackpin.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "verify"},
        "spec": {"racks": [{"name": "rack-a", "kubeconfig": str(env.kubeconfig), "platform": "gb300-nvl72",
                            "endpoint": endpoint}],
                 "gates": {"ready": {"timeoutSeconds": ready_s}, "soakSeconds": 0.5,
                           "bench": {"trace": "agents.jsonl", "runs": 2, "threshold": "10%", "lagLimit": "50ms"}}}}),
        encoding="utf-8")
    return path


def _namespaces(env: Envtest, prefix: str) -> list[str]:
    return sorted(n["metadata"]["name"] for n in env.ok("GET", "/api/v1/namespaces")["items"]
                  if n["metadata"]["name"].startswith(prefix))


def test_picks_deployed_in_turn_into_scratch_namespaces_measured_and_gone(
        tmp_path: Path, mirror: Path, engine: Path, rack: tuple[FleetBed, _Gateway]) -> None:
    from stackpin.search.verify_cluster import verify_cluster

    bed, gateway = rack
    env = bed.envs[0]
    base, picks = _site(tmp_path, ["seqs32", "active"])
    fleet = _fleet(tmp_path, env, gateway.url + "/{namespace}")
    notes: list[str] = []
    with cpu_burners():
        done = verify_cluster(base, picks, fleet, options=_options(tmp_path, mirror, engine),
                              scratch_prefix="sv-ok", allow_stand_ins=True, on_note=notes.append)
    assert done.where == "cluster rack-a"
    # Each measured stack had a namespace of its own, created, ready, benched at its endpoint, then deleted.
    for ns in ("sv-ok-0", "sv-ok-1"):
        said = [n for n in notes if ns in n]
        assert any(n.endswith(f"namespace {ns}: created") for n in said), said
        assert any(f"dsv41-flash ready in {ns}" in n for n in said), said
        assert said[-1].endswith(f"namespace {ns}: deleted, gone"), said
    assert _namespaces(env, "sv-ok") == []  # all gone; the refused pick's never made
    assert not [n for n in notes if "sv-ok-2" in n]
    [(path, measured), (_, refused)] = done.picks
    assert refused.outcome is Outcome.refused and _refused_by_vllm(refused.problems) and refused.rank is None
    assert _read(path) == measured and measured.scratch_namespace == "sv-ok-1"
    assert measured.where == "cluster rack-a" and measured.slo is None  # one agent alone: none (compared_slo)
    assert [Path(p).name for p in measured.base_results] == ["base-1.json", "base-2.json"]
    assert [Path(p).name for p in measured.pick_results] == ["pick-1.json", "pick-2.json"]
    assert {read_result(Path(p)).stack.digest for p in measured.pick_results} == {measured.stack_digest}
    assert {read_result(Path(p)).stack.digest for p in measured.base_results} == {measured.base_digest}
    assert measured.outcome is not Outcome.refused and measured.outcome is not Outcome.failed
    assert measured.passed == (measured.outcome in (Outcome.gain, Outcome.no_change))
    assert (measured.rank == 1) == measured.passed


def test_a_pick_never_ready_fails_and_its_namespace_is_gone(tmp_path: Path, mirror: Path, engine: Path,
                                                              rack: tuple[FleetBed, _Gateway]) -> None:
    from stackpin.search.verify_cluster import verify_cluster

    bed, gateway = rack
    env = bed.envs[0]
    base, picks = _site(tmp_path, ["seqs32"])
    fleet = _fleet(tmp_path, env, gateway.url + "/{namespace}", ready_s=3)
    bed.operator.held.add((env.port, "sv-held-1"))  # the operator never reports the pick ready
    try:
        with cpu_burners():
            done = verify_cluster(base, picks, fleet, options=_options(tmp_path, mirror, engine),
                                  scratch_prefix="sv-held", allow_stand_ins=True)
    finally:
        bed.operator.held.discard((env.port, "sv-held-1"))
    [(_, record)] = done.picks
    assert record.outcome is Outcome.failed and not record.passed and record.rank is None
    [problem] = record.problems
    assert problem.startswith("timed out after 3s waiting for dynamographdeployment.nvidia.com/dsv41-flash in "
                              "namespace sv-held-1: not ready"), problem
    assert _namespaces(env, "sv-held") == []


def test_ctrl_c_mid_way_still_tears_the_namespace_down(tmp_path: Path, mirror: Path, engine: Path,
                                                       rack: tuple[FleetBed, _Gateway]) -> None:
    from stackpin.search.verify_cluster import verify_cluster

    bed, gateway = rack
    env = bed.envs[0]
    base, picks = _site(tmp_path, ["seqs32"])
    fleet = _fleet(tmp_path, env, gateway.url + "/{namespace}")
    seen: list[str] = []

    def note(message: str) -> None:
        seen.append(message)
        if "dsv41-flash ready in sv-int-1" in message:
            raise KeyboardInterrupt  # what Ctrl-C raises, once the pick is deployed and ready
        if "sv-int-1" in message and "created" in message:
            assert _namespaces(env, "sv-int") == ["sv-int-1"]  # the base's was gone before the pick's was made

    with pytest.raises(KeyboardInterrupt), cpu_burners():
        verify_cluster(base, picks, fleet, options=_options(tmp_path, mirror, engine), scratch_prefix="sv-int",
                       allow_stand_ins=True, on_note=note)
    assert seen[-1] == "pick sv-int-1: namespace sv-int-1: deleted, gone"
    assert _namespaces(env, "sv-int") == []
    assert not (tmp_path / "base.search-1.verify.json").exists()  # nothing judged: no record


def test_a_namespace_that_exists_is_never_used(tmp_path: Path, mirror: Path, engine: Path,
                                               rack: tuple[FleetBed, _Gateway]) -> None:
    from stackpin.search.verify_cluster import verify_cluster

    bed, gateway = rack
    env = bed.envs[0]
    env.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sv-taken-0"}})
    base, picks = _site(tmp_path, ["seqs32"])
    with pytest.raises(BaseRefused) as caught:
        verify_cluster(base, picks, _fleet(tmp_path, env, gateway.url + "/{namespace}"),
                       options=_options(tmp_path, mirror, engine), scratch_prefix="sv-taken", allow_stand_ins=True)
    assert "namespace sv-taken-0 exists already" in caught.value.message
    live: dict[str, Any] = env.ok("GET", "/api/v1/namespaces/sv-taken-0")
    assert not live["metadata"].get("deletionTimestamp")  # someone else's: left alone


# --- the CLI ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "said"), [
    (["--verify", "cluster"], "--verify cluster takes --fleet FLEET.yaml"),
    (["--verify", "bed", "--dry-run"], "--verify measures the picks it writes: not with --dry-run"),
])
def test_search_verify_usage_is_one_line_exit_2_nothing_written(tmp_path: Path, args: list[str], said: str) -> None:
    from click.testing import CliRunner

    from stackpin.cli.main import main

    base, _ = _site(tmp_path, [])
    (tmp_path / "trace.jsonl").write_text(short_trace_text(), encoding="utf-8")
    before = sorted(tmp_path.iterdir())
    run = CliRunner().invoke(main, ["search", str(base), "--slo", "tps=80,ttft=10s", "--trace",
                                    str(tmp_path / "trace.jsonl"), "--out", str(tmp_path / "out"), *args])
    assert run.exit_code == 2, run.output
    assert said in run.output and "Traceback" not in run.output
    assert sorted(tmp_path.iterdir()) == before
