"""JSON nesting bounded before decoding, in every reader of outside JSON (issue 37, item 2): files a user or
another tool wrote, server answers and subprocess output go through stackpin.jsonio, so JSON nested without
end is one line naming the file or URL (exit 2 from a CLI), never a RecursionError traceback. The other
readers (tests/test_bounded_reads.py) are the site catalog, the package index and GitHub."""

from __future__ import annotations

import ast
import json
import os
import stat
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.errors import InputError, ResolveError, StackpinError
from tests.helpers import ROOT, serve_http

DEEP = "[" * 200_000 + "]" * 200_000  # a RecursionError in json and msgspec alike
NESTED = "JSON nested 200000 levels deep, more than the 100 read"
SHALLOWER = "[" * 30_000 + "]" * 30_000  # as deadly, under the 64 KiB some readers take
NESTED_30K = "JSON nested 30000 levels deep, more than the 100 read"


def _one_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and (result.exception is None or isinstance(result.exception, SystemExit))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


# -- files a user or another tool wrote: the CLI says one line, exit 2 --


def test_a_deeply_nested_trace_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"input_length": 10, "output_length": 5}\n' + DEEP + "\n")
    line = _one_line(CliRunner().invoke(main, ["trace", "stats", str(trace)]))
    assert f"{trace}:2" in line and NESTED in line, line


