"""CUDA graph capture rules (vLLM config/vllm.py::_set_cudagraph_sizes, docs/facts.md#cuda-graphs)."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.backends.vllm_rules import vllm_rule
from stackpin.backends.vllm_rules.kernels import startup_model
from stackpin.profile.model import CudaGraphMode, StackProfile
from stackpin.profile.topology import Role
from stackpin.rules import Context, Hit, Severity, pools
from stackpin.yamlio import FieldPath

_G = ("spec", "cudaGraphs")


def _round_up(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def effective_capture_sizes(sizes: list[int], max_batched: int | None, k: int, full_decode: bool,
                            max_size: int | None) -> list[int]:
    """The sizes vLLM would capture: de-duplicated, sorted, within max-num-batched-tokens and,
    under speculative decoding with FULL decode graphs, rounded up to multiples of 1+k."""
    out = sorted(set(sizes))
    if max_batched is not None:
        out = [s for s in out if s <= max_batched]
    if k and full_decode:
        limit = max_size if max_size is not None else (out[-1] if out else 0)
        out = sorted({_round_up(s, 1 + k) for s in out})
        out = [s for s in out if s <= limit]
    return out


def aligned_sizes(sizes: list[int], multiple: int, ceiling: int) -> list[int]:
    """`sizes` as multiples of `multiple` no larger than `ceiling`: each rounded up, or down where up
    would pass the ceiling; a size with no multiple at or under the ceiling is left out."""
    out = set()
    for size in sizes:
        up, down = _round_up(size, multiple), size // multiple * multiple
        if up <= ceiling:
            out.add(up)
        elif multiple <= down <= ceiling:
            out.add(down)
    return sorted(out)


def empty_capture_list(profile: StackProfile) -> bool:
    """`captureSizes: []` with CUDA graphs on: vLLM asserts at least one size and fails at startup (SP105)."""
    graphs = profile.spec.cuda_graphs
    return graphs.capture_sizes == [] and graphs.mode != CudaGraphMode.NONE


def empty_capture_hit(profile: StackProfile) -> Hit | None:
    """SP105's finding for an empty capture list with graphs on (render refuses with the same words)."""
    if not empty_capture_list(profile):
        return None
    return Hit(_G + ("captureSizes",), "captureSizes is empty: with CUDA graphs on vLLM asserts at least one "
               "capture size and fails at startup (an empty list does not turn graphs off)",
               "list the sizes to capture, drop captureSizes for vLLM's defaults, or set cudaGraphs.mode: NONE")


def _full_decode(ctx: Context) -> bool:
    return ctx.profile.spec.cuda_graphs.mode in ctx.catalog.engine.full_decode_modes


@vllm_rule("SP101", Severity.warning, "capture sizes not sorted and unique")
def unsorted(ctx: Context) -> Iterator[Hit]:
    sizes = ctx.profile.spec.cuda_graphs.capture_sizes
    if sizes is not None and sizes != sorted(set(sizes)):
        yield Hit(_G + ("captureSizes",), "capture sizes are not sorted and unique; vLLM de-duplicates and "
                  "sorts them silently", f"write them as vLLM will use them: {sorted(set(sizes))}")


@vllm_rule("SP102", Severity.warning, "capture size above max-num-batched-tokens")
def above_batched(ctx: Context) -> Iterator[Hit]:
    sizes = ctx.profile.spec.cuda_graphs.capture_sizes or []
    for role, path, pool in pools(ctx):
        limit = pool.spec.max_num_batched_tokens
        dropped = sorted({s for s in sizes if limit is not None and s > limit})
        if dropped:
            yield Hit(_G + ("captureSizes",), f"sizes {dropped} exceed {role} maxNumBatchedTokens={limit}; vLLM "
                      "drops them silently", f"remove them or raise {'.'.join(path[1:])}.maxNumBatchedTokens")


@vllm_rule("SP103", Severity.error, "max capture size disagrees with the largest capture size")
def max_disagrees(ctx: Context) -> Iterator[Hit]:
    graphs = ctx.profile.spec.cuda_graphs
    if graphs.capture_sizes and graphs.max_capture_size is not None:
        largest = max(graphs.capture_sizes)
        if graphs.max_capture_size != largest:
            yield Hit(_G + ("maxCaptureSize",), f"maxCaptureSize={graphs.max_capture_size} differs from the "
                      f"largest capture size {largest}; vLLM refuses to start",
                      f"set maxCaptureSize: {largest} or drop it")


