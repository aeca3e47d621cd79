"""Speculative decoding rules (vLLM config/speculative.py, docs/facts.md#speculative-decoding)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import msgspec

from stackpin.backends.vllm_rules import vllm_rule
from stackpin.profile.model import Speculative
from stackpin.rules import Context, Hit, Severity, choices_hint, pools
from stackpin.yamlio import FieldPath


def _settings(ctx: Context) -> Iterator[tuple[FieldPath, Speculative]]:
    """The stack's speculative settings and every pool override, with their YAML paths."""
    yield ("spec", "speculative"), ctx.profile.spec.speculative
    for _role, path, pool in pools(ctx):
        if pool.spec.speculative is not None:
            yield path + ("speculative",), pool.spec.speculative


def _aliases(ctx: Context) -> tuple[str, ...]:
    return ctx.engine_catalog.choices.get("speculative_mtp_aliases", ()) if ctx.engine_catalog else ()


@vllm_rule("SP111", Severity.error, "speculative method unknown to the pinned vLLM")
def unknown_method(ctx: Context) -> Iterator[Hit]:
    if ctx.engine_catalog is None:
        return
    methods = ctx.engine_catalog.choices["speculative_methods"]
    for path, spec in _settings(ctx):
        if spec.method is not None and spec.method not in methods and spec.method not in _aliases(ctx):
            yield Hit(path + ("method",),
                      f"vLLM {ctx.engine_catalog.version} has no speculative method {spec.method!r}",
                      choices_hint(spec.method, methods, f"catalog/engines/vllm-{ctx.engine_catalog.version}.json"))


@vllm_rule("SP112", Severity.error, "speculative method the model rejects")
def rejected_by_model(ctx: Context) -> Iterator[Hit]:
    if ctx.model is None:
        return
    for path, spec in _settings(ctx):
        method = "mtp" if spec.method in _aliases(ctx) else spec.method
        reason = ctx.model.rejected_speculative_methods.get(method or "")
        if reason:
            yield Hit(path + ("method",), f"{ctx.model_key} does not accept {spec.method!r}: {reason}",
                      f"use one of: {', '.join(ctx.model.speculative_methods)}")


@vllm_rule("SP113", Severity.warning, "legacy speculative method name")
def legacy_name(ctx: Context) -> Iterator[Hit]:
    for path, spec in _settings(ctx):
        if spec.method in _aliases(ctx):
            yield Hit(path + ("method",), f"{spec.method!r} is a legacy name that vLLM rewrites to 'mtp' with a "
                      "warning", "write the method vLLM will run")


@vllm_rule("SP114", Severity.error, "speculative method without a token count")
def no_token_count(ctx: Context) -> Iterator[Hit]:
    for path, spec in _settings(ctx):
        if spec.method is not None and spec.num_speculative_tokens is None:
            yield Hit(path, f"method {spec.method!r} needs numSpeculativeTokens",
                      "retune it for this model, workload and GPU; it changes capture sizes too")


@vllm_rule("SP115", Severity.error, "draft-model speculation without a draft model")
def no_draft_model(ctx: Context) -> Iterator[Hit]:
    for path, spec in _settings(ctx):
        if spec.method in ("draft_model", "eagle", "eagle3") and not spec.draft_model:
            yield Hit(path + ("method",), f"method {spec.method!r} needs draftModel")


COMMIT = re.compile(r"[0-9a-f]{40}")


@vllm_rule("SP118", Severity.error, "draft model not pinned to a commit")
def draft_unpinned(ctx: Context) -> Iterator[Hit]:
    # vLLM builds the draft's ModelConfig with the speculative config's own revision, never the target's
    # --revision (config/speculative.py:1297 in 0.31.0); None is the Hub's default branch.
    for path, spec in _settings(ctx):
        if spec.draft_model and not (spec.draft_revision and COMMIT.fullmatch(spec.draft_revision)):
            yield Hit(path + ("draftModel",), f"draftModel {spec.draft_model} is loaded at "
                      f"{spec.draft_revision or 'its default branch'}, which can move under a locked stack",
                      "set draftRevision to the draft's 40-hex commit")