def test_a_deeply_nested_result_file(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    result.write_text('{"points": ' + DEEP + "}")
    line = _one_line(CliRunner().invoke(main, ["bench", "plot", str(result), "--out", str(tmp_path / "out.png")]))
    assert str(result) in line and "JSON nested 200001 levels deep" in line, line
    assert not (tmp_path / "out.png").exists()


def test_a_deeply_nested_autotune_cache_file(tmp_path: Path) -> None:
    leaf = tmp_path / "flashinfer_autotune_cache" / "0.6.1" / "103a" / ("a" * 64)
    leaf.mkdir(parents=True)
    (leaf / "autotune_configs_dp0_rank0.json").write_text(DEEP)
    line = _one_line(CliRunner().invoke(main, ["autotune", "inspect", str(tmp_path)]))
    assert "autotune_configs_dp0_rank0.json" in line and NESTED in line, line


def test_deeply_nested_runtime_metadata(tmp_path: Path) -> None:
    from stackpin.autotune.verify import read_runtime_metadata

    path = tmp_path / "runtime.json"
    path.write_text(SHALLOWER)
    with pytest.raises(InputError, match=NESTED_30K) as caught:
        read_runtime_metadata(path)
    assert str(path) in str(caught.value)


def test_a_deeply_nested_probe_line() -> None:
    from stackpin.site.probe_runtime import PREFIX
    from stackpin.site.readings import parse_logs

    with pytest.raises(StackpinError, match=f"^pods.log:2: the probe line is not JSON \\({NESTED}\\)$"):
        parse_logs(f"starting\n{PREFIX}{DEEP}\n", "pods.log")


# -- registry credentials: the auth file and a credential helper's answer --


def test_a_deeply_nested_auth_file(tmp_path: Path) -> None:
    from stackpin.lock.oci.credentials import read_auth_file

    path = tmp_path / "config.json"
    path.write_text('{"auths": ' + DEEP + "}")
    with pytest.raises(ResolveError, match=f"registry credentials {path} are not valid JSON: JSON nested 200001"):
        read_auth_file(path)


def test_a_credential_helper_answering_deeply_nested_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stackpin.lock.oci.credentials import run_helper

    helper = tmp_path / "docker-credential-deep"
    (tmp_path / "answer").write_text(SHALLOWER)
    helper.write_text(f"#!/bin/sh\ncat >/dev/null\ncat {tmp_path / 'answer'}\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ResolveError, match="answered something that is not"):
        run_helper("deep", "registry.example", "credsStore")


# -- OCI documents: a user's layout, a mirror's index, a registry's manifest --


def test_a_deeply_nested_oci_layout_index(tmp_path: Path) -> None:
    from stackpin.lock.ocilayout import LayoutResolver

    (tmp_path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (tmp_path / "index.json").write_text('{"manifests": ' + DEEP + "}")
    with pytest.raises(ResolveError, match=f"^oci-layout {tmp_path}: index.json: JSON nested 200001"):
        LayoutResolver(tmp_path).entries()


def test_an_oci_layout_index_that_is_not_a_file_is_one_line(tmp_path: Path) -> None:
    from stackpin.lock.ocilayout import LayoutResolver

    (tmp_path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    os.mkfifo(tmp_path / "index.json")  # read_bytes() would block here for ever
    with pytest.raises(ResolveError, match="cannot read index.json: not a regular file"):
        LayoutResolver(tmp_path).entries()


def test_a_deeply_nested_mirror_index(tmp_path: Path) -> None:
    from stackpin.lock.mirror import LayoutDestination

    (tmp_path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (tmp_path / "index.json").write_text(DEEP)
    with pytest.raises(ResolveError, match=f"{tmp_path / 'index.json'}: {NESTED}"):
        LayoutDestination(tmp_path)._read_index()


def test_a_deeply_nested_manifest() -> None:
    from stackpin.lock.oci.media import parse_manifest

    with pytest.raises(ResolveError, match=f"^manifest x@sha256:0: {NESTED}$"):
        parse_manifest(DEEP.encode(), "manifest x@sha256:0")


# -- servers: the Hub, a bench endpoint, a benchmarked server's events, the simulator's clients --


@pytest.fixture(scope="module")
def deep_server() -> Iterator[str]:
    class Deep(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = DEEP.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serve_http(Deep) as url:
        yield url


def test_a_hub_answering_deeply_nested_json(deep_server: str) -> None:
    from stackpin.lock.resolvers import HubSource

    with pytest.raises(ResolveError, match=f"^{deep_server} gave no commit for org/model@main$"):
        HubSource(endpoint=deep_server, token=None).resolve("org/model", "main")


def test_a_bench_endpoint_answering_deeply_nested_json(deep_server: str) -> None:
    from stackpin.bench.replay import _get

    with pytest.raises(StackpinError, match=f"^--endpoint {deep_server}: {deep_server}/v1/models: {NESTED}$"):
        _get(deep_server, f"{deep_server}/v1/models", 5.0)


def test_a_deeply_nested_sse_event_and_error_body() -> None:
    from stackpin.bench.stream import Outcome, _error_message, _take

    outcome = Outcome(start=time.monotonic())
    _take(DEEP.encode(), time.monotonic(), outcome)
    assert outcome.error == f"bad SSE event: {DEEP[:60]!r}"
    assert _error_message(DEEP.encode()) == DEEP[:160]


def test_a_token_event_is_decoded_as_before() -> None:
    from stackpin.bench.stream import Outcome, _take

    outcome = Outcome(start=time.monotonic())
    event = {"choices": [{"delta": {"content": "w0 [w1] {w2}"}}], "usage": None}
    _take(json.dumps(event).encode(), time.monotonic(), outcome)
    assert outcome.error is None and outcome.first_token is not None


def test_the_simulator_refuses_a_deeply_nested_request_body() -> None:
    from stackpin.sim.server import _parse_chat

    with pytest.raises(ValueError, match=f"^body is {NESTED}$"):
        _parse_chat(DEEP.encode())


# -- JSON values inside profiles and DGDs: read as "not a JSON object", as a malformed one is --


def test_deeply_nested_json_values_in_profiles_and_dgds() -> None:
    from stackpin.imports.compare import _json_object as dgd_object
    from stackpin.imports.profile import _json
    from stackpin.validate.engineargs import _json_object as flag_object

    assert flag_object(DEEP) is None
    assert _json(DEEP) is None
    assert dgd_object('{"k": ' + DEEP + "}") is None


# -- no reader of outside JSON calls the decoder directly --

# Where stackpin still decodes JSON without jsonio: each one reads what stackpin itself wrote or ships, or
# is not yet converted (say which). A new direct call fails this test until it goes through jsonio or here.
DIRECT_DECODES = {
    "stackpin/jsonio.py": "jsonio itself, behind its nesting check",
    "stackpin/catalog/flags.py": "a site engine file: jsonio.check_depth first, then msgspec (half json's time)",
    "stackpin/yamlio.py": "the journal of a switch stackpin wrote itself",
    "stackpin/catalog/__init__.py": "the bundled catalog extract, built from stackpin's own package data",
    "stackpin/validate/manifests.py": "the bundled CRD and Kubernetes schemas (package data)",
    "stackpin/enginecheck/envbuild.py": "the bundled environments.json",
    "stackpin/enginecheck/check_runtime.py": "the spec stackpin writes for the check; it runs in the engine's "
                                             "own Python, where stackpin is not installed",
    "stackpin/enginecheck/check_runtime_sglang.py": "the spec stackpin writes for SGLang's check, and a round "
                                                    "trip of SGLang's own values; it runs in SGLang's Python",
    "stackpin/render/attest_runtime.py": "runs in the runtime image without stackpin; reads the expectation "
                                         "stackpin rendered and the cache files the pod mounts",
    "stackpin/sim/dynamo_helper.py": "runs in Dynamo's Python; reads the table the bed just wrote",
    "stackpin/imports/overrides.py": "values canonical_json wrote from a DGD already read (imports/dgd.py)",
    "stackpin/imports/roundtrip.py": "a deep copy through json.dumps of stackpin's own document",
    "stackpin/deploy/objects.py": "a copy of stackpin's own rendered objects through msgspec",
    "stackpin/deploy/applyset.py": "the cluster's record, decoded into its typed entries by msgspec after "
                                   "jsonio.check_depth",
    "stackpin/deploy/kube.py": "API server answers: not converted here, the cluster edge moves to the "
                               "kubernetes client (issue 37 item 3)",
}


def _direct_decodes(path: Path) -> list[int]:
    """Lines calling json.loads/json.load/msgspec.json.decode, or a `.json()` of an HTTP response."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, ast.unparse(node.func.value)
        if (owner == "json" and name in ("loads", "load")) or (owner == "msgspec.json" and name == "decode") \
                or (name == "json" and not node.args and not node.keywords):
            found.append(node.lineno)
    return found


def test_outside_json_goes_through_jsonio() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "stackpin").rglob("*.py"))
             if (lines := _direct_decodes(p))}
    unexplained = {path: lines for path, lines in found.items() if path not in DIRECT_DECODES}
    assert not unexplained, f"decode outside JSON with stackpin.jsonio.loads, or say why not here: {unexplained}"
    stale = sorted(set(DIRECT_DECODES) - set(found))
    assert not stale, f"no direct decode left in {stale}: take them off DIRECT_DECODES"


def test_a_deeply_nested_cluster_record_and_managed_field() -> None:
    # The record lives in a ConfigMap anyone with edit rights may write; a managed-fields key in a live object.
    from stackpin.deploy.applyset import _parse_record
    from stackpin.deploy.drift import _element
    from stackpin.deploy.kube import ClusterError

    with pytest.raises(ClusterError, match=f"configmap/x: revisions.json is not a stackpin record \\({NESTED}\\)"):
        _parse_record(DEEP, "configmap/x")
    assert _element("k:" + SHALLOWER) == f"[{SHALLOWER}]"  # shown as written, never decoded by recursion