@vllm_rule("SP104", Severity.warning, "capture sizes not multiples of 1+k under speculative decoding")
def not_multiple(ctx: Context) -> Iterator[Hit]:
    graphs = ctx.profile.spec.cuda_graphs
    if not graphs.capture_sizes or not _full_decode(ctx):
        return
    sizes = sorted(set(graphs.capture_sizes))
    # Pools may override speculative settings: check every k a pool runs with.
    by_k: dict[int, list[int | None]] = {}
    for _, _, pool in pools(ctx):
        by_k.setdefault(ctx.profile.speculative_for(pool.spec).k, []).append(pool.spec.max_num_batched_tokens)
    for k, limits in sorted(by_k.items()):
        odd = [s for s in sizes if k and s % (1 + k)]
        if not odd:
            continue
        # The hint stays within what SP102 and SP105 check: sizes above a pool's max-num-batched-tokens
        # are dropped, and rounded sizes above the max (maxCaptureSize, else the largest size left) too.
        known = [limit for limit in limits if limit is not None]
        batched = min(known) if known else None
        within = [s for s in sizes if batched is None or s <= batched]
        ceiling = graphs.max_capture_size if graphs.max_capture_size is not None else (within[-1] if within else 0)
        if batched is not None:
            ceiling = min(ceiling, batched)
        aligned = aligned_sizes(within, 1 + k, ceiling)
        if not aligned:
            hint = (f"no multiple of {1 + k} fits within {ceiling}; raise maxNumBatchedTokens / maxCaptureSize or "
                    "lower numSpeculativeTokens")
        else:
            hint = f"use multiples of {1 + k} up to {ceiling}: captureSizes: {aligned}"
            if graphs.max_capture_size is not None and aligned[-1] != graphs.max_capture_size:
                hint += f", maxCaptureSize: {aligned[-1]}"
        yield Hit(_G + ("captureSizes",), f"sizes {odd} are not multiples of 1+k={1 + k}; with "
                  f"{graphs.mode} graphs vLLM rounds them up (or drops them above the max)", hint)


@vllm_rule("SP105", Severity.error, "no capture size left")
def none_left(ctx: Context) -> Iterator[Hit]:
    graphs = ctx.profile.spec.cuda_graphs
    if (empty := empty_capture_hit(ctx.profile)) is not None:
        yield empty
        return
    if not graphs.capture_sizes or graphs.mode == CudaGraphMode.NONE:
        return
    for role, _, pool in pools(ctx):
        k = ctx.profile.speculative_for(pool.spec).k
        left = effective_capture_sizes(graphs.capture_sizes, pool.spec.max_num_batched_tokens, k, _full_decode(ctx),
                                       graphs.max_capture_size)
        if not left:
            yield Hit(_G + ("captureSizes",), f"no capture size survives for the {role} pool (within "
                      f"maxNumBatchedTokens, multiples of 1+k={1 + k}); vLLM fails at startup")


@vllm_rule("SP106", Severity.warning, "capture sizes set while CUDA graphs are off")
def sizes_unused(ctx: Context) -> Iterator[Hit]:
    graphs = ctx.profile.spec.cuda_graphs
    if graphs.mode == CudaGraphMode.NONE and (graphs.capture_sizes is not None or graphs.max_capture_size):
        yield Hit(_G + ("mode",), "cudaGraphs.mode is NONE, so capture sizes are ignored",
                  "drop captureSizes/maxCaptureSize or choose a graph mode")


@vllm_rule("SP107", Severity.warning, "capture sizes left to vLLM's defaults")
def sizes_unpinned(ctx: Context) -> Iterator[Hit]:
    graphs = ctx.profile.spec.cuda_graphs
    if graphs.mode != CudaGraphMode.NONE and graphs.capture_sizes is None:
        yield Hit(_G, "captureSizes is unset: vLLM derives them from max-num-seqs, speculative tokens and the "
                  "GPU family, so the graphs captured change with any of those",
                  "pin captureSizes (and maxCaptureSize) explicitly")


