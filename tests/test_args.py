"""Engine / frontend argv: every flag the shipped stacks emit exists in the pinned packages."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from stackpin.backends.vllm import autotune_flags
from stackpin.catalog.flags import FlagCatalog, catalog_file, vllm_catalog
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import topology_of
from stackpin.render import args as a
from tests.helpers import base_doc, mutate
from tests.lockkit import shipped_locks

ENGINES = Path(__file__).resolve().parent.parent / "stackpin" / "catalog" / "engines"
SHIPPED_NAMES = sorted(shipped_locks())


def _profile(name: str = "gb300-tuned", **changes: object) -> StackProfile:
    doc = base_doc(name)
    for path, value in changes.items():
        mutate(doc, path.replace("__", "."), value)
    return StackProfile.from_data(doc)


def _missing(engine: str, version: str) -> str:
    return (f"{ENGINES / catalog_file(engine, version)} is missing: the pinned {engine} {version} has no flag "
            f"catalog (stackpin engines add {'ai-dynamo' if engine == 'dynamo' else engine}=={version})")


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_every_emitted_flag_exists_in_the_pinned_versions(name: str) -> None:
    lock = shipped_locks()[name]
    profile = lock.stack_profile
    versions = profile.spec.versions
    vllm = vllm_catalog(versions.vllm)
    worker = a.dynamo_catalog(versions.dynamo, "worker_vllm")
    frontend = a.dynamo_catalog(versions.dynamo, "frontend")
    missing = [_missing("vllm", versions.vllm)] if vllm is None else []
    missing += [_missing("dynamo", versions.dynamo)] if worker is None else []
    assert not missing, "\n".join(missing)
    assert vllm and worker and frontend
    problems = a.check_flags(a.frontend_flags(profile), [frontend])
    for pool in topology_of(profile).pools:
        role = pool.role
        flags = a.worker_flags(profile, role, pool.spec, model_revision=lock.resolved.model.revision, catalog=vllm)
        problems += [f"{role}: {p}" for p in a.check_flags(flags, [worker, vllm])]
        # Values argparse lets through but the engine would reject at start-up (attention backends).
        problems += [f"{role}: {p}" for p in a.unknown_values(flags, [worker, vllm])]
    assert problems == []


def test_check_flags_names_unknown_options_and_enforced_choices() -> None:
    vllm = vllm_catalog("0.31.0")
    assert vllm is not None
    flags: list[a.Flag] = [("--moe-backend", "no_such"), ("--no-such-flag", None), ("--enable-prefix-caching", None),
                           ("--no-enable-prefix-caching", None)]
    problems = a.check_flags(flags, [vllm])
    assert len(problems) == 2
    assert "--moe-backend no_such is not one of vLLM 0.31.0's choices" in problems[0]
    assert problems[1] == "--no-such-flag is not an option of vLLM 0.31.0"
    assert a.unknown_values([("--attention-backend", "FLASHMLA_SPARSE_DSV41")], [vllm_catalog("0.28.0")]) == [
        "--attention-backend FLASHMLA_SPARSE_DSV41 is not known to vLLM 0.28.0"]


def test_json_arguments_are_compact_and_sorted() -> None:
    profile = _profile()
    pool = profile.spec.placement.pools.worker
    assert pool is not None
    argv = a.worker_args(profile, "worker", pool, model_revision="c" * 40, catalog=vllm_catalog("0.31.0"))
    spec = argv[argv.index("--speculative-config") + 1]
    # The dspark draft is read from the target's checkpoint, but vLLM gives it the config's own revision
    # (None: the default branch), never the target's --revision: the locked one is written in.
    assert spec == ('{"draft_sample_method":"probabilistic","enable_adaptive_verification":true,"method":"dspark",'
                    '"num_speculative_tokens":5,"rejection_sample_method":"block","revision":"' + "c" * 40 + '"}')
    cc = json.loads(argv[argv.index("--compilation-config") + 1])
    assert cc == {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [6, 12, 24, 48, 96, 192, 384],
                  "max_cudagraph_capture_size": 384}
    assert argv[:4] == ["--model", "deepseek-ai/DeepSeek-V4.1-Flash", "--revision", "c" * 40]
    assert argv[-2:] == ["--disaggregation-mode", "agg"]


@pytest.mark.parametrize(("speculative", "revision"), [
    ({"method": "mtp", "numSpeculativeTokens": 1}, "c" * 40),  # also read from the target's checkpoint
    ({"method": "draft_model", "numSpeculativeTokens": 3, "draftModel": "acme/draft-1",
      "draftRevision": "d" * 40}, "d" * 40),
    ({"method": "ngram", "numSpeculativeTokens": 3}, None),  # no model is loaded
])
def test_every_model_vllm_loads_is_pinned(speculative: dict[str, object], revision: str | None) -> None:
    doc = base_doc("gb300-tuned")
    doc["spec"]["speculative"] = speculative
    profile = StackProfile.from_data(doc)
    pool = profile.spec.placement.pools.worker
    assert pool is not None
    argv = a.worker_args(profile, "worker", pool, model_revision="c" * 40, catalog=vllm_catalog("0.31.0"))
    assert json.loads(argv[argv.index("--speculative-config") + 1]).get("revision") == revision
    assert "--kv-transfer-config" not in argv
    # A replayed cache is on: nothing may turn autotuning off.
    assert not any("autotune" in x for x in argv)


def test_disaggregated_pools_share_speculative_config_and_kv_transfer() -> None:
    profile = StackProfile.from_data(shipped_locks()["gb300-launch"].profile)
    argv = {pool.role: a.worker_args(profile, pool.role, pool.spec, model_revision="c" * 40)
            for pool in topology_of(profile).pools}
    assert set(argv) == {"prefill", "decode"}
    spec = {role: v[v.index("--speculative-config") + 1] for role, v in argv.items()}
    assert spec["prefill"] == spec["decode"]
    for role, v in argv.items():
        assert v[v.index("--kv-transfer-config") + 1] == '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
        assert v[v.index("--disaggregation-mode") + 1] == role


def test_autotune_off_uses_what_the_pinned_vllm_has() -> None:
    profile = _profile(spec__autotune={"mode": "off"})
    assert autotune_flags(profile, vllm_catalog("0.31.0")) == [("--no-enable-flashinfer-autotune", None)]
    assert autotune_flags(profile, None) == [("--no-enable-flashinfer-autotune", None)]
    only_kernel_config = FlagCatalog(name="vLLM test", version="test", options=frozenset({"--kernel-config"}))
    assert autotune_flags(profile, only_kernel_config) == [
        ("--kernel-config", '{"enable_flashinfer_autotune":false}')]
    assert autotune_flags(_profile(spec__autotune={"mode": "tune"}), vllm_catalog("0.31.0")) == []


def test_migration_limit_is_the_frontends_and_checked_against_the_pinned_dynamo() -> None:
    # Dynamo's default (0) fails every in-flight request of a lost decode pod; the profile's default is 3.
    assert a.frontend_args(_profile())[-2:] == ["--migration-limit", "3"]
    off = a.frontend_flags(_profile(spec__placement__migrationLimit=0))
    assert ("--migration-limit", "0") in off
    pinned = a.dynamo_catalog("1.6.1", "frontend")
    assert pinned is not None and a.check_flags(off, [pinned]) == []
    older = FlagCatalog(name="Dynamo test frontend", version="test", options=pinned.options - {"--migration-limit"})
    assert a.check_flags(off, [older]) == ["--migration-limit is not an option of Dynamo test frontend"]
    with pytest.raises(msgspec.ValidationError, match=">= 0"):
        _profile(spec__placement__migrationLimit=-1)


def test_kv_events_follow_the_router_and_prefix_caching() -> None:
    on = _profile()
    pool = on.spec.placement.pools.worker
    assert pool is not None
    assert "--kv-events-config" in a.worker_args(on, "worker", pool, model_revision="x")
    assert a.frontend_args(on) == ["--http-port", "8000", "--router-mode", "kv", "--migration-limit", "3"]
    off = _profile(spec__kvCache__events=False)
    assert "--kv-events-config" not in a.worker_args(off, "worker", pool, model_revision="x")
    assert a.frontend_args(off)[-1] == "--no-router-kv-events"
    no_prefix = _profile(spec__kvCache__prefixCaching=False)
    argv = a.worker_args(no_prefix, "worker", pool, model_revision="x")
    assert "--no-enable-prefix-caching" in argv and "--kv-events-config" not in argv
    rr = _profile(spec__placement__router="round-robin")
    assert a.frontend_args(rr)[:4] == ["--http-port", "8000", "--router-mode", "round-robin"]
    assert "--kv-events-config" not in a.worker_args(rr, "worker", pool, model_revision="x")


def test_parallelism_and_limits() -> None:
    profile = StackProfile.from_data(shipped_locks()["gb300-disagg-wide-ep"].profile)
    decode = profile.spec.placement.pools.decode
    assert decode is not None
    argv = a.worker_args(profile, "decode", decode, model_revision="x")
    pairs = dict(zip(argv, argv[1:], strict=False))
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--data-parallel-size"] == "8"
    assert pairs["--pipeline-parallel-size"] == "1" and "--enable-expert-parallel" in argv
    assert pairs["--max-num-seqs"] == "64" and pairs["--max-num-batched-tokens"] == "16384"
    assert pairs["--max-model-len"] == "262144" and pairs["--gpu-memory-utilization"] == "0.9"
    assert pairs["--kv-cache-dtype"] == "fp8_ds_mla" and pairs["--block-size"] == "128"
    assert pairs["--all2all-backend"] == "flashinfer_nvlink_one_sided"
    assert pairs["--attention-backend"] == "FLASHMLA_MEGA_ATTN_DSV41"


@pytest.mark.parametrize(("version", "prefix_off", "autotune_off"), [
    ("0.31.0", "--no-enable-prefix-caching", "--no-enable-flashinfer-autotune"),
    # 0.33.0 hides and deprecates --no-enable-x in favour of --disable-x (vllm/utils/argparse_utils.py).
    ("0.33.0", "--disable-prefix-caching", "--disable-flashinfer-autotune"),
])
def test_switches_off_are_spelled_as_the_pinned_vllm_prefers(version: str, prefix_off: str, autotune_off: str) -> None:
    profile = _profile("gb300-launch", spec__kvCache__prefixCaching=False, spec__autotune__mode="off")
    pool = next(iter(topology_of(profile).pools))
    vllm = vllm_catalog(version)
    assert vllm is not None
    argv = a.worker_args(profile, pool.role, pool.spec, model_revision="c" * 40, catalog=vllm)
    assert prefix_off in argv and autotune_off in argv
    assert not [s for s in argv if s.startswith("--") and vllm.deprecation(s)]
