"""Bad input gets one clear error and exit 2, never a traceback or a silent acceptance (issue 18, section 4).

Each case is a reproduction from issue 18: a value that used to be accepted or to crash."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stackpin.bench.result import result_json
from stackpin.cli.main import main
from tests.helpers import ROOT

LOCK = str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")


@pytest.mark.parametrize("args", [
    ["sim", "serve", LOCK, "--speed", "nan"],
    ["sim", "serve", LOCK, "--speed", "inf"],
    ["plan", "--agents", "100", "--slo", "tps=80,ttft=10s", "--gain", "nan", "r.json"],
    ["plan", "--agents", "100", "--slo", "tps=80,ttft=10s", "--gain", "-inf", "r.json"],
    ["plan", "--agents", "100", "--slo", "tps=nan,ttft=10s", "r.json"],
    ["plan", "--agents", "100", "--slo", "tps=inf,ttft=10s", "r.json"],
    ["lock", LOCK, "--timeout", "nan"],
    ["sim", "curve", LOCK, "--at", "nan"],
], ids=["speed-nan", "speed-inf", "gain-nan", "gain-minus-inf", "slo-tps-nan", "slo-tps-inf", "timeout-nan",
        "curve-at-nan"])
def test_nan_and_infinity_are_refused_by_every_float_option(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "not a finite number" in result.stderr or "tps must be > 0" in result.stderr


@pytest.mark.parametrize("args", [
    ["trace", "gen", "--sessions", "2", "--out", "MISSING/t.jsonl"],
    ["autotune", "capture-job", LOCK, "--out", "MISSING/jobs.yaml"],
], ids=["trace-gen", "capture-job"])
def test_a_missing_output_directory_is_an_error_and_is_never_created(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "nonexistent"
    result = CliRunner().invoke(main, [a.replace("MISSING", str(missing)) for a in args])
    assert result.exit_code == 2, result.output
    assert f"{missing} is not a directory" in result.stderr and "Traceback" not in result.output
    assert not missing.exists()


@pytest.mark.parametrize("base", ["../../../../../../../../etc/passwd", "/etc/hostname"])
def test_extends_outside_the_profiles_tree_is_refused(tmp_path: Path, base: str) -> None:
    profile = tmp_path / "stacks" / "p.yaml"
    profile.parent.mkdir()
    profile.write_text(f"extends: {base}\n")
    result = CliRunner().invoke(main, ["validate", str(profile)])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert f"{profile}:1:1: extends: base profile {base!r} is outside the profile's directory" in line
    assert "root:" not in result.output  # nothing of the file it named was read out


# --- bench results are verified on every read (issue 18, section 2) ---------------------------------------

def _result_file(tmp_path: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    from tests.benchdata import exact

    result = exact("a", [(1, 600.0, 0.5, 600.0), (8, 120.0, 1.0, 900.0)])
    data = json.loads(result_json(result))
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data, allow_nan=True).replace('"HUGE"', "1e400"))
    return path


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
    return edit


EDITS = {
    "fingerprint": (_set("fingerprint", "x"), "fingerprint is not the sha256 of the controls"),
    "edited control": (_set("controls.precision", "bf16-edited"), "fingerprint is not the sha256 of the controls"),
    "nan throughput": (_set("points.0.output_tps_per_gpu", float("nan")), "NaN is not a number a result can hold"),
    "infinite throughput": (_set("points.0.output_tps", float("inf")), "Infinity is not a number a result can hold"),
    "negative throughput": (_set("points.1.output_tps_per_gpu", -5.0), "points.1.output_tps_per_gpu"),
    "negative duration": (_set("points.0.duration_s", -1.0), "points.0.duration_s"),
    "cache hit rate -1": (_set("points.0.cache_hit_rate", -1.0), "points.0.cache_hit_rate"),
    "cache hit rate 1e30": (_set("points.0.cache_hit_rate", 1e30), "points.0.cache_hit_rate"),
    "huge exponent": (_set("points.0.output_tps", "HUGE"), "points.0.output_tps"),
    "percentiles out of order": (_set("points.0.ttft_s.p50", 99.0), "percentiles must rise"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
@pytest.mark.parametrize("command", ["compare", "plan"])
def test_a_hand_edited_result_is_refused_naming_the_field(tmp_path: Path, case: str, command: str) -> None:
    edit, says = EDITS[case]
    path = _result_file(tmp_path, edit)
    args = (["bench", "compare", str(path), str(path)] if command == "compare" else
            ["plan", "--agents", "100", "--slo", "tps=80,ttft=10s", str(path)])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert str(path) in line and says in line, line


def _scaled(path: str, factor: float) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = node[last] * factor
    return edit


# Numbers edited consistently with every range check, but not with the request log they summarise.
LOGGED_EDITS = {
    "throughput doubled": (_scaled("points.2.output_tps", 2), "points.2.output_tps: is"),
    "per-GPU throughput": (_scaled("points.2.output_tps_per_gpu", 1.5), "points.2.output_tps_per_gpu: is"),
    "an agent's speed": (lambda d: d["points"][0].update(agent_tps_samples=[700.0]), "points.0.agent_tps_samples"),
    "TTFT percentiles": (lambda d: d["points"][3]["ttft_s"].update(p90=0.1, p50=0.1), "points.3.ttft_s"),
    "a logged request": (_scaled("points.1.request_log.0.output_tokens", 3), "not what its request log gives"),
    "the score": (_scaled("score.max_agents", 4), "score: is not what the points give"),
}


@pytest.mark.parametrize("case", sorted(LOGGED_EDITS))
@pytest.mark.parametrize("command", ["compare", "plan"])
def test_headline_figures_must_be_what_the_request_log_gives(tmp_path: Path, case: str, command: str) -> None:
    from stackpin.bench.stats import score
    from tests.benchdata import SLO, launch

    result = launch()
    result = result.model_copy(update={"score": score(result.points, SLO)})
    data = json.loads(result_json(result))
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(data))
    LOGGED_EDITS[case][0](data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    args = {"compare": ["bench", "compare"], "plan": ["plan", "--agents", "100", "--slo", "tps=80,ttft=10s"]}[command]
    assert CliRunner().invoke(main, [*args, str(clean), *([str(clean)] if command == "compare" else [])]).exit_code == 0
    outcome = CliRunner().invoke(main, [*args, str(path), *([str(clean)] if command == "compare" else [])])
    assert outcome.exit_code == 2, outcome.output
    [line] = outcome.stderr.splitlines()
    assert str(path) in line and LOGGED_EDITS[case][1] in line, line


@pytest.mark.parametrize("special", ["fifo", "directory"])
def test_a_result_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path: Path, special: str) -> None:
    path = tmp_path / "r.json"
    os.mkfifo(path) if special == "fifo" else path.mkdir()
    result = CliRunner().invoke(main, ["bench", "compare", str(path), str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.parametrize(("content", "says"), [
    (b"apiVersion: v1\x07\n", "unacceptable character"),
    (b"contexts: 5\ncurrent-context: x\n", "cannot be read"),
    (b"[[[[", "cannot be read"),
    (None, "not a regular file"),
], ids=["control-character", "contexts-not-a-list", "not-yaml", "fifo"])
def test_a_hostile_kubeconfig_is_one_line_before_any_connection(tmp_path: Path, content: bytes | None,
                                                                says: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is None:
        os.mkfifo(kubeconfig)  # read whole, it would block for ever
    else:
        kubeconfig.write_bytes(content)
    result = CliRunner().invoke(main, ["status", "dsv41-flash", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: kubeconfig {kubeconfig}: ") and says in line


def _wheel(path: Path, metadata: bytes, arg_utils: bytes = b"x = 1\n") -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("vllm-9.9.9.dist-info/METADATA", metadata)
        archive.writestr("vllm/engine/arg_utils.py", arg_utils)
        archive.writestr("vllm/__init__.py", b"")
    return path


@pytest.mark.parametrize(("metadata", "arg_utils", "says"), [
    (b"Metadata-Version: 2.1\nName: vllm\nVersion: ../../../../x\n", b"x = 1\n", "is not a PEP 440 version"),
    (b"Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\nSummary: \xff\xfe\n", b"x = 1\n", "is not UTF-8"),
    (b"Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n", b"def (:\n", "does not parse"),
], ids=["version-traversal", "metadata-not-utf8", "arg-utils-unparseable"])
def test_a_hostile_engine_package_is_one_line_and_writes_nothing(tmp_path: Path, metadata: bytes, arg_utils: bytes,
                                                                 says: str) -> None:
    wheel = _wheel(tmp_path / "vllm-9.9.9-py3-none-any.whl", metadata, arg_utils)
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    result = CliRunner().invoke(main, ["engines", "add", "--from", str(wheel), "--catalog", str(catalog)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    [line] = result.stderr.splitlines()
    assert says in line
    assert list(catalog.rglob("*")) == [] and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(("line", "says"), [
    ('{"session_id": "s", "input_length": 10, "output_length": 5, "hash_ids": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "levels deep, more than the 100 read"),
    ('{"session_id": "s", "input_length": ' + "9" * 5000 + ', "output_length": 5}', "not a trace entry"),
    ('{"session_id": "s", "input_length": ' + str(10**30) + ', "output_length": 5}',
     "input_length: must be an integer"),
    ('{"session_id": "s", "input_length": 10, "output_length": 5, "hash_ids": [' + str(2**64) + "]}", "hash_ids"),
], ids=["deep-hash-ids", "5000-digits", "10**30-tokens", "huge-hash-id"])
@pytest.mark.parametrize("command", ["stats", "import"])
def test_a_hostile_trace_is_one_located_line(tmp_path: Path, line: str, says: str, command: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(line + "\n")
    args = ["trace", "stats", str(trace)] if command == "stats" else [
        "trace", "import", str(trace), "--out", str(tmp_path / "out.jsonl")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    [error] = result.stderr.splitlines()
    assert f"{trace}:1:" in error and says in error
    assert not (tmp_path / "out.jsonl").exists()


def test_a_trace_that_is_a_fifo_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    result = CliRunner().invoke(main, ["trace", "stats", str(fifo)])
    assert result.exit_code == 2 and "not a regular file" in result.stderr


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_validate_refuses_what_is_not_a_regular_file_without_reading_it(tmp_path: Path, special: str) -> None:
    path = special
    if special == "fifo":
        os.mkfifo(tmp_path / "p.yaml")
        path = str(tmp_path / "p.yaml")
    result = CliRunner().invoke(main, ["validate", path])
    assert result.exit_code == 2 and result.stderr == f"error: {path}: is not a regular file, expected a YAML file\n"


# --- no write leaves the named output tree (issue 18, section 4) ------------------------------------------

def test_promote_never_writes_through_a_linked_history_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "history" / "dynamo").mkdir(parents=True)
    (tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72").symlink_to(outside)
    result = CliRunner().invoke(main, ["promote", LOCK, "-m", "x", "--history", str(tmp_path / "history"),
                                       "--deployments", str(tmp_path / "deployments")])
    assert result.exit_code == 2 and "is a symbolic link" in result.stderr, result.output
    assert list(outside.iterdir()) == []


def test_promote_never_writes_through_a_linked_deployments_namespace(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "deployments").mkdir()
    (tmp_path / "deployments" / "dynamo").symlink_to(outside)
    result = CliRunner().invoke(main, ["promote", LOCK, "-m", "x", "--history", str(tmp_path / "history"),
                                       "--deployments", str(tmp_path / "deployments")])
    assert result.exit_code == 2 and "is a symbolic link" in result.stderr, result.output
    assert list(outside.iterdir()) == []
    assert not list((tmp_path / "history").rglob("*.yaml"))  # the revision was taken back


def test_render_never_writes_or_removes_through_a_linked_stack_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.yaml").write_text("# Generated by `stackpin render` from somewhere\n")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "gb300-tuned").symlink_to(outside)
    result = CliRunner().invoke(main, ["render", LOCK, "--output-dir", str(manifests)])
    assert result.exit_code == 2 and "is a symbolic link" in result.stderr, result.output
    assert [p.name for p in outside.iterdir()] == ["keep.yaml"]


def test_bench_compare_resamples_are_bounded(tmp_path: Path) -> None:
    path = _result_file(tmp_path, lambda _: None)
    result = CliRunner().invoke(main, ["bench", "compare", str(path), str(path), "--resamples", "1000000000"])
    assert result.exit_code == 2 and "--resamples" in result.stderr


# --- the simulator's HTTP server: every malformed request a 4xx, the connection closed in time ----------

def _exchange(url: str, raw: bytes, timeout: float = 10.0) -> bytes:
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            answer += chunk
    return answer


def _post(body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize(("raw", "status"), [
    (_post(b'{"messages": [{"role": "user", "content": [{"text": 5}]}], "max_tokens": 4}'), b"400"),
    (_post(b'{"messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"), b"400"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: \xc2\xb2\r\n\r\nxx", b"400"),
    (_post(b"{}", b"Content-Length: 2\r\n"), b"400"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n", b"400"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{}", b"408"),
], ids=["text-not-a-string", "deep-json", "superscript-length", "two-lengths", "huge-length", "short-body"])
def test_a_malformed_request_gets_a_4xx_and_the_connection_closes(raw: bytes, status: bytes,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import stackpin.sim.server as server
    from stackpin.sim.server import serve_in_thread

    monkeypatch.setattr(server, "READ_TIMEOUT_S", 1.0)
    with serve_in_thread(Path(LOCK), speed=50) as sim:
        answer = _exchange(sim.url, raw)
        alive = _exchange(sim.url, b"GET /stackpin/sim HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert alive.startswith(b"HTTP/1.1 200")  # and the server is still there for the next one
