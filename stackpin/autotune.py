"""FlashInfer autotune caches as pinned, verified, mountable OCI images.

A vLLM engine on SM >= 90 tunes FlashInfer kernels at startup and keeps the winners in JSON files.
stackpin reads a captured cache (`inspect_cache`), checks it against a profile (`verify_cache`),
packs it reproducibly (`pack_cache`), pushes it to a registry or an OCI layout (`push_cache`,
`write_cache_to_layout`) so a profile can pin its digest, and fetches it back safely (`fetch_cache`).

Published form (`cache_image`): a minimal OCI *image*, because workers mount the cache as a Kubernetes
image volume (KEP-4639), and containerd / CRI-O mount only images: an index (`dev.stackpin.autotune.*`
annotations, what `stackpin lock` reads) over one image manifest per CPU platform (linux/arm64,
linux/amd64; the cache is for GPUs, the CPU platform only decides which manifest a node pulls), all
sharing one standard layer (`application/vnd.oci.image.layer.v1.tar+gzip`, the deterministic tar.gz
rooted at `flashinfer_autotune_cache/`) and each with a timestamp-free image config whose
`rootfs.diff_ids` names the uncompressed tar. No `artifactType`: OCI image-spec 1.1 requires it only
with the empty config and describes it as the type "when the manifest is used for an artifact"; these
manifests are images (tools, stackpin's own `platforms_of` among them, read `artifactType` as "not a
runnable image"), so the cache is named by the `dev.stackpin.autotune.type` annotation instead.
`fetch_cache` still reads the earlier OCI 1.1 artifact form (empty config, `artifactType`, a
stackpin-specific layer type), which image volumes cannot mount; `verify` reports it.

Layout facts, each checked in upstream source (vLLM sdists 0.28.0, 0.31.0, 0.32.0, 0.33.0 from PyPI;
flashinfer-python wheels 0.7.0.post1 and 0.7.2.post1 from PyPI):

- Directory: `$VLLM_CACHE_ROOT/flashinfer_autotune_cache/<flashinfer version>/<arch list>/<config
  hash>/` -- vllm/model_executor/warmup/flashinfer_autotune_cache.py (`resolve_flashinfer_autotune_file`,
  0.33.0 `flashinfer_autotune_root`): the two middle parts are the last two parts of FlashInfer's
  `jit.env.FLASHINFER_WORKSPACE_DIR`; the hash is `sha256(vllm_config.compute_hash(...))` hex.
- `<flashinfer version>/<arch list>`: flashinfer/jit/env.py `_get_workspace_dir_name()` =
  `FLASHINFER_CACHE_DIR / flashinfer.__version__ / "_".join(f"{major}{minor}" for sorted archs)`,
  where compilation_context.py `_normalize_cuda_arch` gives SM 9.x and SM >= 10 an `a` suffix
  (sm_103 -> `103a`), SM 12.0 `0f`/`0a` by CUDA version, older archs none (sm_80 -> `80`).
- File names: vLLM >= 0.32.0 writes one file per rank, `autotune_configs_dp{dp_rank}_rank{rank}.json`
  (0.32.0 kernel_warmup.py `flashinfer_autotune`; 0.33.0 `flashinfer_autotune_filename`), where
  `rank` is the WORLD group rank: with DP > 1, vllm/distributed/parallel_state.py
  `init_distributed_environment` folds DP into the world (`rank = data_parallel_rank * world_size +
  rank`, world_size = TP x PP), so DP rank d of a TP2 pool owns ranks 2d and 2d+1.
  vLLM <= 0.31.0 (checked 0.28.0 and 0.31.0) writes one `autotune_configs.json` that rank 0 reads and
  broadcasts; those versions never read per-rank files.
- Per-rank cache hit (0.32.0/0.33.0 kernel_warmup.py `_all_ranks_have_matching_cache`): the tuning
  group (the world group, or each PP stage's TP group when PP > 1) uses the files only if EVERY rank
  has one and all have the same fingerprint = (`_metadata`, number of top-level keys other than
  `_metadata`); otherwise every rank retunes (a rank-0-only hit deadlocked before this, vllm#57423).
- vLLM 0.33.0 (`use_flashinfer_autotune_v2`) sends a one-rank, one-node engine to FlashInfer's managed
  v2 store (`flashinfer/autotune_cache.py`, one JSON per entry) instead; such pools cannot use these files.
- File content (flashinfer/autotuner/autotuner.py `save_configs`/`load_configs`/`_collect_metadata`,
  same in 0.7.0.post1 and 0.7.2.post1): `_metadata` = {flashinfer_version, cuda_version,
  cublas_version, cudnn_version, cudnn_frontend_version, cutlass_dsl_version, gpu (device name)};
  optional `_records` (namespaced records); then `str(key_fields) -> [runner class name, tactic]`;
  last `_generation` (sha256 hex of the rest). `load_configs` ignores the whole file when a
  metadata value differs from the running environment, unless the saved value is `"*"`; saved values
  None/"unknown"/"None" are indeterminate and also make it ignore the file.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import stat
import tarfile
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from stackpin.errors import InputError, IntegrityError, Location, Problem, ResolveError, StackpinError

if TYPE_CHECKING:
    from stackpin.catalog import Catalog
    from stackpin.oci import RegistryClient, Resolved
    from stackpin.ocilayout import LayoutWriter
    from stackpin.profile import Pool, StackProfile

ARTIFACT_TYPE = "application/vnd.stackpin.autotune-cache.v1"  # value of TYPE_ANNOTATION (and legacy artifactType)
LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"  # standard layers: what runtimes unpack
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
# The earlier OCI 1.1 artifact form (empty config + artifactType): readable, not mountable.
LEGACY_LAYER_TAR_GZIP = "application/vnd.stackpin.autotune-cache.v1.tar+gzip"
LEGACY_LAYER_TAR = "application/vnd.stackpin.autotune-cache.v1.tar"
TITLE = "flashinfer-autotune-cache.tar.gz"
ANNOTATION_PREFIX = "dev.stackpin.autotune."
TYPE_ANNOTATION = f"{ANNOTATION_PREFIX}type"
TITLE_ANNOTATION = "org.opencontainers.image.title"
# CPU platforms of the published image: a node pulls the manifest of its own platform.
IMAGE_PLATFORMS = (("linux", "arm64"), ("linux", "amd64"))

CACHE_DIR_NAME = "flashinfer_autotune_cache"  # under $VLLM_CACHE_ROOT (vLLM flashinfer_autotune_cache.py)
SHARED_FILE = "autotune_configs.json"  # vLLM <= 0.31.0: one file, read by rank 0 and broadcast
PER_RANK_SINCE_VLLM = (0, 32, 0)  # first vLLM with autotune_configs_dp{d}_rank{r}.json (0.32.0 sdist)
# vLLM 0.33.0 `use_flashinfer_autotune_v2`: a one-rank engine (world size 1, one node, no elastic EP)
# keeps its tuning in FlashInfer's managed v2 store when FlashInfer has `autotune_v2` (0.7.x does),
# never in these files. 0.32.0 has no such path.
V2_STORE_SINCE_VLLM = (0, 33, 0)

METADATA_KEY = "_metadata"
GENERATION_KEY = "_generation"
RECORDS_KEY = "_records"
# FlashInfer `_collect_metadata()` keys, in its order.
METADATA_FIELDS = ("flashinfer_version", "cuda_version", "cublas_version", "cudnn_version",
                   "cudnn_frontend_version", "cutlass_dsl_version", "gpu")
INDETERMINATE = (None, "unknown", "None")  # autotuner.py `_INDETERMINATE_META_VALUES`
WILDCARD = "*"

_RANK_FILE = re.compile(r"autotune_configs_dp(0|[1-9][0-9]*)_rank(0|[1-9][0-9]*)\.json")
_HASH_DIR = re.compile(r"[0-9a-f]{64}")
_VERSION_DIR = re.compile(r"[0-9]+(\.[0-9]+)*([.+_-]?[A-Za-z0-9]+)*")
_ARCH_DIR = re.compile(r"[0-9]+[a-z]?(_[0-9]+[a-z]?)*")

# Unpacking limits: a cache is some MiB of JSON; anything far larger is not one.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_MEMBERS = 100_000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CacheFile(_Frozen):
    """One tuned-configs JSON file of a captured cache."""

    path: str = Field(description="Relative to the flashinfer_autotune_cache directory, '/'-separated.")
    flashinfer_version: str = Field(description="The flashinfer-version directory.")
    arch_list: str = Field(description="The arch-list directory, e.g. '103a' or '100a_103a'.")
    config_hash: str = Field(description="sha256 of vLLM's config hash: one directory per engine config.")
    dp: int | None = Field(description="Data-parallel rank; None for the shared pre-0.32 file.")
    rank: int | None = Field(description="World rank; None for the shared pre-0.32 file.")
    metadata: dict[str, Any] | None = Field(description="FlashInfer's `_metadata` block, None if absent.")
    entries: int = Field(description="Tuned entries: keys other than _metadata, _generation, _records.")
    generation: str | None = None
    records: bool = Field(False, description="Whether the file has FlashInfer's `_records` block.")
    sha256: str

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def directory(self) -> str:
        """`<flashinfer version>/<arch list>/<config hash>`: the unit vLLM reads as one cache."""
        return str(PurePosixPath(self.path).parent)

    @property
    def fingerprint(self) -> tuple[str, int]:
        """What vLLM compares across ranks (`_autotune_cache_fingerprint`): metadata and key count."""
        others = self.entries + (self.generation is not None) + self.records
        return json.dumps(self.metadata, sort_keys=True), others

    def meta(self, key: str) -> Any:
        return (self.metadata or {}).get(key)


class CacheInfo(_Frozen):
    """A captured cache: every file, sorted by path."""

    root: str
    files: tuple[CacheFile, ...]

    def directories(self) -> dict[str, list[CacheFile]]:
        groups: dict[str, list[CacheFile]] = defaultdict(list)
        for f in self.files:
            groups[f.directory].append(f)
        return dict(sorted(groups.items()))

    def values(self, key: str) -> list[str]:
        """Distinct `_metadata[key]` values (as text), sorted."""
        return sorted({str(f.meta(key)) for f in self.files if f.metadata is not None})

    @property
    def flashinfer_versions(self) -> list[str]:
        return sorted({f.flashinfer_version for f in self.files})

    @property
    def arch_lists(self) -> list[str]:
        return sorted({f.arch_list for f in self.files})

    def ranks_summary(self) -> str:
        """Compact `<hash12>:dp0-7 rank0-15 (16 files)` per config directory, `; `-joined."""
        parts = []
        for _, files in self.directories().items():
            h = files[0].config_hash[:12]
            if any(f.rank is None for f in files):
                parts.append(f"{h}:shared ({len(files)} file{'s' if len(files) != 1 else ''})")
                continue
            dps = _ranges(f.dp for f in files if f.dp is not None)
            ranks = _ranges(f.rank for f in files if f.rank is not None)
            parts.append(f"{h}:dp{dps} rank{ranks} ({len(files)} file{'s' if len(files) != 1 else ''})")
        return "; ".join(parts)

    def summary(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "flashinfer": self.flashinfer_versions,
            "arch": self.arch_lists,
            "device": self.values("gpu"),
            "ranks": self.ranks_summary(),
            "files": [f.model_dump(mode="json") for f in self.files],
        }


class Mismatch(_Frozen):
    """One reason a cache does not fit a profile."""

    field: str
    message: str
    file: str | None = None
    pool: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        return f"{where}{self.field}: {self.message}"


def _ranges(values: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    nums = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


def _bad(file: Path | str, message: str) -> InputError:
    return InputError([Problem(Location(str(file)), "", message)])


# --- inspect -----------------------------------------------------------------------------------


def cache_root(path: str | os.PathLike[str]) -> Path:
    """The `flashinfer_autotune_cache` directory: `path` itself, or its child of that name (so a
    whole `$VLLM_CACHE_ROOT` can be given)."""
    path = Path(path)
    if not path.exists():
        raise _bad(path, "no such directory")
    if not path.is_dir():
        raise _bad(path, "is not a directory (expected a flashinfer_autotune_cache directory)")
    child = path / CACHE_DIR_NAME
    return child if child.is_dir() and not child.is_symlink() else path


def inspect_cache(path: str | os.PathLike[str]) -> CacheInfo:
    """Read every file of a captured cache. Raises InputError naming the file on anything that is
    not `<flashinfer version>/<arch list>/<config hash>/autotune_configs[_dp{d}_rank{r}].json`."""
    root = cache_root(path)
    files: list[CacheFile] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel = here.relative_to(root)
        depth = len(rel.parts)
        dirnames.sort()
        for name in dirnames:
            _check_entry(here / name, depth, is_dir=True)
        for name in sorted(filenames):
            full = here / name
            _check_entry(full, depth, is_dir=False)
            files.append(_read_file(full, rel / name))
    if not files:
        raise _bad(root, "no autotune files found (expected <flashinfer version>/<arch list>/<config hash>/"
                         "autotune_configs_dp{d}_rank{r}.json)")
    return CacheInfo(root=str(root), files=tuple(sorted(files, key=lambda f: f.path)))


def _check_entry(full: Path, depth: int, *, is_dir: bool) -> None:
    """`depth` is the depth of the parent relative to the cache root."""
    name = full.name
    if full.is_symlink():
        raise _bad(full, "symbolic link in an autotune cache; copy the files instead")
    if is_dir:
        expected = {0: ("flashinfer version", _VERSION_DIR), 1: ("arch list (e.g. 103a)", _ARCH_DIR),
                    2: ("config hash (64 hex digits)", _HASH_DIR)}.get(depth)
        if expected is None:
            raise _bad(full, "unexpected directory: a config-hash directory holds only autotune_configs*.json files")
        what, pattern = expected
        if not pattern.fullmatch(name):
            raise _bad(full, f"unexpected directory name {name!r}: expected a {what}")
        return
    if depth != 3:
        raise _bad(full, "unexpected file: autotune files live in <flashinfer version>/<arch list>/<config hash>/")
    if not full.is_file():
        raise _bad(full, "not a regular file")
    if name != SHARED_FILE and not _RANK_FILE.fullmatch(name):
        raise _bad(full, f"unexpected file name {name!r}: expected autotune_configs_dp{{d}}_rank{{r}}.json "
                         "(or autotune_configs.json from vLLM <= 0.31)")


def _read_file(full: Path, rel: Path) -> CacheFile:
    try:
        raw = full.read_bytes()
    except OSError as exc:
        raise _bad(full, f"cannot read: {exc.strerror}") from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(full, f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _bad(full, "not a JSON object (FlashInfer save_configs writes one)")
    metadata = doc.get(METADATA_KEY)
    if metadata is not None and not isinstance(metadata, dict):
        raise _bad(full, f"{METADATA_KEY} is not a JSON object")
    generation = doc.get(GENERATION_KEY)
    if generation is not None and not isinstance(generation, str):
        raise _bad(full, f"{GENERATION_KEY} is not a string")
    entries = 0
    for key, value in doc.items():
        if key in (METADATA_KEY, GENERATION_KEY, RECORDS_KEY):
            continue
        # FlashInfer load_configs reads value[0] as the runner name and value[1] as the tactic.
        if not (isinstance(value, list) and len(value) >= 2 and isinstance(value[0], str)):
            raise _bad(full, f"entry {key[:80]!r} is not [runner, tactic, ...]")
        entries += 1
    version, arch, config_hash, name = rel.parts
    match = _RANK_FILE.fullmatch(name)
    return CacheFile(
        path=rel.as_posix(),
        flashinfer_version=version,
        arch_list=arch,
        config_hash=config_hash,
        dp=int(match.group(1)) if match else None,
        rank=int(match.group(2)) if match else None,
        metadata=metadata,
        entries=entries,
        generation=generation,
        records=RECORDS_KEY in doc,
        sha256=hashlib.sha256(raw).hexdigest(),
    )


# --- verify ------------------------------------------------------------------------------------


def _version_tuple(version: str) -> tuple[int, int, int]:
    nums = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not nums:
        raise StackpinError(f"cannot read version {version!r}")
    return int(nums.group(1)), int(nums.group(2)), int(nums.group(3))


def per_rank_files(vllm_version: str) -> bool:
    """Whether this vLLM reads `autotune_configs_dp{d}_rank{r}.json` (else one shared file)."""
    return _version_tuple(vllm_version) >= PER_RANK_SINCE_VLLM


def arch_tokens(sm_arch: str) -> set[str]:
    """What FlashInfer names a GPU's arch in the arch-list directory (`sm_103` -> {'103a'})."""
    digits = sm_arch.removeprefix("sm_").rstrip("abf")
    if not digits.isdigit() or len(digits) < 2:
        raise StackpinError(f"cannot read SM arch {sm_arch!r}")
    major, minor = int(digits[:-1]), int(digits[-1])
    if major == 12 and minor == 0:
        return {"120f", "120a"}  # depends on the CUDA version (12.9+: f)
    if major >= 9:
        return {f"{major}{minor}a"}
    return {f"{major}{minor}"}


