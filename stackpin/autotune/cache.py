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
  `FLASHINFER_CACHE_DIR / flashinfer.__version__ / "_".join(f"{major}{minor}" for sorted archs)` over the
  visible devices, where compilation_context.py `_normalize_cuda_arch` gives SM 9.x and SM >= 10 an `a`
  suffix (sm_103 -> `103a`), SM 12.0 `120f` (0.7.0.post1 raises below CUDA 12.9), older archs none.
- VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR replaces the whole root `$VLLM_CACHE_ROOT/flashinfer_autotune_cache/
  <fi>/<arch>` (0.31.0 flashinfer_autotune_cache.py:24-41): vLLM then reads `<override>/<hash>/...`, and it
  writes there on every start (kernel_warmup.py:446-453, 479-482), so render points it at a writable copy
  of the image's `<fi>/<arch>` directory (render/pod.py).
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
  metadata value differs from the running environment's (`_classify_metadata_mismatches`: a saved value
  passes only when it equals the runtime's or is `"*"`; a missing key is a mismatch too), and raises
  ValueError when `_records` is not a JSON object.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import Field

from stackpin.errors import InputError, Location, Problem
from stackpin.models import Model
from stackpin.profile.tuning import SHARED_FILE, ConfigDirectory, ranks_summary

if TYPE_CHECKING:
    pass

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
# Which vLLM releases read per-rank files, the shared file or FlashInfer's v2 store is a catalog fact
# (engine.yaml `autotune_files`, read through catalog.AutotuneFiles), not a constant here.
# SHARED_FILE (before per-rank files: one file, read by rank 0 and broadcast), the rank file names and
# the ranks summary live in stackpin/profile/tuning.py, which lock and render read too.

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


class FrozenModel(Model):
    """autotune's records: the one pydantic base, `stackpin.models.Model` (frozen, unknown keys refused)."""


class CacheFile(FrozenModel):
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


class CacheInfo(FrozenModel):
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

    def config_directories(self) -> list[ConfigDirectory]:
        """Each config directory with the (dp, rank) of its files (None, None for the shared file)."""
        return [ConfigDirectory.of_files(directory, [(f.dp, f.rank) for f in files])
                for directory, files in self.directories().items()]

    def ranks_summary(self) -> str:
        """Compact `<hash12>:dp0-7 rank0-15 (16 files)` per config directory, `; `-joined."""
        return ranks_summary(self.config_directories())

    def summary(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "flashinfer": self.flashinfer_versions,
            "arch": self.arch_lists,
            "device": self.values("gpu"),
            "ranks": self.ranks_summary(),
            "files": [f.model_dump(mode="json") for f in self.files],
        }


def bad_input(file: Path | str, message: str) -> InputError:
    return InputError([Problem(Location(str(file)), "", message)])


# --- inspect -----------------------------------------------------------------------------------


def cache_root(path: str | os.PathLike[str]) -> Path:
    """The `flashinfer_autotune_cache` directory: `path` itself, or its child of that name (so a
    whole `$VLLM_CACHE_ROOT` can be given)."""
    path = Path(path)
    if not path.exists():
        raise bad_input(path, "no such directory")
    if not path.is_dir():
        raise bad_input(path, "is not a directory (expected a flashinfer_autotune_cache directory)")
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
        raise bad_input(root, "no autotune files found (expected <flashinfer version>/<arch list>/<config hash>/"
                         "autotune_configs_dp{d}_rank{r}.json)")
    return CacheInfo(root=str(root), files=tuple(sorted(files, key=lambda f: f.path)))


def _check_entry(full: Path, depth: int, *, is_dir: bool) -> None:
    """`depth` is the depth of the parent relative to the cache root."""
    name = full.name
    if full.is_symlink():
        raise bad_input(full, "symbolic link in an autotune cache; copy the files instead")
    if is_dir:
        expected = {0: ("flashinfer version", _VERSION_DIR), 1: ("arch list (e.g. 103a)", _ARCH_DIR),
                    2: ("config hash (64 hex digits)", _HASH_DIR)}.get(depth)
        if expected is None:
            raise bad_input(full, "unexpected directory: a config-hash directory holds only "
                                  "autotune_configs*.json files")
        what, pattern = expected
        if not pattern.fullmatch(name):
            raise bad_input(full, f"unexpected directory name {name!r}: expected a {what}")
        return
    if depth != 3:
        raise bad_input(full, "unexpected file: autotune files live in <flashinfer version>/<arch list>/<config hash>/")
    if not full.is_file():
        raise bad_input(full, "not a regular file")
    if name != SHARED_FILE and not _RANK_FILE.fullmatch(name):
        raise bad_input(full, f"unexpected file name {name!r}: expected autotune_configs_dp{{d}}_rank{{r}}.json "
                         "(or autotune_configs.json from vLLM <= 0.31)")


def _read_file(full: Path, rel: Path) -> CacheFile:
    import stackpin.jsonio as jsonio
    from stackpin.yamlio import read_regular

    try:
        raw = read_regular(full, MAX_UNPACKED_BYTES, follow=False)  # no file can be more than the whole cache
    except OSError as exc:
        raise bad_input(full, f"cannot read: {exc.strerror}") from None
    try:
        doc = jsonio.loads(raw)
    except jsonio.NestingError as exc:
        raise bad_input(full, str(exc)) from None
    except ValueError as exc:  # UnicodeDecodeError is one
        raise bad_input(full, f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise bad_input(full, "not a JSON object (FlashInfer save_configs writes one)")
    metadata = doc.get(METADATA_KEY)
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_input(full, f"{METADATA_KEY} is not a JSON object")
    generation = doc.get(GENERATION_KEY)
    if generation is not None and not isinstance(generation, str):
        raise bad_input(full, f"{GENERATION_KEY} is not a string")
    if RECORDS_KEY in doc and not isinstance(doc[RECORDS_KEY], dict):
        # autotuner.py load_configs: `raise ValueError("Autotuner namespaced records must be a JSON object")`,
        # uncaught in vLLM's kernel warm-up: every worker would crash on it.
        raise bad_input(full, f"{RECORDS_KEY} is not a JSON object; FlashInfer's load_configs raises on it")
    entries = 0
    for key, value in doc.items():
        if key in (METADATA_KEY, GENERATION_KEY, RECORDS_KEY):
            continue
        # FlashInfer load_configs reads value[0] as the runner name and value[1] as the tactic.
        if not (isinstance(value, list) and len(value) >= 2 and isinstance(value[0], str)):
            raise bad_input(full, f"entry {key[:80]!r} is not [runner, tactic, ...]")
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


