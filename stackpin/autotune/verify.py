"""Check a captured cache against a profile: versions, device, metadata, and the files each pool's ranks read."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import stackpin.jsonio as jsonio
from stackpin.autotune.cache import (
    METADATA_FIELDS,
    METADATA_KEY,
    WILDCARD,
    CacheFile,
    CacheInfo,
    FrozenModel,
    bad_input,
)
from stackpin.catalog import Catalog, load_catalog
from stackpin.errors import StackpinError
from stackpin.profile.model import AutotuneMode
from stackpin.profile.topology import PoolTopology, Role, model_parallel_of, topology_of
from stackpin.profile.tuning import SHARED_FILE, CacheFit, expected_files, fit_cache, pool_shape
from stackpin.yamlio import read_regular

if TYPE_CHECKING:

    from stackpin.profile.model import Pool, StackProfile



class Mismatch(FrozenModel):
    """One reason a cache does not fit a profile."""

    field: str
    message: str
    file: str | None = None
    pool: str | None = None
    # False: something verify could not check (a runtime value it was not given); reported, not failed on.
    blocking: bool = True

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        return f"{where}{self.field}: {self.message}"



# --- verify ------------------------------------------------------------------------------------


def per_rank_files(vllm_version: str, catalog: Catalog | None = None) -> bool:
    """Whether this vLLM reads `autotune_configs_dp{d}_rank{r}.json` (else one shared file)."""
    return (catalog or load_catalog()).engine.autotune_files.per_rank(vllm_version)


def arch_tokens(sm_arch: str) -> set[str]:
    """What FlashInfer names a GPU's arch in the arch-list directory (`sm_103` -> {'103a'})."""
    digits = sm_arch.removeprefix("sm_").rstrip("abf")
    if not digits.isdigit() or len(digits) < 2:
        raise StackpinError(f"cannot read SM arch {sm_arch!r}")
    major, minor = int(digits[:-1]), int(digits[-1])
    if major == 12 and minor == 0:
        return {"120f"}  # compilation_context.py _normalize_cuda_arch (raises below CUDA 12.9)
    if major >= 9:
        return {f"{major}{minor}a"}
    return {f"{major}{minor}"}


def tuning_groups(pool: Pool) -> list[list[int]]:
    """World ranks that must hold matching files: the whole world (DP folded in), or each PP
    stage's TP group when PP > 1 (kernel_warmup.flashinfer_autotune: `get_tp_group() if pp_size > 1`)."""
    tp, pp = pool.tensor_parallel, pool.pipeline_parallel
    world = model_parallel_of(pool)
    if pp == 1:
        return [[rank for _, rank, _ in expected_files(pool)]]
    return [list(range(dp * world + s * tp, dp * world + (s + 1) * tp))
            for dp in range(pool.data_parallel) for s in range(pp)]


def require_replayable(profile: StackProfile) -> None:
    """Refuse (exit 2) a stack whose engine reads no pinned cache: there is nothing to capture, verify or replay.
    The engine says so by naming no autotune directory stackpin can seed (ServingEngine.autotune_dir_env)."""
    from stackpin.backends import engine_of

    engine = engine_of(profile)
    if engine.autotune_dir_env is None:
        raise StackpinError(
            f"{profile.name}: {engine.label} {profile.spec.engine_version} keeps FlashInfer autotune results in "
            "its own cache directory, which stackpin cannot seed from a pinned cache: there is no autotune cache "
            "to capture, verify or replay for this stack",
            "leave spec.autotune.cache unset; mode tune (the engine tunes at start) or off")


def verify_cache(info: CacheInfo, profile: StackProfile, catalog: Catalog,
                 runtime: Mapping[str, str] | None = None) -> list[Mismatch]:
    """Everything that would stop the pinned engines from using this cache on the profile's GPUs.
    An empty list means: right FlashInfer, right device and arch, metadata FlashInfer accepts against the
    runtime (`runtime`: the pinned image's `_collect_metadata()`, as the capture Job records it), and a
    complete set of files for every pool the placement runs. A stack whose engine reads no pinned cache is
    refused (require_replayable)."""
    require_replayable(profile)
    out: list[Mismatch] = []
    if profile.spec.autotune.mode == AutotuneMode.off:
        out.append(Mismatch(field="mode", message=(
            f"{profile.name} runs with autotune off: no cache is read; set spec.autotune.mode: replay")))
    want_fi = profile.spec.versions.flashinfer
    gpu = catalog.gpu_of(profile.spec.target.platform)
    out += _check_versions(info, want_fi)
    out += _check_device(info, gpu.sm_arch)
    out += _check_metadata(info)
    out += _check_runtime(info, {**dict(runtime or {}), "flashinfer_version": want_fi, "gpu": gpu.device_name},
                          given=runtime is not None)
    topology = topology_of(profile, catalog)
    fit = fit_cache(topology, info.config_directories(), profile.spec.engine_version, catalog)
    for pool in fit.v2_store:
        out.append(Mismatch(field="ranks", pool=pool.role, message=(
            f"pool {pool.role} runs on one GPU: vLLM {profile.spec.versions.vllm} keeps its tuning in "
            "FlashInfer's managed v2 store there, not in autotune_configs files")))
    out += _check_pools(info, fit, topology.by_role, profile.spec.engine_version,
                        str(catalog.engine.autotune_files.per_rank_since))
    return out