def expected_files(pool: Pool, per_rank: bool = True) -> list[tuple[int, int, str]]:
    """(dp, world rank, file name) for every rank of one replica of `pool`."""
    if not per_rank:
        return []
    world = pool.tensor_parallel * pool.pipeline_parallel
    out = []
    for dp in range(pool.data_parallel):
        for local in range(world):
            # vLLM folds DP into the world group when DP > 1 (parallel_state.init_distributed_environment).
            rank = dp * world + local
            out.append((dp, rank, f"autotune_configs_dp{dp}_rank{rank}.json"))
    return out


def tuning_groups(pool: Pool) -> list[list[int]]:
    """World ranks that must hold matching files: the whole world (DP folded in), or each PP
    stage's TP group when PP > 1 (kernel_warmup.flashinfer_autotune: `get_tp_group() if pp_size > 1`)."""
    tp, pp = pool.tensor_parallel, pool.pipeline_parallel
    world = tp * pp
    if pp == 1:
        return [list(range(world * pool.data_parallel))]
    return [list(range(dp * world + s * tp, dp * world + (s + 1) * tp))
            for dp in range(pool.data_parallel) for s in range(pp)]


def _shape(pool: Pool) -> str:
    parts = [f"TP{pool.tensor_parallel}"]
    if pool.pipeline_parallel > 1:
        parts.append(f"PP{pool.pipeline_parallel}")
    if pool.data_parallel > 1:
        parts.append(f"DP{pool.data_parallel}")
    return " x ".join(parts)