@vllm_rule("SP108", Severity.warning, "vLLM forces breakable CUDA graphs for DeepSeek V3.2/V4/V4.1")
def breakable(ctx: Context) -> Iterator[Hit]:
    if ctx.model is None or not ctx.model.model_type.startswith("deepseek_v4"):
        return
    env = ctx.profile.spec.kernels.env
    if ctx.profile.spec.cuda_graphs.mode != CudaGraphMode.NONE and "VLLM_USE_BREAKABLE_CUDAGRAPH" not in env:
        yield Hit(("spec", "kernels", "env"), f"for {ctx.model.model_type} vLLM sets VLLM_USE_BREAKABLE_CUDAGRAPH=1 "
                  "unless it is set, which forces compilation mode NONE; the stack does not say which it runs",
                  "set kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH to \"1\" or \"0\" explicitly")


# SP109 ("piecewise CUDA graphs with breakable CUDA graphs on") is retired: it had vLLM backwards. Breakable
# graphs are how a model that torch.compile never cuts (DeepSeek V4.1) gets piecewise graphs at all; SP110
# reports the real fallback. Codes are never reused.


def graph_fallback(ctx: Context, mode: str | None = None) -> tuple[str, str] | None:
    """(the mode vLLM really runs, why) when it drops the profile's piecewise graphs at start-up, else None:
    without breakable CUDA graphs a model with no torch.compile'd submodule has no piecewise capture, and
    PIECEWISE becomes NONE, FULL_AND_PIECEWISE becomes FULL_DECODE_ONLY (catalog/startup.py). `mode`: another
    mode than the declared one (what an earlier rewrite made of it)."""
    found = startup_model(ctx)
    mode = mode or ctx.profile.spec.cuda_graphs.mode.value
    if found is None or ctx.model is None:
        return None
    graphs, arch = found[0].cuda_graphs, ctx.model.architecture
    env = ctx.profile.spec.kernels.env.get("VLLM_USE_BREAKABLE_CUDAGRAPH")
    breakable = env == "1" if env is not None else arch in graphs.breakable_by_default
    if breakable or arch not in graphs.uncompiled or mode not in graphs.without_piecewise:
        return None
    why = (f"VLLM_USE_BREAKABLE_CUDAGRAPH={env or 0} and vLLM {found[0].version} never torch.compiles {arch}, "
           f"so it has no piecewise capture ({graphs.uncompiled_source.split(' ')[0]}, "
           f"{graphs.without_piecewise_source.split(' ')[0]})")
    return graphs.without_piecewise[mode], why


def adaptive_pools(ctx: Context) -> Iterator[tuple[str, FieldPath]]:
    """(role, path of the speculative settings it runs) of every pool that runs adaptive verification."""
    for role, pool_path, pool in pools(ctx):
        spec = ctx.profile.speculative_for(pool.spec)
        if spec.enabled and spec.adaptive_verification:
            where = ("spec", "speculative") if pool.spec.speculative is None else pool_path + ("speculative",)
            yield str(role), where


def adaptive_rewrite(ctx: Context) -> tuple[str, str] | None:
    """(the mode vLLM runs, why) when adaptive verification makes the model runner rewrite the declared mode
    (FULL -> FULL_AND_PIECEWISE with piecewise capture, else FULL_DECODE_ONLY: catalog/startup.py
    `speculative.adaptive_verification.resolves`), else None."""
    found = startup_model(ctx)
    facts = found[0].speculative.adaptive_verification if found else None
    mode = ctx.profile.spec.cuda_graphs.mode.value
    if found is None or facts is None or mode not in facts.resolves or not any(adaptive_pools(ctx)):
        return None
    runs = facts.resolves[mode]
    fallback = graph_fallback(ctx, runs)
    piecewise = fallback is None
    if fallback is not None:
        runs = fallback[0]
    why = (f"with adaptive verification on, vLLM {found[0].version}'s model runner resolves {mode} to {runs} "
           f"(piecewise capture {'available' if piecewise else 'unavailable'}; "
           f"{facts.resolves_source.split(' ')[0]})")
    return runs, why


