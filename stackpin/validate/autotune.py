"""FlashInfer autotune: off, tune at start, or replay a pinned cache (docs/facts.md#autotune-cache)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from stackpin.catalog import Catalog
from stackpin.profile.model import AutotuneMode, CudaGraphMode, StackProfile
from stackpin.profile.topology import Role, Topology
from stackpin.profile.tuning import SHARED_FILE, ConfigDirectory, expected_files, fit_cache, pool_shape, ranks_summary
from stackpin.rules import Context, Hit, Severity, rule

_A = ("spec", "autotune")


@rule("SP201", Severity.error, "replay without a cache")
def replay_without_cache(ctx: Context) -> Iterator[Hit]:
    if ctx.profile.spec.autotune.mode == AutotuneMode.replay and not ctx.profile.spec.autotune.cache:
        yield Hit(_A + ("mode",), "autotune.mode is replay but no cache is pinned",
                  "set autotune.cache to the OCI reference made by `stackpin autotune pack --push`")


@rule("SP202", Severity.warning, "cache pinned but not replayed")
def cache_unused(ctx: Context) -> Iterator[Hit]:
    autotune = ctx.profile.spec.autotune
    if autotune.cache and autotune.mode != AutotuneMode.replay:
        yield Hit(_A + ("cache",), f"a cache is pinned but autotune.mode is {autotune.mode}; it is not used",
                  "set mode: replay")


@rule("SP203", Severity.warning, "autotune at every start")
def tune_at_start(ctx: Context) -> Iterator[Hit]:
    from stackpin.backends import engine_of

    if ctx.profile.spec.autotune.mode == AutotuneMode.tune:
        engine = engine_of(ctx.profile)
        # An engine stackpin cannot seed a pinned cache for (no autotune_dir_env) has no replay to offer.
        hint = ("capture a cache once, pack it and replay it (mode: replay)" if engine.autotune_dir_env else
                f"stackpin cannot replay a pinned cache into {engine.label} yet; mode: off skips tuning")
        yield Hit(_A + ("mode",), "tuning at start costs ~43 s per shape profile on every restart and two fresh "
                  "tunes can differ by ~9% in serving speed (flashinfer#3920)", hint)


@rule("SP204", Severity.warning, "autotune with CUDA graphs off")
def autotune_without_graphs(ctx: Context) -> Iterator[Hit]:
    from stackpin.backends import engine_of

    # SGLang too tunes right before capture (model_executor/runner/base_runner.py:266-271 in 0.5.21).
    if ctx.profile.spec.autotune.mode != AutotuneMode.off and ctx.profile.spec.cuda_graphs.mode == CudaGraphMode.NONE:
        yield Hit(_A + ("mode",), f"{engine_of(ctx.profile).label} tunes kernels right before CUDA graph capture; "
                  "with graphs off the tuned shapes do not match what runs", "enable CUDA graphs or turn autotune off")


def cache_shape_problems(profile: StackProfile, topology: Topology, directories: Sequence[ConfigDirectory],
                         catalog: Catalog) -> list[tuple[Role, str]]:
    """(pool, why) for each pool the pinned cache, with these config directories, does not serve:
    vLLM finds no tuning for it and retunes at every start (SP205; render refuses such a lock too).
    Which pools a cache serves is profile/tuning.py's `fit_cache`, as `stackpin autotune verify` asks."""
    if profile.spec.autotune.mode != AutotuneMode.replay:
        return []
    vllm = profile.spec.engine_version
    fit = fit_cache(topology, directories, vllm, catalog)
    n = len(directories)
    captured = (f"{n} config {'directory' if n == 1 else 'directories'}: {ranks_summary(directories)}" if n
                else "no config directory")
    out: list[tuple[Role, str]] = []
    for pool in fit.v2_store:
        out.append((pool.role, f"pool {pool.role} runs on one GPU, where vLLM {vllm} keeps its tuning in "
                    f"FlashInfer's v2 store, not in the files of the pinned cache (captured with {captured})"))
    for roles in fit.unserved:
        if fit.per_rank:
            pool = topology.by_role[roles[0]]
            out.append((pool.role, f"pool {pool.role} ({pool_shape(pool.spec)}, {len(expected_files(pool.spec))} "
                        f"rank files) has no config directory in the pinned cache, which was captured with "
                        f"{captured}; vLLM retunes the pool at every start"))
            continue
        holding = f", {fit.shared_dirs} of them with {SHARED_FILE}" if fit.shared_dirs != n else ""
        out.append((roles[0], f"pool {'/'.join(roles)}: vLLM {vllm} reads one {SHARED_FILE} per engine config and "
                    f"the stack runs {fit.configs}, but the pinned cache was captured with {captured}{holding}; "
                    "vLLM retunes at every start"))
    return out


@rule("SP205", Severity.error, "autotune cache captured for another stack shape")
def cache_shape(ctx: Context) -> Iterator[Hit]:
    if ctx.autotune_cache is None:
        return  # the cache's contents are known once locked: `stackpin lock` and `render` check them
    for _, why in cache_shape_problems(ctx.profile, ctx.topology, ctx.autotune_cache, ctx.catalog):
        yield Hit(_A + ("cache",), why, "capture a cache with this stack's engine flags (stackpin autotune "
                  "capture-job), pack and pin it; `stackpin autotune verify` names every missing file")