def verify_cache(info: CacheInfo, profile: StackProfile, catalog: Catalog) -> list[Mismatch]:
    """Everything that would stop the pinned engines from using this cache on the profile's GPUs.
    An empty list means: right FlashInfer, right device and arch, consistent metadata, and a
    complete set of files for every pool the placement runs."""
    out: list[Mismatch] = []
    if profile.spec.autotune.mode == "off":
        out.append(Mismatch(field="mode", message=(
            f"{profile.name} runs with autotune off: no cache is read; set spec.autotune.mode: replay")))
    want_fi = profile.spec.versions.flashinfer
    gpu = catalog.gpu_of(profile.spec.target.platform)
    out += _check_versions(info, want_fi)
    out += _check_device(info, gpu.device_name, gpu.sm_arch)
    out += _check_metadata(info)
    per_rank = per_rank_files(profile.spec.versions.vllm)
    pools = profile.spec.placement.active_pools()
    if per_rank and _version_tuple(profile.spec.versions.vllm) >= V2_STORE_SINCE_VLLM:
        for role, pool in pools.items():
            if pool.gpus_per_replica == 1:
                out.append(Mismatch(field="ranks", pool=role, message=(
                    f"pool {role} runs on one GPU: vLLM {profile.spec.versions.vllm} keeps its tuning in "
                    "FlashInfer's managed v2 store there, not in autotune_configs files")))
        pools = {role: pool for role, pool in pools.items() if pool.gpus_per_replica > 1}
    out += _check_pools(info, pools, per_rank, profile.spec.versions.vllm)
    return out