def _grouped(files: Sequence[CacheFile], value_of: Any) -> dict[Any, list[CacheFile]]:
    groups: dict[Any, list[CacheFile]] = defaultdict(list)
    for f in files:
        groups[value_of(f)].append(f)
    return groups


def _n(files: Sequence[CacheFile]) -> str:
    return "1 file" if len(files) == 1 else f"{len(files)} files"


def _check_versions(info: CacheInfo, want: str) -> list[Mismatch]:
    out = []
    for version, files in sorted(_grouped(info.files, lambda f: f.flashinfer_version).items()):
        if version != want:
            out.append(Mismatch(field="flashinfer", file=files[0].path, message=(
                f"directory is for FlashInfer {version}, the profile pins {want}; vLLM looks only in "
                f"{want}/ ({_n(files)})")))
    return out


def _check_device(info: CacheInfo, sm_arch: str) -> list[Mismatch]:
    """The arch-list directory (the GPU name in _metadata is _check_runtime's)."""
    out = []
    tokens = arch_tokens(sm_arch)
    for arch, files in sorted(_grouped(info.files, lambda f: f.arch_list).items()):
        # FlashInfer names the set of visible GPUs; every GPU of a node is the rack's, so exactly one token.
        if arch not in tokens:
            out.append(Mismatch(field="arch", file=files[0].path, message=(
                f"arch-list directory {arch!r} is not {'/'.join(sorted(tokens))} ({sm_arch}, the rack's GPU): it "
                f"was captured on other GPUs ({_n(files)})")))
    return out


def _check_runtime(info: CacheInfo, runtime: Mapping[str, str], given: bool) -> list[Mismatch]:
    """FlashInfer's own rule (autotuner.py `_classify_metadata_mismatches`, applied by `load_configs`): a
    file's configs are used only when every saved `_metadata` value equals the runtime's or is "*"."""
    out = []
    for key in METADATA_FIELDS:
        if key not in runtime:
            out.append(Mismatch(field="runtime", blocking=False, message=(
                f"_metadata.{key} not checked against the pinned runtime image: pass --runtime-metadata with the "
                "JSON the capture Job writes (FlashInfer's _collect_metadata() in that image)")))
            continue
        want = runtime[key]
        groups = _grouped([f for f in info.files if f.metadata is not None], partial(_meta_of, key=key))
        for value, files in sorted(groups.items(), key=lambda kv: str(kv[0])):
            if value not in (want, WILDCARD):
                source = "runtime image" if given and key not in ("flashinfer_version", "gpu") else "stack"
                shown = "missing" if value is None else repr(value)
                out.append(Mismatch(field="metadata", file=files[0].path, message=(
                    f"_metadata.{key} is {shown}, the {source} has {want!r}: FlashInfer ignores the file's "
                    f"configs and every rank retunes ({_n(files)})")))
    return out


def _meta_of(f: CacheFile, key: str) -> Any:
    return f.meta(key)


def _check_metadata(info: CacheInfo) -> list[Mismatch]:
    out = []
    missing = [f for f in info.files if f.metadata is None]
    if missing:
        # FlashInfer loads such a file unchecked; stackpin refuses it, since nothing says where it came from.
        out.append(Mismatch(field="metadata", file=missing[0].path, message=(
            f"no {METADATA_KEY} block: FlashInfer would load it unchecked, but the environment it was tuned in "
            f"cannot be told (stackpin's rule) ({_n(missing)})")))
    by_meta = _grouped([f for f in info.files if f.metadata is not None],
                       lambda f: json.dumps(f.metadata, sort_keys=True))
    if len(by_meta) > 1:
        groups = sorted(by_meta.values(), key=lambda fs: (-len(fs), fs[0].path))
        base = groups[0][0]
        for files in groups[1:]:
            other = files[0]
            keys = sorted(k for k in {*(base.metadata or {}), *(other.metadata or {})}
                          if base.meta(k) != other.meta(k))
            diff = ", ".join(f"{k}={other.meta(k)!r} vs {base.meta(k)!r}" for k in keys)
            out.append(Mismatch(field="metadata", file=other.path, message=(
                f"_metadata conflicts with {base.path}: {diff} ({_n(files)}); one cache must come from one "
                "environment")))
    return out


