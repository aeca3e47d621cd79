"""The model's serving flags (issue 19): every worker of every shipped stack runs Dynamo's tool-call and
reasoning parsers for DeepSeek V4.1 (without them a coding agent's tool calls come back as plain text); a
profile may override or turn them off; a name the pinned Dynamo lacks is refused before any lock or render;
and the parser lists are what the published runtime wheels say."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from stackpin.catalog import load_catalog
from stackpin.render.build import RenderError, build_objects
from tests.helpers import ROOT
from tests.lockkit import shipped_locks, with_profile_value

PARSERS = ("--dyn-tool-call-parser", "--dyn-reasoning-parser")


def workers(lock: Any) -> list[list[str]]:
    dgd = build_objects(lock)[0]
    return [c["podTemplate"]["spec"]["containers"][0]["args"] for c in dgd["spec"]["components"]
            if c["type"] != "frontend"]


def parsers_of(args: list[str]) -> dict[str, str]:
    return {flag: args[args.index(flag) + 1] for flag in PARSERS if flag in args}


@pytest.mark.parametrize("name", sorted(shipped_locks()))
def test_every_shipped_worker_runs_the_models_parsers(name: str) -> None:
    for args in workers(shipped_locks()[name]):
        assert parsers_of(args) == {"--dyn-tool-call-parser": "deepseek_v41", "--dyn-reasoning-parser": "deepseek_v41"}
        assert args.count("--dyn-tool-call-parser") == 1


def test_a_profile_overrides_or_turns_off_a_parser() -> None:
    lock = shipped_locks()["gb300-tuned"]
    other = with_profile_value(lock, ("spec", "model", "toolCallParser"), "hermes")
    off = with_profile_value(lock, ("spec", "model", "reasoningParser"), "none")
    assert parsers_of(workers(other)[0])["--dyn-tool-call-parser"] == "hermes"
    assert parsers_of(workers(off)[0]) == {"--dyn-tool-call-parser": "deepseek_v41"}
    # A pool's own dynamoArgs win, once: the flag is not passed twice.
    pooled = with_profile_value(lock, ("spec", "placement", "pools", "worker", "dynamoArgs"),
                                {"--dyn-tool-call-parser": "deepseek_v4"})
    [args] = workers(pooled)
    assert args.count("--dyn-tool-call-parser") == 1 and parsers_of(args)["--dyn-tool-call-parser"] == "deepseek_v4"


def test_a_parser_the_pinned_dynamo_lacks_is_not_rendered() -> None:
    lock = with_profile_value(shipped_locks()["gb300-tuned"], ("spec", "model", "toolCallParser"), "deepseek_v5")
    with pytest.raises(RenderError, match="spec.model.toolCallParser: Dynamo 1.6.1 has no tool parser 'deepseek_v5'"):
        build_objects(lock)


def test_parser_lists_cover_every_pinned_dynamo_the_shipped_stacks_use() -> None:
    catalog = load_catalog()
    pinned = {lock.stack_profile.spec.versions.dynamo for lock in shipped_locks().values()}
    for version in pinned:
        parsers = catalog.dynamo_parsers[version]
        assert "deepseek_v41" in parsers.tool and "deepseek_v41" in parsers.reasoning, version
    assert "deepseek_v41" not in catalog.dynamo_parsers["1.5.1"].tool  # why SP228 exists


@pytest.mark.network
def test_parser_lists_are_what_the_runtime_wheel_says() -> None:
    """Reaches PyPI: the 1.6.1 entry, extracted again from the published wheel, is the committed one."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "extract_dynamo_parsers.py"), "1.6.1"],
                          capture_output=True, text=True, check=True)
    fresh = yaml.safe_load("dynamo:\n" + done.stdout)["dynamo"]["1.6.1"]
    committed = load_catalog().dynamo_parsers["1.6.1"]
    assert (tuple(fresh["tool"]), tuple(fresh["reasoning"]), fresh["sha256"]) == (
        committed.tool, committed.reasoning, committed.sha256)


def test_compilation_extras_and_a_pools_own_env_reach_its_workers() -> None:
    """What Dynamo's V4 recipes set that the CUDA graph fields do not model (`custom_ops`, `pass_config` in
    --compilation-config) and env for one pool only (the V4 Pro recipe tunes its prefill workers)."""
    import json

    lock = shipped_locks()["gb300-disagg-wide-ep"]
    lock = with_profile_value(lock, ("spec", "cudaGraphs", "compilation"),
                              {"custom_ops": ["all"], "pass_config": {"fuse_allreduce_rms": True}})
    lock = with_profile_value(lock, ("spec", "placement", "pools", "prefill", "env"),
                              {"VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": "1024"})
    lock = with_profile_value(lock, ("spec", "placement", "pools", "decode", "compilation"), {"mode": 0})
    lock = with_profile_value(lock, ("spec", "placement", "pools", "decode", "kvConnectorExtraConfig"),
                              {"num_threads": 8})
    dgd = build_objects(lock)[0]
    containers = {c["name"]: c["podTemplate"]["spec"]["containers"][0] for c in dgd["spec"]["components"]}
    for role in ("prefill", "decode"):
        args = containers[role]["args"]
        config = json.loads(args[args.index("--compilation-config") + 1])
        assert config["custom_ops"] == ["all"] and config["pass_config"] == {"fuse_allreduce_rms": True}
        assert config["cudagraph_mode"] == "FULL_AND_PIECEWISE"  # the modelled keys stay the profile's
    def flag(role: str, option: str) -> dict[str, object]:
        args = containers[role]["args"]
        return dict(json.loads(args[args.index(option) + 1]))

    # A pool's own compilation keys and NIXL extra config reach only its workers.
    assert flag("decode", "--compilation-config")["mode"] == 0 and "mode" not in flag("prefill", "--compilation-config")
    assert flag("decode", "--kv-transfer-config")["kv_connector_extra_config"] == {"num_threads": 8}
    assert "kv_connector_extra_config" not in flag("prefill", "--kv-transfer-config")
    env = {role: {e["name"]: e["value"] for e in c["env"]} for role, c in containers.items() if role != "frontend"}
    assert env["prefill"]["VLLM_SPARSE_INDEXER_MAX_LOGITS_MB"] == "1024"
    assert "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB" not in env["decode"]
    # A pool's env may not set what render derives, and a modelled compilation key belongs to cudaGraphs.
    clash = with_profile_value(lock, ("spec", "placement", "pools", "decode", "env"), {"HF_HOME": "/elsewhere"})
    with pytest.raises(RenderError, match="spec.placement.pools.decode.env sets HF_HOME"):
        build_objects(clash)
    from msgspec import ValidationError

    modelled = with_profile_value(lock, ("spec", "cudaGraphs", "compilation"), {"cudagraph_mode": "NONE"})
    with pytest.raises(ValidationError, match="cudagraph_mode: set by cudaGraphs.mode"):
        modelled.stack_profile  # noqa: B018 - reading it validates the profile