def _grouped(files: Sequence[CacheFile], value_of: Any) -> dict[Any, list[CacheFile]]:
    groups: dict[Any, list[CacheFile]] = defaultdict(list)
    for f in files:
        groups[value_of(f)].append(f)
    return groups


def _by_meta(info: CacheInfo, key: str) -> list[tuple[Any, list[CacheFile]]]:
    """Files by `_metadata[key]`; files without a usable value are `_check_metadata`'s to report."""
    usable = [f for f in info.files if f.metadata is not None and f.meta(key) not in INDETERMINATE]
    return sorted(_grouped(usable, lambda f: f.meta(key)).items(), key=lambda kv: str(kv[0]))


def _n(files: Sequence[CacheFile]) -> str:
    return "1 file" if len(files) == 1 else f"{len(files)} files"


def _check_versions(info: CacheInfo, want: str) -> list[Mismatch]:
    out = []
    for version, files in sorted(_grouped(info.files, lambda f: f.flashinfer_version).items()):
        if version != want:
            out.append(Mismatch(field="flashinfer", file=files[0].path, message=(
                f"directory is for FlashInfer {version}, the profile pins {want}; vLLM looks only in "
                f"{want}/ ({_n(files)})")))
    for value, files in _by_meta(info, "flashinfer_version"):
        if value not in (want, WILDCARD):
            out.append(Mismatch(field="flashinfer", file=files[0].path, message=(
                f"_metadata.flashinfer_version is {value!r}, the profile pins {want}; FlashInfer ignores "
                f"the file ({_n(files)})")))
    return out


