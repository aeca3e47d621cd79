"""vLLM's own validation rules: what the pinned vLLM release's catalog and start-up facts decide about
its kernels, CUDA graphs, speculative decoding and precision. `VLLM.rule_modules` names these modules;
stackpin.validate imports them with every engine's, and each rule runs only for stacks on vLLM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stackpin.rules import Check, Severity, rule


def vllm_rule(code: str, severity: Severity, title: str, **kw: Any) -> Callable[[Check], Check]:
    """A rule about vLLM's own knobs, read from its catalog and start-up facts: silent for other engines."""
    return rule(code, severity, title, engine="vllm", **kw)
