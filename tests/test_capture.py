"""`stackpin autotune capture-job`: the capture runs exactly the flags the stack serves with."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from stackpin.backends.vllm import serve_args as vllm_serve_args
from stackpin.cli.main import main
from stackpin.lock.lockfile import read_lock
from stackpin.render.build import build_objects
from stackpin.render.capture import capture_objects, dynamo_only_options
from stackpin.validate.manifests import validate_objects

ROOT = Path(__file__).resolve().parent.parent


def _lock(name: str):
    return read_lock(ROOT / "lockfiles" / f"{name}.lock.yaml")


def _serving_args(name: str) -> dict[str, list[str]]:
    dgd = build_objects(_lock(name))[0]
    return {c["name"]: c["podTemplate"]["spec"]["containers"][0]["args"] for c in dgd["spec"]["components"]
            if c["name"] != "frontend"}


def test_capture_objects_validate_for_every_shipped_stack() -> None:
    for path in sorted((ROOT / "lockfiles").glob("*.lock.yaml")):
        objects = capture_objects(read_lock(path))
        assert validate_objects([(path.name, o) for o in objects]) == []


def test_capture_runs_the_serving_flags_with_autotune_on() -> None:
    serving = _serving_args("gb300-tuned")["worker"]
    [_, job] = capture_objects(_lock("gb300-tuned"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    # Identical engine flags (vLLM hashes them into the cache path), minus Dynamo's own flags (`vllm serve`
    # would refuse the parsers and the disaggregation mode; vLLM's config never sees them).
    assert args == vllm_serve_args(tuple(serving), dynamo_only_options(_lock("gb300-tuned")))
    assert args[0] == "deepseek-ai/DeepSeek-V4.1-Flash" and "--disaggregation-mode" not in args
    assert "--dyn-tool-call-parser" in serving and not any(a.startswith("--dyn-") for a in args)
    dropped = [a for a in serving if a not in args and a != "--model"]
    assert dropped == ["--disaggregation-mode", "agg", "--dyn-tool-call-parser", "deepseek_v41",
                       "--dyn-reasoning-parser", "deepseek_v41"]
    assert "--no-enable-flashinfer-autotune" not in args
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["VLLM_CACHE_ROOT"] == "/cache" and "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR" not in env
    assert container["image"].startswith("nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:")
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == (
        "gb300-tuned-autotune-cache")


def test_multi_node_pool_becomes_an_indexed_job() -> None:
    objects = capture_objects(_lock("gb300-disagg-wide-ep"))
    kinds = [o["kind"] for o in objects]
    assert kinds == ["PersistentVolumeClaim", "Job", "Service", "Job", "ComputeDomain"]
    decode = objects[3]
    spec = decode["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 4
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == objects[2]["metadata"]["name"] == decode["metadata"]["name"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    # TP2 x DP8 over 4 nodes of 4 GPUs: 2 DP ranks per node.
    assert env["STACKPIN_DP_LOCAL"] == "2" and env["STACKPIN_NODES"] == "4"
    job = "gb300-disagg-wide-ep-autotune-decode"
    assert env["STACKPIN_LEADER"] == f"{job}-0.{job}.dynamo.svc"
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == objects[4]["spec"]["channel"][
        "resourceClaimTemplate"]["name"]
    # Never the serving stack's ComputeDomain (deleting the capture must not take it down).
    assert objects[4]["metadata"]["name"] == "gb300-disagg-wide-ep-autotune-compute-domain"
    term = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term == {"labelSelector": {"matchLabels": {"job-name": job}}, "topologyKey": "nvidia.com/gpu.clique"}


def test_cli_prints_yaml_and_refuses_a_stale_lock(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["autotune", "capture-job", str(ROOT / "lockfiles/gb300-tuned.lock.yaml")])
    assert ok.exit_code == 0
    assert [d["kind"] for d in yaml.safe_load_all(ok.output)] == ["PersistentVolumeClaim", "Job"]
    profile = tmp_path / "p.yaml"
    profile.write_text((ROOT / "profiles/deepseek-v4.1-flash/gb300-tuned.yaml").read_text()
                       .replace("agents: 1024", "agents: 1000"))
    stale = runner.invoke(main, ["autotune", "capture-job", "--lockdir", str(ROOT / "lockfiles"), str(profile)])
    assert stale.exit_code == 2 and "stale" in stale.output and "Traceback" not in stale.output


def test_multi_node_capture_runs_the_data_parallel_flags_the_operator_gives_served_pods(tmp_path: Path) -> None:
    """The capture script, run by bash with a stand-in `vllm` that records its argv (the engine itself needs
    GPUs): every node runs hybrid load balancing with its own start rank and the operator's RPC port 13445,
    as Dynamo's operator injects into the served pods (render/capture.py cites it); nobody runs headless."""
    import os
    import subprocess

    from stackpin.backends.vllm import CAPTURE_SCRIPT

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGV_OUT"\n')
    (bin_dir / "vllm").chmod(0o755)
    seen = {}
    for index in (0, 2):
        out = tmp_path / f"argv-{index}"
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_OUT": str(out), "JOB_COMPLETION_INDEX": str(index),
               "STACKPIN_NODES": "4", "STACKPIN_DP_LOCAL": "2", "STACKPIN_LEADER": "leader.svc",
               "STACKPIN_DP_RPC_PORT": "13445", "STACKPIN_POOL": "decode", "VLLM_CACHE_ROOT": str(tmp_path)}
        subprocess.run(["bash", "-c", CAPTURE_SCRIPT, "stackpin-capture", "model", "--data-parallel-size", "8"],
                       env=env, capture_output=True, timeout=60, check=False)
        seen[index] = out.read_text().split("\n")[:-1]
    for index, argv in seen.items():
        assert argv == ["serve", "model", "--data-parallel-size", "8", "--data-parallel-hybrid-lb",
                        "--data-parallel-size-local", "2", "--data-parallel-start-rank", str(2 * index),
                        "--data-parallel-address", "leader.svc", "--data-parallel-rpc-port", "13445"], argv