def _check_device(info: CacheInfo, device: str, sm_arch: str) -> list[Mismatch]:
    out = []
    tokens = arch_tokens(sm_arch)
    for arch, files in sorted(_grouped(info.files, lambda f: f.arch_list).items()):
        if not tokens & set(arch.split("_")):
            out.append(Mismatch(field="arch", file=files[0].path, message=(
                f"arch-list directory {arch!r} does not include {'/'.join(sorted(tokens))} ({sm_arch}, the "
                f"rack's GPU); FlashInfer on that GPU looks elsewhere ({_n(files)})")))
    for value, files in _by_meta(info, "gpu"):
        if value not in (device, WILDCARD):
            out.append(Mismatch(field="device", file=files[0].path, message=(
                f"tuned on {value!r}, the rack's GPU is {device!r}; FlashInfer ignores the file ({_n(files)})")))
    return out


def _check_metadata(info: CacheInfo) -> list[Mismatch]:
    out = []
    missing = [f for f in info.files if f.metadata is None]
    if missing:
        out.append(Mismatch(field="metadata", file=missing[0].path, message=(
            f"no {METADATA_KEY} block: the environment it was tuned in cannot be checked ({_n(missing)})")))
    for key in METADATA_FIELDS:
        bad = [f for f in info.files if f.metadata is not None and f.meta(key) in INDETERMINATE]
        if bad:
            out.append(Mismatch(field="metadata", file=bad[0].path, message=(
                f"_metadata.{key} is {bad[0].meta(key)!r} (missing or indeterminate): FlashInfer ignores "
                f"the file ({_n(bad)})")))
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


def _check_pools(info: CacheInfo, pools: Mapping[str, Pool], per_rank: bool, vllm: str) -> list[Mismatch]:
    out: list[Mismatch] = []
    dirs = info.directories()
    names_by_dir = {d: {f.name for f in files} for d, files in dirs.items()}
    if not per_rank:
        # vLLM <= 0.31: rank 0 reads autotune_configs.json and broadcasts it; per-rank files are unread.
        stray = [f for f in info.files if f.rank is not None]
        if stray:
            out.append(Mismatch(field="ranks", file=stray[0].path, message=(
                f"vLLM {vllm} reads only {SHARED_FILE}, never per-rank files (those need vLLM >= 0.32.0) "
                f"({_n(stray)})")))
        # Each distinct engine config has its own config-hash directory: pools that differ in anything
        # but their replica count cannot share one.
        configs: dict[str, list[str]] = {}
        for role, pool in pools.items():
            key = pool.model_dump_json(exclude={"replicas", "nodes_per_replica"})
            configs.setdefault(key, []).append(role)
        have = sum(1 for names in names_by_dir.values() if SHARED_FILE in names)
        if have < len(configs):
            for roles in configs.values():
                out.append(Mismatch(field="ranks", pool=roles[0], message=(
                    f"pool {'/'.join(roles)}: the stack runs {len(configs)} distinct engine configs, each tuned "
                    f"into its own config directory, but {have} holds {SHARED_FILE} (the file vLLM {vllm} reads)")))
        return out
    # First give every pool a directory holding exactly its files; pools of one shape but different
    # engine configs (different hashes) each prefer a directory no other pool took.
    used: set[str] = set()
    chosen: dict[str, str] = {}
    for role, pool in pools.items():
        want = {name for _, _, name in expected_files(pool)}
        exact = [d for d, names in names_by_dir.items() if names == want]
        if exact:
            chosen[role] = next((d for d in exact if d not in used), exact[0])
            used.add(chosen[role])
    for role, pool in pools.items():
        if role in chosen:
            out += _check_fingerprints(role, pool, dirs[chosen[role]])
            continue
        out += _missing(role, pool, {d: n for d, n in names_by_dir.items() if d not in used})
    return out


def _missing(role: str, pool: Pool, candidates: Mapping[str, set[str]]) -> list[Mismatch]:
    """A pool without a complete directory: what the closest one (not another pool's) lacks."""
    shape, needed = _shape(pool), expected_files(pool)
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


# --- pack ----------------------------------------------------------------------------------------


def pack_cache(path: str | os.PathLike[str], compress: bool = True) -> bytes:
    """A reproducible tar (gzip by default) of the cache, rooted at `flashinfer_autotune_cache/` so
    that unpacking it into `$VLLM_CACHE_ROOT` is all a worker needs. Sorted entries, mtime 0,
    uid/gid 0, empty owner names, modes 0755/0644, USTAR (no pax timestamps): the same files give
    the same bytes whenever and wherever they were copied."""
    info = inspect_cache(path)  # never pack what we could not read
    return pack_info(info, compress)


def pack_info(info: CacheInfo, compress: bool = True) -> bytes:
    root = Path(info.root)
    dirs: set[str] = set()
    for f in info.files:
        parents = PurePosixPath(f.path).parents
        dirs.update(str(p) for p in parents if str(p) != ".")
    entries = sorted([(d, None) for d in dirs] + [(f.path, f) for f in info.files], key=lambda e: e[0])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        top = tarfile.TarInfo(CACHE_DIR_NAME)
        _normalize(top, tarfile.DIRTYPE, 0o755)
        tar.addfile(top)
        for rel, f in entries:
            member = tarfile.TarInfo(f"{CACHE_DIR_NAME}/{rel}")
            if f is None:
                _normalize(member, tarfile.DIRTYPE, 0o755)
                tar.addfile(member)
                continue
            data = (root / rel).read_bytes()
            if hashlib.sha256(data).hexdigest() != f.sha256:
                raise _bad(root / rel, "changed while being packed")
            _normalize(member, tarfile.REGTYPE, 0o644)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    raw = buf.getvalue()
    # gzip header: mtime 0 and no file name, so the bytes depend on the content only.
    return gzip.compress(raw, compresslevel=9, mtime=0) if compress else raw


