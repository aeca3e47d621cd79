"""Every reader of a file or request stackpin did not write, fed what hypothesis makes of it (issue 18,
section 5): a revision, a bench result, a trace, a kubeconfig, an engine package, the simulator's request
body, a revision's signature and an allowed-signers file. Each must answer with its own one-line error or a
value, never a traceback, and never hang (each call runs on data in memory or a small file, so a hang would
stall the test)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stackpin.errors import StackpinError

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=4), max_leaves=25)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _mutated(base: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """`base` with the value at `path` (as far as it reaches) replaced: shapes close to a valid file."""
    out = json.loads(json.dumps(base))
    node: Any = out
    for key in path[:-1]:
        if isinstance(node, dict) and key in node:
            node = node[key]
    if isinstance(node, dict) and path:
        node[path[-1]] = value
    return out


@FUZZ
@given(data=st.binary(max_size=400) | JSON.map(lambda v: json.dumps(v).encode()))
def test_a_revision_file(tmp_path: Path, data: bytes) -> None:
    from stackpin.history.model import DeploymentKey, read_revision

    path = tmp_path / "000001.yaml"
    path.write_bytes(data)
    try:
        read_revision(path, DeploymentKey(namespace="dynamo", name="d", platform="gb300-nvl72"), 1)
    except StackpinError:
        pass


@FUZZ
@given(where=st.sampled_from([["fingerprint"], ["points", "x"], ["controls", "agents"], ["stack", "gpus"],
                              ["score"], ["client", "workers"], ["points"]]), value=JSON)
def test_a_bench_result(tmp_path: Path, where: list[str], value: Any) -> None:
    from stackpin.bench.result import result_json
    from stackpin.bench.resultfile import read_result
    from tests.benchdata import exact

    base = json.loads(result_json(exact("a", [(1, 600.0, 0.5, 600.0)])))
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_mutated(base, where, value)))
    try:
        read_result(path)
    except StackpinError:
        pass


@FUZZ
@given(lines=st.lists(JSON.map(json.dumps) | st.text(max_size=60), min_size=1, max_size=5))
def test_a_trace(tmp_path: Path, lines: list[str]) -> None:
    from stackpin.bench.traceio import read_trace

    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    try:
        read_trace(path)
    except StackpinError:
        pass


@FUZZ
@given(doc=JSON | st.dictionaries(st.sampled_from(["apiVersion", "clusters", "contexts", "users", "current-context"]),
                                  JSON, max_size=5))
def test_a_kubeconfig(tmp_path: Path, doc: Any) -> None:
    import yaml

    from stackpin.deploy.kube import connect

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    try:
        connect(str(path), None)
    except StackpinError:
        pass


@FUZZ
@given(metadata=st.binary(max_size=200), source=st.binary(max_size=200))
def test_an_engine_package(tmp_path: Path, metadata: bytes, source: bytes) -> None:
    from stackpin.engines.add import extract
    from stackpin.engines.package import read_package

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("vllm-1.0.0.dist-info/METADATA", b"Name: vllm\nVersion: 1.0.0\n" + metadata)
        archive.writestr("vllm/engine/arg_utils.py", source)
    path = tmp_path / "vllm-1.0.0-py3-none-any.whl"
    path.write_bytes(buffer.getvalue())
    try:
        extract(read_package(path))
    except StackpinError:
        pass


@FUZZ
@given(body=JSON.map(lambda v: json.dumps({"messages": v, "max_tokens": 4}).encode()) | st.binary(max_size=200))
def test_the_simulators_request_body(body: bytes) -> None:
    from stackpin.sim.server import _parse_chat

    try:
        _parse_chat(body)
    except ValueError:
        pass


ARMOR = st.binary(max_size=300).map(
    lambda raw: ("-----BEGIN SSH SIGNATURE-----\n" + __import__("base64").b64encode(b"SSHSIG" + raw).decode()
                 + "\n-----END SSH SIGNATURE-----\n").encode())


@FUZZ
@given(signature=st.binary(max_size=300) | ARMOR)
def test_a_revision_signature(tmp_path: Path, signature: bytes) -> None:
    from datetime import UTC, datetime

    from stackpin.history.signing import AllowedSigners, load_allowed_signers

    signers = tmp_path / "allowed_signers"
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDvTEFGOq9QVFk2DY0xm81OdJ+MEWcAnm8fkZ26Zug6c"
    signers.write_text(f"*@example.org {key}\n")
    allowed: AllowedSigners = load_allowed_signers(signers)
    try:
        allowed.verify(b"revision bytes", signature, "ada@example.org", datetime(2026, 1, 1, tzinfo=UTC))
    except StackpinError:
        return
    raise AssertionError("a made-up signature verified")


@FUZZ
@given(text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_an_allowed_signers_file(tmp_path: Path, text: str) -> None:
    from stackpin.history.signing import load_allowed_signers

    path = tmp_path / "allowed_signers"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        load_allowed_signers(path)
    except StackpinError:
        pass