@vllm_rule("SP116", Severity.error, "draft tensor parallel size neither 1 nor the target's")
def draft_tp(ctx: Context) -> Iterator[Hit]:
    spec_path = ("spec", "speculative")
    for role, pool_path, pool in pools(ctx):
        spec = ctx.profile.speculative_for(pool.spec)
        size = spec.draft_tensor_parallel_size
        if size is not None and size not in (1, pool.tensor_parallel):
            path = spec_path if pool.spec.speculative is None else pool_path + ("speculative",)
            yield Hit(path + ("draftTensorParallelSize",), f"draftTensorParallelSize={size} must be 1 or the "
                      f"{role} pool's tensorParallel={pool.tensor_parallel}")


@vllm_rule("SP117", Severity.warning, "speculative options without a method")
def options_without_method(ctx: Context) -> Iterator[Hit]:
    for path, spec in _settings(ctx):
        options = {name: value for name, value in msgspec.structs.asdict(spec).items()
               if name != "method" and value is not None}
        if spec.method is None and options:
            yield Hit(path, f"speculation is off (no method) but {sorted(options)} are set; they are ignored",
                      "set a method or remove the options")


@vllm_rule("SP119", Severity.error, "adaptive verification without full CUDA graphs")
def adaptive_without_full_graphs(ctx: Context) -> Iterator[Hit]:
    """VllmConfig refuses adaptive verification unless the CUDA graph mode has full graphs (catalog/startup.py
    `speculative.adaptive_verification`): every worker fails at start."""
    from stackpin.backends.vllm_rules.graphs import adaptive_pools, runtime_mode
    from stackpin.backends.vllm_rules.kernels import startup_model

    found = startup_model(ctx)
    if found is None or (facts := found[0].speculative.adaptive_verification) is None:
        return
    mode = ctx.profile.spec.cuda_graphs.mode.value
    runs = runtime_mode(ctx) or mode
    # `--enforce-eager` passed through engineArgs sets the pool's CUDA graph mode to NONE whatever cudaGraphs
    # says (vLLM 0.31.0 config/vllm.py:1694-1696, 1967-1970).
    eager = {str(role) for role, _, pool in pools(ctx) if _enforces_eager(ctx, pool.spec.engine_args)}
    full = mode in facts.full_graph_modes and runs in facts.full_graph_modes
    for role, path in adaptive_pools(ctx):
        if full and role not in eager:
            continue
        said = ("NONE: its engineArgs pass --enforce-eager" if role in eager
                else mode if runs == mode else f"{mode} (run as {runs})")
        yield Hit(path + ("adaptiveVerification",), f"pool {role}: adaptive verification needs full CUDA graphs and "
                  f"cudaGraphs.mode is {said}: vLLM {found[0].version} refuses to start (\"Adaptive verification "
                  f"requires full CUDA graphs\", {facts.full_graph_source.split(' ')[0]})",
                  f"set cudaGraphs.mode to one of {', '.join(facts.full_graph_modes)}, or adaptiveVerification: false"
                  + (", and drop --enforce-eager" if role in eager else ""))


def _enforces_eager(ctx: Context, engine_args: Mapping[str, object]) -> bool:
    """Whether a pool's engineArgs turn on `--enforce-eager` (a switch: true, or given without a value)."""
    catalog = ctx.engine_catalog
    for flag, value in engine_args.items():
        use = catalog.resolve(flag) if catalog is not None else None
        if (use.flag if use else flag) != "--enforce-eager":
            continue
        # a switch's value is a boolean (FlagCatalog.check_value refuses anything else): --no-enforce-eager: true is off
        if (use is not None and use.negative) != bool(value):
            return True
    return False