def _normalize(member: tarfile.TarInfo, kind: bytes, mode: int) -> None:
    member.type, member.mode, member.mtime = kind, mode, 0
    member.uid = member.gid = 0
    member.uname = member.gname = ""


# --- push / layout ---------------------------------------------------------------------------------


def cache_annotations(info: CacheInfo) -> dict[str, str]:
    return {
        f"{ANNOTATION_PREFIX}flashinfer": ",".join(info.flashinfer_versions),
        f"{ANNOTATION_PREFIX}device": ",".join(info.values("gpu")) or "unknown",
        f"{ANNOTATION_PREFIX}arch": ",".join(info.arch_lists),
        f"{ANNOTATION_PREFIX}ranks": info.ranks_summary(),
        TITLE_ANNOTATION: TITLE,
    }


class CacheImage(_Frozen):
    """A packed cache as a minimal OCI image: what `push_cache` and `write_cache_to_layout` store.

    `blobs` are (bytes, media type): the layer, then one config per platform; `manifests` the
    platform image manifests, in `IMAGE_PLATFORMS` order; `index` the image index over them. Store
    them in that order (registries refuse a manifest whose blobs or children are missing)."""

    blobs: tuple[tuple[bytes, str], ...]
    manifests: tuple[bytes, ...]
    index: bytes
    annotations: dict[str, str]
    platforms: dict[str, str] = Field(description="os/arch -> platform manifest digest.")

    @property
    def digest(self) -> str:
        from stackpin.oci import sha256_digest

        return sha256_digest(self.index)


def cache_image(info: CacheInfo, annotations: Mapping[str, str] | None = None) -> CacheImage:
    """The image form of a cache; `annotations` are added to the index's (stand-in notes, say).
    Deterministic: no timestamps anywhere, canonical JSON, so the same files give the same digests."""
    from stackpin.oci import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, canonical_json, descriptor, platform_key

    raw = pack_info(info, compress=False)
    layer_bytes = gzip.compress(raw, compresslevel=9, mtime=0)  # == pack_info(info): same bytes, one tar pass
    layer = descriptor(layer_bytes, LAYER_TAR_GZIP, {TITLE_ANNOTATION: TITLE})
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    blobs: list[tuple[bytes, str]] = [(layer_bytes, LAYER_TAR_GZIP)]
    manifests: list[bytes] = []
    entries: list[dict[str, Any]] = []
    platforms: dict[str, str] = {}
    for os_name, arch in IMAGE_PLATFORMS:
        config = canonical_json({"architecture": arch, "os": os_name, "config": {},
                                 "rootfs": {"type": "layers", "diff_ids": [diff_id]}})
        blobs.append((config, OCI_CONFIG))
        manifest = canonical_json({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": descriptor(config, OCI_CONFIG),
            "layers": [layer],
            "annotations": {TYPE_ANNOTATION: ARTIFACT_TYPE},
        })
        manifests.append(manifest)
        entry = descriptor(manifest, OCI_MANIFEST)
        entries.append({**entry, "platform": {"architecture": arch, "os": os_name}})
        platforms[platform_key(os_name, arch)] = entry["digest"]
    index_annotations = {**cache_annotations(info), TYPE_ANNOTATION: ARTIFACT_TYPE, **(annotations or {})}
    index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries,
                            "annotations": index_annotations})
    return CacheImage(blobs=tuple(blobs), manifests=tuple(manifests), index=index,
                      annotations=index_annotations, platforms=platforms)


def push_cache(path: str | os.PathLike[str], ref: str, client: RegistryClient) -> Resolved:
    """Pack and push the cache as an OCI image (see `cache_image`); the returned index digest is
    what a profile pins."""
    from dataclasses import replace

    from stackpin.oci import OCI_INDEX, OCI_MANIFEST, Resolved, as_image_ref, sha256_digest

    target = as_image_ref(ref)
    image = cache_image(inspect_cache(path))
    for data, _ in image.blobs:
        client.push_blob(target, data)
    untagged = replace(target, tag=None)
    for manifest in image.manifests:  # children before the index that names them
        client.push_manifest(untagged.with_digest(sha256_digest(manifest)), manifest, OCI_MANIFEST)
    digest = client.push_manifest(target, image.index, OCI_INDEX)
    return Resolved(ref=target, digest=digest, media_type=OCI_INDEX, size=len(image.index),
                    platforms=dict(image.platforms), source=f"registry {target.registry}",
                    annotations=dict(image.annotations))


def add_cache_to_layout(writer: LayoutWriter, ref: str, info: CacheInfo,
                        annotations: Mapping[str, str] | None = None) -> Resolved:
    """Store the image form of `info` in an OCI layout under the full reference `ref`."""
    from stackpin.oci import OCI_INDEX, OCI_MANIFEST

    image = cache_image(info, annotations)
    tagged = writer._tagged(ref)  # LayoutWriter has no public "tag this index" yet
    for data, media_type in image.blobs:
        writer.add_blob(data, media_type)
    for manifest in image.manifests:
        writer.add_blob(manifest, OCI_MANIFEST)
    return writer._tag(tagged, image.index, OCI_INDEX)


