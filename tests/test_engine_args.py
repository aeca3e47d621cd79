"""engineArgs / dynamoArgs: the form a profile may write them in, where they land on the argv, that render
refuses what validation refuses, and that stackpin's table of modelled flags is what render really writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stackpin.backends.vllm import MODELLED as MODELLED_VLLM
from stackpin.backends.vllm import MODELLED_DYNAMO, autotune_flags
from stackpin.catalog.flags import vllm_catalog
from stackpin.cli.main import main as cli_main
from stackpin.errors import InputError
from stackpin.lock.lockfile import StackLock
from stackpin.profile.topology import topology_of
from stackpin.render import args as argmod
from stackpin.render.build import RenderError, build_objects
from stackpin.render.output import render_stack
from stackpin.validate import run_rules
from stackpin.validate.engineargs import renders
from tests.helpers import SHIPPED, apply, base_doc, dump, line_of, load_doc, write_profile
from tests.lockkit import lock_files, shipped_locks, with_profile_value

W = "spec.placement.pools.worker"
# The negative forms a user reaches for (issue 11): vLLM 0.33.0 generates them (its catalog lists them).
NEGATIVE_FORMS = ("--disable-prefix-caching", "--disable-chunked-prefill", "--enable-cascade-attn",
                  "--disable-log-requests")


# --- the form, checked where the profile is read ---------------------------------------------------

@pytest.mark.parametrize(("args", "says"), [
    ({"max-logprobs": 20}, "'max-logprobs' is not a long option"),
    ({"--max_logprobs": 20}, "options are spelled with dashes: --max-logprobs"),
    ({"-tp": 2}, "'-tp' is not a long option"),
    ({"--compilation-config.mode": 3}, "not inside the option name"),
    ({"--served-model-name": ["a", "b"]}, "--served-model-name: is a list"),
    ({"--max-logprobs": None}, "--max-logprobs: has no value"),
    ({"--hf-overrides": {"x": float("nan")}}, "holds a NaN or infinite number"),
], ids=["no-dashes", "underscores", "short", "dotted", "list", "null", "nan"])
def test_a_misspelt_entry_is_one_line_naming_file_line_and_field(tmp_path: Path, args: dict[str, Any],
                                                                 says: str) -> None:
    doc = apply(base_doc(), {f"{W}.engineArgs": args})
    path = write_profile(tmp_path, doc)
    result = CliRunner().invoke(cli_main, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    [line] = [x for x in result.output.splitlines() if x.strip()]
    row, col = line_of(dump(doc), f"{W}.engineArgs")
    assert line.startswith(f"error: {path}:{row}:{col}: {W}.engineArgs: ") and says in line, line


def test_a_misspelt_entry_fails_loading_too(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_doc(tmp_path, apply(base_doc(), {f"{W}.dynamoArgs": {"migration-limit": 1}}))


# --- where they land -------------------------------------------------------------------------------


def _worker_args(lock: StackLock) -> list[str]:
    [dgd] = [o for o in build_objects(lock) if o["kind"] == "DynamoGraphDeployment"]
    [worker] = [c for c in dgd["spec"]["components"] if c["name"] == "worker"]
    args: list[str] = worker["podTemplate"]["spec"]["containers"][0]["args"]
    return args


PASSED = {"--max-logprobs": 20, "--enable-log-requests": True, "--attention-config": {"flash_attn_version": 3,
                                                                                      "backend": "FLASHMLA"},
          "--kv-cache-memory-bytes": "64G", "--scheduling-policy": "priority"}


def test_passed_flags_follow_the_modelled_ones_sorted_vllm_then_dynamo() -> None:
    lock = shipped_locks()["gb300-tuned"]
    plain = _worker_args(lock)
    pool = ("spec", "placement", "pools", "worker")
    lock = with_profile_value(with_profile_value(lock, (*pool, "engineArgs"), PASSED), (*pool, "dynamoArgs"),
                    {"--use-vllm-tokenizer": True})
    args = _worker_args(lock)
    # ... the modelled flags end with the disaggregation mode and the model's parsers (profile/serving.py)
    assert args[: len(plain)] == plain and plain[-6:-4] == ["--disaggregation-mode", "agg"]
    assert plain[-4:] == ["--dyn-tool-call-parser", "deepseek_v41", "--dyn-reasoning-parser", "deepseek_v41"]
    assert args[len(plain):] == [
        "--attention-config", '{"backend":"FLASHMLA","flash_attn_version":3}', "--enable-log-requests",
        "--kv-cache-memory-bytes", "64G", "--max-logprobs", "20", "--scheduling-policy", "priority",
        "--use-vllm-tokenizer"]
    assert _worker_args(lock) == args  # same lock, same argv


def test_render_refuses_what_validation_refuses() -> None:
    lock = shipped_locks()["gb300-tuned"]
    pool = ("spec", "placement", "pools", "worker", "engineArgs")
    for args, says in (({"--max-logprob": 1}, "--max-logprob: not an option of vLLM 0.31.0"),
                       ({"--tensor-parallel-size": 8}, "stackpin renders --tensor-parallel-size from "
                        "spec.placement.pools.worker.tensorParallel"),
                       ({"--enable-log-requests": False}, "is a switch; false does not turn it off"),
                       ({"--mamba-cache-mode": "fancy"}, "fancy is not one of its choices"),
                       ({"--attention-config": {"bogus": 1}}, "AttentionConfig of vLLM 0.31.0 has no key 'bogus'")):
        with pytest.raises(RenderError, match="worker engineArgs") as info:
            build_objects(with_profile_value(lock, pool, args))
        assert says in str(info.value), str(info.value)
    with pytest.raises(RenderError, match="worker dynamoArgs --router-mode: a router flag; routing is the frontend's"):
        build_objects(with_profile_value(lock, (*pool[:-1], "dynamoArgs"), {"--router-mode": "round-robin"}))


# --- the modelled-flag table is what render writes -------------------------------------------------

def _variants() -> list[tuple[str, dict[str, Any]]]:
    return [(p.stem, {}) for p in SHIPPED] + [
        ("gb300-tuned", {"spec.kvCache.prefixCaching": False, "spec.kvCache.blockSize": 64,
                         "spec.model.tokenizerMode": "slow", "spec.fallbacks.cpuOffloadGib": 4,
                         "spec.kernels.linear": "cutlass", "spec.speculative": {"method": None}}),
        ("gb300-disagg-wide-ep", {"spec.kvCache.events": False, f"{W}.maxNumSeqs": None}),
    ]


@pytest.mark.parametrize(("base", "changes"), _variants(), ids=lambda v: v if isinstance(v, str) else "")
def test_renders_predicts_every_modelled_flag_render_writes(tmp_path: Path, base: str,
                                                            changes: dict[str, Any]) -> None:
    loaded = load_doc(tmp_path, apply(base_doc(base), changes))
    profile = loaded.profile
    vllm = vllm_catalog(profile.spec.versions.vllm)
    assert vllm is not None
    for pool in topology_of(profile).pools:
        written = [f for f, _ in argmod.worker_flags(profile, pool.role, pool.spec, model_revision="r", catalog=vllm)]
        autotune = {f for f, _ in autotune_flags(profile, vllm)}
        predicted = {s for o in MODELLED_VLLM if (s := renders(o, profile, pool.spec, vllm)) is not None}
        assert set(written) - autotune == predicted | set(MODELLED_DYNAMO)
        # Every flag render writes is in the table (its --no- form through the catalog's aliases).
        assert {vllm.canonical(f) for f in written if f not in MODELLED_DYNAMO} <= set(MODELLED_VLLM)


# --- golden: vLLM's generated negative forms through engineArgs ------------------------------------

# A site whose pins add a Dynamo release that ships vLLM 0.33.0 (none bundled does yet), the way
# `stackpin engines add` records one: the profile then pins 0.33.0 without a version finding.
SITE_PINS = {"dynamo": "1.7.0", "vllm": "0.33.0", "flashinfer": "0.7.2.post1", "nixl": "1.4.1",
             "runtimeImage": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.0"}


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stackpin.engines.store import set_pin

    site = tmp_path / "site"
    site.mkdir()
    text = (Path(__file__).resolve().parent.parent / "stackpin" / "catalog" / "versions.yaml").read_text()
    (site / "versions.yaml").write_text(set_pin(text, "dynamo", "1.7.0", {"vllm": "0.33.0", "nixl": "1.4.1",
                                                                          "crd": "v1beta1"}))
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))


def test_the_negative_forms_are_in_the_shipped_033_catalog() -> None:
    catalog = vllm_catalog("0.33.0")
    assert catalog is not None
    assert {f: catalog.canonical(f) for f in NEGATIVE_FORMS} == {
        "--disable-prefix-caching": "--enable-prefix-caching", "--disable-chunked-prefill": "--enable-chunked-prefill",
        "--enable-cascade-attn": "--disable-cascade-attn", "--disable-log-requests": "--enable-log-requests"}
    assert all(catalog.resolve(f).negative for f in NEGATIVE_FORMS)  # type: ignore[union-attr]


def test_the_negative_forms_validate_and_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _site(tmp_path, monkeypatch)
    catalog = vllm_catalog("0.33.0")
    assert catalog is not None
    args = dict.fromkeys(NEGATIVE_FORMS, True)
    # Prefix caching off in the field as well: the switch then repeats it rather than fighting it.
    doc = apply(base_doc(), {"metadata.name": "negative-forms", "spec.kvCache.prefixCaching": False,
                             "spec.versions": SITE_PINS, "spec.autotune": {"mode": "tune"},
                             f"{W}.engineArgs": args})
    loaded = load_doc(tmp_path, doc)
    findings = run_rules(loaded)
    assert [str(f) for f in findings if f.severity == "error"] == []
    # SP227-SP229 are on the parsers: SITE_PINS' Dynamo has no parser list in the catalog (SP229).
    flagged = {(f.code, f.path.rsplit(".", 1)[-1]) for f in findings if f.code in ("SP221", "SP222", "SP223",
                                                                                  "SP224", "SP225", "SP226")}
    # --disable-prefix-caching repeats the field; --enable-cascade-attn reaches an option vLLM 0.33.0
    # deprecates (cascade attention is gone), with the package's own words as the hint.
    assert flagged == {("SP225", "--disable-prefix-caching"), ("SP226", "--enable-cascade-attn")}
    [deprecated] = [f for f in findings if f.code == "SP226"]
    assert "cascade attention has been removed" in deprecated.hint
    [lock] = lock_files([loaded.path], tmp_path / "lockfiles")
    argv = _worker_args(lock)
    assert argv[-len(NEGATIVE_FORMS):] == sorted(NEGATIVE_FORMS)
    assert "--disable-prefix-caching" in argv[:-len(NEGATIVE_FORMS)]  # the field's own spelling in 0.33.0
    assert render_stack(lock).files == render_stack(lock).files


def test_validate_json_lists_the_passed_flags_findings(tmp_path: Path) -> None:
    doc = apply(base_doc(), {f"{W}.engineArgs": {"--max-logprob": 1}})
    path = write_profile(tmp_path, doc)
    result = CliRunner().invoke(cli_main, ["validate", "-o", "json", str(path)])
    assert result.exit_code == 1
    [finding] = [f for f in json.loads(result.stdout)["reports"][0]["findings"] if f["code"] == "SP221"]
    row, col = line_of(dump(doc), f"{W}.engineArgs.--max-logprob")
    assert finding["location"] == f"{path}:{row}:{col}" and "closest: --max-logprobs" in finding["hint"]
