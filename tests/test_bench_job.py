"""`stackpin bench job` renders a valid Indexed Job whose pods' command really runs (here: each pod's
arguments, taken from the rendered Job, run against a loopback server), and `bench merge` combines
the pods' results or refuses parts that are not one run's."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from stackpin.bench.result import controls_fingerprint, result_json
from stackpin.bench.resultfile import read_result
from stackpin.cli.main import main
from tests.sse_server import Server, serve_in_thread
from tests.test_bench_run import write_trace

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"


def cli(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


def render(tmp_path: Path, trace: Path, *extra: str) -> list[dict[str, object]]:
    out = tmp_path / "job.yaml"
    code, _, err = cli(["bench", "job", "--lock", str(LOCK), "--endpoint", "http://frontend:8000", "--trace",
                        str(trace), "--pods", "2", "--image", "registry.example/stackpin:0.1", "--agents", "1,3",
                        "--slo", "tps=1,ttft=10s", "--out", str(out), *extra])
    assert code == 0, err
    code, _, err = cli(["validate", "--manifests", str(out)])
    assert code == 0, err  # Kubernetes' own schemas
    return [d for d in yaml.safe_load_all(out.read_text()) if d]


def test_the_job_is_indexed_valid_and_deterministic(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=3, turns=2)
    config, claim, job = render(tmp_path, trace)
    first = (tmp_path / "job.yaml").read_bytes()
    render(tmp_path, trace)
    assert (tmp_path / "job.yaml").read_bytes() == first
    assert job["kind"] == "Job" and claim["kind"] == "PersistentVolumeClaim" and config["kind"] == "ConfigMap"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    container = spec["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/stackpin:0.1"
    args = container["args"]
    assert args[args.index("--pod-index") + 1] == "$(JOB_COMPLETION_INDEX)"
    assert [e["name"] for e in container["env"]] == ["JOB_COMPLETION_INDEX", "STACKPIN_RUN"]
    assert args[args.index("--cache-salt") + 1] == "$(STACKPIN_RUN)"
    assert config["data"]["trace.jsonl"] == trace.read_text()
    assert "stackDigest" in config["data"]["stack.lock.yaml"]
    _, job_only = render(tmp_path, trace, "--results-claim", "shared-results")
    volumes = job_only["spec"]["template"]["spec"]["volumes"]
    assert {"name": "results", "persistentVolumeClaim": {"claimName": "shared-results"}} in volumes


def run_pods(tmp_path: Path, trace: Path, url: str, *extra: str) -> list[Path]:
    """Run each pod's container arguments as rendered (with `extra` bench job options), with the ConfigMap's
    files and the results volume on local paths, against `url` (the frontend's address, wherever it is named)."""
    config, _, job = render(tmp_path, trace, *extra)
    inputs, results = tmp_path / "inputs", tmp_path / "results"
    inputs.mkdir(exist_ok=True)
    results.mkdir(exist_ok=True)
    for name, text in config["data"].items():
        (inputs / name).write_text(text)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    outs = []
    for index in range(job["spec"]["completions"]):
        local = {"$(JOB_COMPLETION_INDEX)": str(index), "$(STACKPIN_RUN)": "job-uid",
                 "/stackpin/inputs": str(inputs), "/stackpin/results": str(results), "http://frontend:8000": url}
        pod_args = []
        for arg in args:
            for name, value in local.items():
                arg = arg.replace(name, value)
            pod_args.append(arg)
        code, _, err = cli(pod_args)
        assert code == 0, err
        outs.append(results / f"result-{index}.json")
    return outs


def test_pods_run_their_agents_and_merge_into_one_result(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=3, turns=2)
    with serve_in_thread(Server()) as server:
        parts = run_pods(tmp_path, trace, server.url)
    zero, one = (read_result(p) for p in parts)
    assert zero.shard is not None and (zero.shard.index, zero.shard.count) == (0, 2)
    assert {r.agent for p in zero.points for r in p.request_log} == {0, 2}
    assert {r.agent for p in one.points for r in p.request_log} == {1}
    assert zero.score is None  # a pod alone does not score
    code, out, err = cli(["bench", "merge", *map(str, parts), "--out", str(tmp_path / "merged.json"), "-o", "json"])
    assert code == 0, err
    merged = read_result(tmp_path / "merged.json")
    assert merged.shard is None and not merged.interrupted
    three = next(p for p in merged.points if p.agents == 3)
    assert sorted({r.agent for r in three.request_log}) == [0, 1, 2] and len(three.agent_tps_samples) == 3
    assert three.requests == sum(p.requests for r in (zero, one) for p in r.points if p.agents == 3)
    assert merged.score is not None and merged.score.max_agents == 3
    assert json.loads(out)["points"][1]["agents"] == 3


def test_merge_refuses_parts_of_other_runs(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", sessions=3, turns=1)
    with serve_in_thread(Server()) as server:
        zero, one = run_pods(tmp_path, trace, server.url)
    merged = tmp_path / "merged.json"
    code, _, err = cli(["bench", "merge", str(zero), "--out", str(merged)])
    assert code == 2 and "give each of 0..1" in err and not merged.exists()
    code, _, err = cli(["bench", "merge", str(zero), str(zero), "--out", str(merged)])
    assert code == 2 and "give each of 0..1" in err
    other = read_result(one)
    changed = other.model_copy(update={"controls": other.controls.model_copy(update={"precision": "fp8"})})
    other_run = changed.model_copy(update={"fingerprint": controls_fingerprint(changed.controls)})
    (tmp_path / "other.json").write_text(result_json(other_run))
    code, _, err = cli(["bench", "merge", str(zero), str(tmp_path / "other.json"), "--out", str(merged)])
    assert code == 2 and "precision: fp8-fp4 vs fp8" in err and not merged.exists()


def test_the_pods_read_draft_acceptance_where_metrics_say_and_merge_keeps_one_reading(tmp_path: Path) -> None:
    """`--metrics` reaches every pod's `bench run`; each pod reads the engines' spec-decode counters around its
    share of a point (here stackpin's simulator of the tuned stack, which serves vLLM's counters), and the merged
    result keeps one reading a point: the pods' readings overlap (all pods' drafts over one pod's time)."""
    from stackpin.sim.server import serve_in_thread as serve_sim

    trace = write_trace(tmp_path / "t.jsonl", sessions=3, turns=2)
    _, _, job = render(tmp_path, trace, "--metrics", "http://frontend:8000/metrics", "--metrics",
                       "http://decode-0:9090/metrics")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--metrics"] == [
        "http://frontend:8000/metrics", "http://decode-0:9090/metrics"]
    code, _, err = cli(["bench", "job", "--lock", str(LOCK), "--endpoint", "http://frontend:8000", "--trace",
                        str(trace), "--pods", "2", "--image", "x", "--metrics", "file:///etc/passwd"])
    assert code == 2 and err.count("\n") == 1 and "--metrics 'file:///etc/passwd'" in err, err
    with serve_sim(LOCK, speed=4, share=18) as sim:
        parts = run_pods(tmp_path, trace, sim.url, "--metrics", "http://frontend:8000/metrics")
    for part in map(read_result, parts):
        assert all(p.acceptance is not None and p.acceptance.drafts > 0 for p in part.points), part.acceptance_from
    code, _, err = cli(["bench", "merge", *map(str, parts), "--out", str(tmp_path / "merged.json")])
    assert code == 0, err
    merged, pods = read_result(tmp_path / "merged.json"), [read_result(p) for p in parts]
    for point in merged.points:
        readings = [q.acceptance for r in pods for q in r.points if q.agents == point.agents]
        assert point.acceptance in readings  # one pod's reading, not their sum