def write_cache_to_layout(path: str | os.PathLike[str], layout: str | os.PathLike[str], ref: str) -> Resolved:
    """Pack the cache into an OCI layout directory under the full reference `ref` (no registry)."""
    from stackpin.ocilayout import LayoutWriter

    return add_cache_to_layout(LayoutWriter(layout), ref, inspect_cache(path))


def pinned(resolved: Resolved) -> str:
    """`registry/repo@sha256:...`: the form `spec.autotune.cache` pins."""
    ref = resolved.ref
    return f"{ref.name}@{resolved.digest}"


# --- fetch ---------------------------------------------------------------------------------------


class Fetched(_Frozen):
    """A fetched cache: the manifest digest it came from, where from, and what it holds."""

    digest: str
    source: str
    info: CacheInfo
    mountable: bool = Field(True, description=(
        "False for the earlier OCI artifact form, which Kubernetes image volumes cannot mount."))


LEGACY_FORM = (f"an OCI artifact (artifactType {ARTIFACT_TYPE}, empty config), the form stackpin wrote before "
               "caches became images: a Kubernetes image volume cannot mount it, so workers would retune; "
               "re-pack it with `stackpin autotune pack --push`")


def fetch_cache(
    ref: str,
    dest: str | os.PathLike[str],
    *,
    client: RegistryClient | None = None,
    layout: str | os.PathLike[str] | None = None,
) -> Fetched:
    """Pull the cache `ref` (from a registry via `client`, or from an OCI layout), check every
    digest, unpack it safely into `dest` (created; must be empty) and inspect the result.

    The image form: every platform image of the index must hold the same single standard layer, with
    an image config for that platform whose diff_ids name the uncompressed tar (what a runtime checks
    before it mounts). The earlier artifact form is read too and comes back with `mountable=False`."""
    from stackpin.oci import INDEX_TYPES, annotations_of, as_image_ref, parse_manifest

    target = as_image_ref(ref)
    what = str(target)
    if layout is not None:
        from stackpin.ocilayout import LayoutResolver

        resolver = LayoutResolver(layout)
        resolved = resolver.resolve(target)

        def load(digest: str) -> tuple[dict[str, Any], list[bytes]]:
            manifest = parse_manifest(resolver.read_blob(digest), f"manifest {digest}")
            layers = _layers(manifest, what)
            return manifest, [resolver.read_blob(_layer_digest(d, target), d.get("size")) for d in layers]

        def blob(desc: dict[str, Any]) -> bytes:
            return resolver.read_blob(_layer_digest(desc, target), desc.get("size"))
    elif client is not None:
        registry = client
        # Resolve first, then pull by digest: every manifest and blob is checked against the index.
        resolved = registry.resolve(target)

        def load(digest: str) -> tuple[dict[str, Any], list[bytes]]:
            return registry.pull_artifact(target.with_digest(digest))

        def blob(desc: dict[str, Any]) -> bytes:
            return registry.pull_blob(target, _layer_digest(desc, target))
    else:
        raise ValueError("fetch_cache needs a registry client or an OCI layout")

    loaded: dict[str, tuple[dict[str, Any], list[bytes]]] = {}
    if resolved.media_type in INDEX_TYPES:
        if resolved.annotations.get(TYPE_ANNOTATION) != ARTIFACT_TYPE:
            raise ResolveError(f"{target} is not an autotune cache (an image index without the {TYPE_ANNOTATION}: "
                               f"{ARTIFACT_TYPE} annotation)")
    else:
        manifest, blobs = loaded[resolved.digest] = load(resolved.digest)
        if manifest.get("artifactType") == ARTIFACT_TYPE:  # the earlier artifact form
            raw = _tar_bytes(_one_layer(manifest, blobs, (LEGACY_LAYER_TAR_GZIP, LEGACY_LAYER_TAR), what), what)
            _unpack_tar(raw, Path(dest), what)
            return Fetched(digest=resolved.digest, source=resolved.source, info=inspect_cache(dest), mountable=False)
        if manifest.get("artifactType") or annotations_of(manifest).get(TYPE_ANNOTATION) != ARTIFACT_TYPE:
            raise ResolveError(f"{target} is not an autotune cache (artifactType {manifest.get('artifactType')!r}, "
                               f"no {TYPE_ANNOTATION}: {ARTIFACT_TYPE} annotation)")
    if not resolved.platforms:
        raise ResolveError(f"{target}: no platform image (an autotune cache image lists linux/arm64 and linux/amd64)")
    layer_digest: str | None = None
    raw = b""
    for key, child in sorted(resolved.platforms.items()):
        where = f"{what} ({key} image {child[:19]})"
        manifest, blobs = loaded.get(child) or load(child)
        layer = _one_layer(manifest, blobs, (LAYER_TAR_GZIP, LAYER_TAR), where)
        if layer_digest is None:
            layer_digest, raw = _layer_digest(manifest["layers"][0], target), _tar_bytes(layer, what)
        elif _layer_digest(manifest["layers"][0], target) != layer_digest:
            raise ResolveError(f"{where}: holds another layer than the other platforms; every node must mount "
                               "the same cache")
        _check_config(manifest, blob, key, "sha256:" + hashlib.sha256(raw).hexdigest(), where)
    _unpack_tar(raw, Path(dest), what)
    return Fetched(digest=resolved.digest, source=resolved.source, info=inspect_cache(dest))


def _layers(manifest: dict[str, Any], what: str) -> list[dict[str, Any]]:
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not all(isinstance(d, dict) for d in layers):
        raise ResolveError(f"{what}: manifest layers are not a list of descriptors")
    return layers


