"""validate's pin and environment rules (validate/versions.py) read the stack's engine through its backend:
an SGLang stack's pins are checked against Dynamo's `sglang` extra and SGLang's own pins, and vLLM's env
registry, removals and managed variables say nothing about it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stackpin.profile.loader import load_profile
from stackpin.validate import run_rules
from tests.helpers import apply, base_doc, write_profile
from tests.test_rules import SGLANG

CODES = {"SP161", "SP162", "SP163", "SP164", "SP166", "SP171", "SP172"}
ENV = {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_NOT_A_SETTING": "1", "VLLM_CACHE_ROOT": "/cache",
       "SGLANG_NOT_A_SETTING": "1"}


def _findings(tmp_path: Path, change: dict[str, Any]) -> set[tuple[str, str, str]]:
    path = write_profile(tmp_path, apply(base_doc(), change))
    return {(f.code, f.path, f.message) for f in run_rules(load_profile(path)) if f.code in CODES}


def test_a_vllm_stack_gets_vllms_env_rules(tmp_path: Path) -> None:
    found = {(code, path) for code, path, _ in _findings(tmp_path, {"spec.kernels.env": ENV})}
    assert found == {("SP171", "spec.kernels.env.VLLM_ATTENTION_BACKEND"),
                     ("SP171", "spec.kernels.env.VLLM_NOT_A_SETTING"), ("SP172", "spec.kernels.env.VLLM_CACHE_ROOT")}


def test_an_sglang_stack_is_not_judged_by_vllms_environment(tmp_path: Path) -> None:
    # SGLang's catalog does not list every SGLANG_ variable it reads (its env_registry is None), stackpin records no
    # SGLang removals and sets no SGLang variable itself; its catalog has no model registry (SP166 silent).
    assert _findings(tmp_path, {**SGLANG, "spec.kernels.env": ENV}) == set()


def test_an_sglang_stacks_pins_follow_the_sglang_extra(tmp_path: Path) -> None:
    # Dynamo 1.6.1's sglang extra pins SGLang 0.5.21 and NIXL 1.5.0 (its vllm extra: NIXL 1.4.1); SGLang
    # 0.5.21 pins FlashInfer 0.6.18 (catalog/versions.yaml).
    found = _findings(tmp_path, {**SGLANG, "spec.versions.sglang": "0.5.18", "spec.versions.nixl": "1.4.1",
                                 "spec.versions.flashinfer": "0.7.0.post1"})
    assert {(code, path) for code, path, _ in found} == {
        ("SP162", "spec.versions.sglang"), ("SP163", "spec.versions.nixl"), ("SP164", "spec.versions.flashinfer")}
    messages = {code: message for code, _, message in found}
    assert messages["SP162"] == "sglang 0.5.18 does not match 0.5.21, the version Dynamo 1.6.1 pins"
    assert messages["SP163"] == "nixl 1.4.1 does not match 1.5.0, the version Dynamo 1.6.1 pins"
    assert messages["SP164"] == "flashinfer 0.7.0.post1 does not match 0.6.17, the version SGLang 0.5.18 pins"


def test_an_unknown_dynamo_names_the_stacks_engine(tmp_path: Path) -> None:
    [(_, _, message)] = _findings(tmp_path, {**SGLANG, "spec.versions.dynamo": "1.7.0"})
    assert message == "Dynamo 1.7.0 is not in the catalog; its SGLang/NIXL pins cannot be checked"