def _check_pools(info: CacheInfo, fit: CacheFit, pools: Mapping[Role, PoolTopology], vllm: str,
                 per_rank_since: str) -> list[Mismatch]:
    """The file-level detail behind `fit` (which pools the cache's directories serve: profile/tuning.py)."""
    out: list[Mismatch] = []
    dirs = info.directories()
    if not fit.per_rank:
        # Before per-rank files: rank 0 reads autotune_configs.json and broadcasts it; per-rank files are unread.
        stray = [f for f in info.files if f.rank is not None]
        if stray:
            out.append(Mismatch(field="ranks", file=stray[0].path, message=(
                f"vLLM {vllm} reads only {SHARED_FILE}, never per-rank files (those need vLLM >= "
                f"{per_rank_since}) ({_n(stray)})")))
        # Each distinct engine config has its own config-hash directory: pools that differ in anything
        # but their replica count cannot share one.
        for roles in fit.unserved:
            out.append(Mismatch(field="ranks", pool=roles[0], message=(
                f"pool {'/'.join(roles)}: the stack runs {fit.configs} distinct engine configs, each tuned "
                f"into its own config directory, but {fit.shared_dirs} holds {SHARED_FILE} (the file vLLM "
                f"{vllm} reads)")))
        return out
    names_by_dir = {d: {f.name for f in files} for d, files in dirs.items()}
    used = set(fit.chosen.values())
    for role, directory in fit.chosen.items():
        out += _check_fingerprints(role, pools[role].spec, dirs[directory])
    for (role,) in fit.unserved:
        out += _missing(role, pools[role].spec, {d: n for d, n in names_by_dir.items() if d not in used})
    return out


def _missing(role: str, pool: Pool, candidates: Mapping[str, set[str]]) -> list[Mismatch]:
    """A pool without a complete directory: what the closest one (not another pool's) lacks."""
    shape, needed = pool_shape(pool), expected_files(pool)
    want = {name for _, _, name in needed}
    best = max(candidates, key=lambda d: (len(candidates[d] & want), -len(candidates[d] - want)), default=None)
    if best is None or not candidates[best] & want:
        first, last = needed[0][2], needed[-1][2]
        return [Mismatch(field="ranks", pool=role, message=(
            f"pool {role}: no config directory for {shape} (needs {len(needed)} files, {first} .. {last})"))]
    have = candidates[best]
    out = []
    for dp, rank, name in needed:
        if name not in have:
            out.append(Mismatch(field="ranks", pool=role, file=f"{best}/{name}", message=(
                f"pool {role}: missing {name} (dp {dp}, rank {rank} of {shape}); vLLM uses the cache only "
                "if every rank has its file, else every rank retunes")))
    for name in sorted(have - want):
        out.append(Mismatch(field="ranks", pool=role, file=f"{best}/{name}", message=(
            f"pool {role}: unexpected {name} for {shape}; the directory was tuned for another shape")))
    return out


def _check_fingerprints(role: str, pool: Pool, files: Sequence[CacheFile]) -> list[Mismatch]:
    """vLLM's all-ranks gate: every file of a tuning group has the same (metadata, key count)."""
    out = []
    by_rank = {f.rank: f for f in files}
    for group in tuning_groups(pool):
        lead = by_rank[group[0]]
        for rank in group[1:]:
            other = by_rank[rank]
            if other.fingerprint != lead.fingerprint:
                out.append(Mismatch(field="ranks", pool=role, file=other.path, message=(
                    f"pool {role}: rank {rank} has {other.entries} entries, rank {group[0]} has {lead.entries} "
                    "(or different metadata); vLLM uses the cache only if all ranks of a tuning group match")))
        for rank in group:
            if by_rank[rank].entries == 0:
                out.append(Mismatch(field="ranks", pool=role, file=by_rank[rank].path, message=(
                    f"pool {role}: rank {rank}'s file has no tuned entries; a hit would skip tuning and run "
                    "FlashInfer's fallback tactics")))
    return out




MAX_RUNTIME_BYTES = 64 * 1024  # seven short strings


def read_runtime_metadata(path: Path) -> dict[str, str]:
    """The runtime's `_collect_metadata()` as the capture Job writes it: a JSON object of METADATA_FIELDS to
    strings. A regular file, read with a byte limit; anything else is bad input naming the file."""
    try:
        raw = read_regular(path, MAX_RUNTIME_BYTES)
    except OSError as exc:
        raise bad_input(path, (exc.strerror or "") if exc.errno == 0 else f"cannot read: {exc.strerror}") from None
    try:
        doc = jsonio.loads(raw)
    except jsonio.NestingError as exc:
        raise bad_input(path, str(exc)) from None
    except ValueError as exc:  # UnicodeDecodeError is one
        raise bad_input(path, f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise bad_input(path, "not a JSON object of FlashInfer's metadata fields")
    for key in METADATA_FIELDS:
        if not isinstance(doc.get(key), str):
            raise bad_input(path, f"{key}: missing or not a string (fields: {', '.join(METADATA_FIELDS)})")
    return {key: doc[key] for key in METADATA_FIELDS}