def _one_layer(manifest: dict[str, Any], blobs: list[bytes], media_types: tuple[str, ...], what: str) -> bytes:
    from stackpin.oci import OCI_MANIFEST

    if manifest.get("mediaType", OCI_MANIFEST) != OCI_MANIFEST:
        raise ResolveError(f"{what}: manifest media type {manifest.get('mediaType')!r}, expected {OCI_MANIFEST}")
    layers = _layers(manifest, what)
    if len(layers) != 1 or len(blobs) != 1 or layers[0].get("mediaType") not in media_types:
        raise ResolveError(f"{what}: expected one layer of type {media_types[0]}")
    if layers[0].get("size") is not None and layers[0]["size"] != len(blobs[0]):
        raise ResolveError(f"{what}: layer is {len(blobs[0])} bytes, its descriptor says {layers[0]['size']}")
    return blobs[0]


def _check_config(manifest: dict[str, Any], blob: Any, platform: str, diff_id: str, what: str) -> None:
    """The image config a runtime reads: this platform, and diff_ids naming the uncompressed layer
    (containerd refuses to mount a layer whose diff_id does not match)."""
    from stackpin.oci import OCI_CONFIG, parse_manifest, platform_key

    desc = manifest.get("config")
    if not isinstance(desc, dict) or desc.get("mediaType") != OCI_CONFIG:
        raise ResolveError(f"{what}: config is not an image config ({OCI_CONFIG})")
    config = parse_manifest(blob(desc), f"{what}: config")
    got = platform_key(str(config.get("os")), str(config.get("architecture")), config.get("variant"))
    if got != platform:
        raise ResolveError(f"{what}: config says platform {got}, the index says {platform}")
    rootfs = config.get("rootfs")
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers" or rootfs.get("diff_ids") != [diff_id]:
        raise IntegrityError(f"{what}: config rootfs.diff_ids do not name the layer's uncompressed tar {diff_id}")


def _layer_digest(desc: dict[str, Any], target: Any) -> str:
    from stackpin.oci import descriptor_digest

    return descriptor_digest(desc, f"layer of {target}")


def unpack_cache(blob: bytes, dest: Path, what: str = "autotune cache") -> None:
    """Extract a packed cache (tar or tar.gz) into `dest` (created if missing, must be empty). Only
    plain directories and files under `flashinfer_autotune_cache/` are accepted: absolute names, `..`,
    links, devices and duplicates are refused before anything is written."""
    _unpack_tar(_tar_bytes(blob, what), dest, what)


def _tar_bytes(blob: bytes, what: str) -> bytes:
    """The uncompressed tar of a layer; gunzipped at most MAX_UNPACKED_BYTES (+1) far, so that a
    small bomb cannot fill the memory."""
    if blob[:2] != b"\x1f\x8b":
        raw = blob
    else:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = inflater.decompress(blob, MAX_UNPACKED_BYTES + 1)
        except zlib.error as exc:
            raise _unsafe(what, f"not a gzip stream: {exc}") from None
        if len(raw) <= MAX_UNPACKED_BYTES and not inflater.eof:
            raise _unsafe(what, "not a gzip stream: truncated")
        if inflater.unused_data:
            raise _unsafe(what, "not a gzip stream: data after the end of the stream")
    if len(raw) > MAX_UNPACKED_BYTES:
        raise _unsafe(what, f"unpacks to more than the {MAX_UNPACKED_BYTES} bytes allowed")
    return raw


def _unpack_tar(raw: bytes, dest: Path, what: str) -> None:
    try:
        tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")
        members = tar.getmembers()
    except tarfile.TarError as exc:
        raise _unsafe(what, f"not a tar archive: {exc}") from None
    if len(members) > MAX_MEMBERS:
        raise _unsafe(what, f"{len(members)} entries, more than the {MAX_MEMBERS} allowed")
    seen: set[str] = set()
    plan: list[tuple[PurePosixPath, tarfile.TarInfo]] = []
    for m in members:
        name = m.name
        parts = PurePosixPath(name).parts
        if name.startswith("/") or "\\" in name or not parts or any(p in ("..", ".", "") for p in parts):
            raise _unsafe(what, f"unsafe entry name {name!r}")
        if parts[0] != CACHE_DIR_NAME:
            raise _unsafe(what, f"entry {name!r} is outside {CACHE_DIR_NAME}/")
        if not (m.isdir() or m.isreg()):
            raise _unsafe(what, f"entry {name!r} is a link or special file")
        rel = PurePosixPath(*parts)
        if str(rel) in seen:
            raise _unsafe(what, f"duplicate entry {name!r}")
        seen.add(str(rel))
        plan.append((rel, m))
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise StackpinError(f"{dest} is not empty; fetch into a new or empty directory")
    for rel, m in plan:
        target = dest.joinpath(*rel.parts)
        try:
            if m.isdir():
                target.mkdir(mode=0o755, parents=True, exist_ok=True)
                continue
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            src = tar.extractfile(m)
            assert src is not None  # regular file
            with open(target, "xb") as fh:  # 'x': never follow or overwrite something already there
                fh.write(src.read())
            os.chmod(target, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        except OSError as exc:  # e.g. a file and a directory of the same name
            raise _unsafe(what, f"cannot unpack {m.name!r}: {exc.strerror or exc}") from None


def _unsafe(what: str, message: str) -> IntegrityError:
    return IntegrityError(f"{what}: {message}")
