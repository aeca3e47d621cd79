"""The profile's spec.service is the SLO a stack is judged by when none is given: bench run and bench job
score against it, compare, plot and plan read it from the results."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from stackpin.bench.result import Slo
from stackpin.bench.resultfile import read_result
from stackpin.cli.main import main
from stackpin.lock.lockfile import read_lock
from tests import benchdata
from tests.sse_server import Server, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"


def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"session_id": f"s{i}", "input_length": 20, "output_length": 4}) + "\n"
                             for i in range(2)))
    return trace


def test_bench_run_scores_against_the_profiles_service_unless_told_otherwise(tmp_path: Path) -> None:
    service = read_lock(LOCK).stack_profile.spec.service
    runs = {}
    with serve_in_thread(Server()) as server:
        for name, extra in (("default", []), ("none", ["--slo", "none"]), ("given", ["--slo", "tps=5,ttft=2s"])):
            out = tmp_path / f"{name}.json"
            run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(_trace(tmp_path)),
                                            "--lock", str(LOCK), "--agents", "2", *extra, "--out", str(out)])
            assert run.exit_code == 0, run.output
            runs[name] = read_result(out)
    assert runs["default"].controls.slo == Slo(tps=service.per_agent_tok_s, ttft_s=service.ttft_seconds)
    assert runs["default"].score is not None and 1 in [p.agents for p in runs["default"].points]
    assert runs["none"].controls.slo is None and runs["none"].score is None
    assert runs["given"].controls.slo == Slo(tps=5, ttft_s=2)


def test_bench_job_states_the_slo_its_pods_score_by(tmp_path: Path) -> None:
    import yaml

    args = ["bench", "job", "--lock", str(LOCK), "--endpoint", "http://stack:8000", "--trace", str(_trace(tmp_path)),
            "--pods", "2", "--image", "registry.example/stackpin:1"]
    for extra, said in (([], "tps=80,ttft=10s,percentile=p90"), (["--slo", "none"], "none")):
        run = CliRunner().invoke(main, [*args, *extra])
        assert run.exit_code == 0, run.output
        job = next(o for o in yaml.safe_load_all(run.stdout) if o and o.get("kind") == "Job")
        argv = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert argv[argv.index("--slo") + 1] == said


def test_plan_reads_the_slo_the_results_were_benched_under(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    benchdata.write(benchdata.launch(), a)
    benchdata.write(benchdata.tuned(), b)
    implied = CliRunner().invoke(main, ["plan", "--agents", "1000", str(a), str(b)])
    given = CliRunner().invoke(main, ["plan", "--agents", "1000", "--slo", "tps=80,ttft=10s", str(a), str(b)])
    assert implied.exit_code == given.exit_code == 0, implied.output
    assert implied.stdout == given.stdout
    unscored = benchdata.exact("gb300-launch", [(1, 596.0, 0.5, 8.0), (64, 80.0, 2.0, 70.0)], slo=None)
    c = tmp_path / "c.json"
    benchdata.write(unscored, c)
    refused = CliRunner().invoke(main, ["plan", "--agents", "1000", str(a), str(c)])
    assert refused.exit_code == 2 and "do not share one SLO" in refused.output and "give --slo" in refused.output