def runtime_mode(ctx: Context) -> str | None:
    """The CUDA graph mode vLLM runs when it is not the declared one (SP110's fallback, SP120's rewrite)."""
    rewrite = adaptive_rewrite(ctx)
    if rewrite is not None:
        return rewrite[0]
    fallback = graph_fallback(ctx)
    return fallback[0] if fallback else None


@vllm_rule("SP100", Severity.warning, "capture sizes that get no decode graph")
def no_decode_graph(ctx: Context) -> Iterator[Hit]:
    """The model runner captures a decode graph only for token counts up to max-num-seqs x (1+k): larger
    capture sizes are silently left without one (catalog/startup.py `decode_graph_limit_source`)."""
    found = startup_model(ctx)
    graphs = ctx.profile.spec.cuda_graphs
    if found is None or graphs.capture_sizes is None:
        return
    facts = found[0].cuda_graphs
    if (runtime_mode(ctx) or graphs.mode.value) not in facts.separate_decode_modes:
        return
    for role, path, pool in pools(ctx):
        if pool.spec.max_num_seqs is None or role == Role.prefill:
            continue  # the memory-dependent default (SP191 asks to pin it); a prefill pool does not decode
        limit = pool.spec.max_num_seqs * (1 + ctx.profile.speculative_for(pool.spec).k)
        above = sorted({s for s in graphs.capture_sizes if s > limit})
        if above:
            yield Hit(_G + ("captureSizes",), f"pool {role}: capture sizes {above} get no decode graph: vLLM "
                      f"{found[0].version} captures decode graphs only up to maxNumSeqs x (1+k) = {limit} tokens "
                      f"({facts.decode_graph_limit_source.split(' ')[0]})",
                      f"drop them, or raise {'.'.join(path[-1:])}.maxNumSeqs")


@vllm_rule("SP110", Severity.error, "CUDA graph mode vLLM silently downgrades")
def graph_downgrade(ctx: Context) -> Iterator[Hit]:
    if (fallback := graph_fallback(ctx)) is not None:
        runs, why = fallback
        mode = ctx.profile.spec.cuda_graphs.mode.value
        yield Hit(_G + ("mode",), f"cudaGraphs.mode {mode} runs as {runs}: {why}; prefill and mixed batches run "
                  "without graphs", "set kernels.env.VLLM_USE_BREAKABLE_CUDAGRAPH to \"1\" (vLLM's own default for "
                  f"this model when it is unset), or declare cudaGraphs.mode: {runs}")


@vllm_rule("SP120", Severity.warning, "CUDA graph mode vLLM rewrites under adaptive verification")
def adaptive_graph_rewrite(ctx: Context) -> Iterator[Hit]:
    """A deterministic rewrite at start-up: the stack runs another mode than it declares (as SP110's fallback,
    but with no graphs lost: FULL's prefill graphs become piecewise ones)."""
    if (rewrite := adaptive_rewrite(ctx)) is not None:
        runs, why = rewrite
        yield Hit(_G + ("mode",), f"cudaGraphs.mode {ctx.profile.spec.cuda_graphs.mode.value} runs as {runs}: {why}",
                  f"declare cudaGraphs.mode: {runs}, what runs")


@vllm_rule("SP230", Severity.error, "--compilation-config key the pinned vLLM lacks")
def compilation_keys(ctx: Context) -> Iterator[Hit]:
    """spec.cudaGraphs.compilation is written into vLLM's --compilation-config beside the modelled keys: vLLM
    refuses a key its CompilationConfig does not have, and every worker fails at start."""
    if ctx.engine_catalog is None:
        return
    graphs = ctx.profile.spec.cuda_graphs
    for problem in ctx.engine_catalog.check_value("--compilation-config", graphs.compilation_config()):
        yield Hit(("spec", "cudaGraphs", "compilation"), f"{problem}: vLLM {ctx.profile.spec.versions.vllm} refuses it "
                  "at start", "write only keys of vLLM's CompilationConfig (docs/engine-args.md)")
    for _role, path, pool in pools(ctx):
        if pool.spec.compilation:
            for problem in ctx.engine_catalog.check_value("--compilation-config", {**pool.spec.compilation}):
                yield Hit((*path, "compilation"), f"{problem}: vLLM {ctx.profile.spec.versions.vllm} refuses it at "
                          "start", "write only keys of vLLM's CompilationConfig (docs/engine-args.md)")
