"""Which FlashInfer autotune files each pool of a stack reads, and whether a cache's config
directories hold them. Pure: `stackpin autotune verify` asks with the files it has read, `stackpin
lock` and `render` with what a lock records of the cache (its `dev.stackpin.autotune.ranks`
annotation, the summary `ranks_summary` writes). The layout facts are vLLM's, with their sources in
stackpin/autotune/cache.py; which vLLM releases read which files is catalog data (`autotune_files`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import msgspec

from stackpin.catalog import Catalog
from stackpin.profile.model import Pool
from stackpin.profile.topology import PoolTopology, Role, Topology, model_parallel_of, shape_label

SHARED_FILE = "autotune_configs.json"  # before per-rank files: one file, read by rank 0 and broadcast


def rank_file(dp: int, rank: int) -> str:
    """The file one rank reads (vLLM >= per_rank_since): `autotune_configs_dp{dp}_rank{rank}.json`."""
    return f"autotune_configs_dp{dp}_rank{rank}.json"


def expected_files(pool: Pool, per_rank: bool = True) -> list[tuple[int, int, str]]:
    """(dp, world rank, file name) for every rank of one replica of `pool`."""
    if not per_rank:
        return []
    world = model_parallel_of(pool)
    out = []
    for dp in range(pool.data_parallel):
        for local in range(world):
            # vLLM folds DP into the world group when DP > 1 (parallel_state.init_distributed_environment).
            rank = dp * world + local
            out.append((dp, rank, rank_file(dp, rank)))
    return out


def pool_shape(pool: Pool) -> str:
    """`TP2 x DP8`: the parallel shape that decides a pool's rank files (expert parallelism does not)."""
    return shape_label(pool.tensor_parallel, pool.pipeline_parallel, pool.data_parallel)


def ranges(values: Iterable[int]) -> str:
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


def _parse_ranges(text: str) -> frozenset[int] | None:
    out: set[int] = set()
    for part in text.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            return None
        out.update(range(int(low), int(high if sep else low) + 1))
    return frozenset(out)


def _files(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''}"


class ConfigDirectory(msgspec.Struct, frozen=True):
    """What one config-hash directory of a cache holds files for: the ranks annotation's unit.

    `pairs` are the (dp, world rank) of its per-rank files where they are known (from the files
    themselves); from the annotation only the DP and world ranks are, and the count."""

    name: str  # `<flashinfer>/<arch>/<config hash>` in a cache; the hash's first 12 characters in the annotation
    dps: frozenset[int]
    ranks: frozenset[int]
    files: int
    shared: bool  # holds the shared autotune_configs.json (or files of the shared layout)
    pairs: frozenset[tuple[int, int]] | None = None

    @classmethod
    def of_files(cls, name: str, files: Sequence[tuple[int | None, int | None]]) -> ConfigDirectory:
        """From each file's (dp, world rank), None for the shared file."""
        pairs = frozenset((dp, rank) for dp, rank in files if dp is not None and rank is not None)
        return cls(name=name, dps=frozenset(dp for dp, _ in pairs), ranks=frozenset(rank for _, rank in pairs),
                   files=len(files), shared=any(dp is None or rank is None for dp, rank in files), pairs=pairs)

    @classmethod
    def wanted_by(cls, pool: Pool) -> ConfigDirectory:
        """The directory one replica of `pool` reads: a file for every rank."""
        return cls.of_files("", [(dp, rank) for dp, rank, _ in expected_files(pool)])

    def holds(self, wanted: ConfigDirectory) -> bool:
        """Whether this directory has exactly the per-rank files `wanted` names (compared file by file
        where both sides know them, else by DP ranks, world ranks and count)."""
        if self.shared or wanted.shared:
            return False
        if self.pairs is not None and wanted.pairs is not None:
            return self.pairs == wanted.pairs
        return (self.dps, self.ranks, self.files) == (wanted.dps, wanted.ranks, wanted.files)

    def summary(self) -> str:
        """`<hash12>:dp0-7 rank0-15 (16 files)`, or `<hash12>:shared (1 file)`."""
        short = self.name.rsplit("/", 1)[-1][:12]
        if self.shared:
            return f"{short}:shared ({_files(self.files)})"
        return f"{short}:dp{ranges(self.dps)} rank{ranges(self.ranks)} ({_files(self.files)})"


def ranks_summary(directories: Iterable[ConfigDirectory]) -> str:
    """The `dev.stackpin.autotune.ranks` annotation: each directory's summary, `; `-joined."""
    return "; ".join(d.summary() for d in directories)


_SUMMARY = re.compile(r"(?P<name>[0-9a-f]{1,64}):(?:(?P<shared>shared)|dp(?P<dps>[0-9,-]+) rank(?P<ranks>[0-9,-]+)) "
                      r"\((?P<files>[0-9]+) files?\)")


def parse_ranks_summary(text: str) -> list[ConfigDirectory] | None:
    """The directories a ranks annotation describes; None when it is not one `ranks_summary` wrote."""
    out = []
    for part in text.split("; ") if text else []:
        match = _SUMMARY.fullmatch(part)
        if match is None:
            return None
        if match["shared"]:
            out.append(ConfigDirectory(match["name"], frozenset(), frozenset(), int(match["files"]), shared=True))
            continue
        dps, ranks = _parse_ranges(match["dps"]), _parse_ranges(match["ranks"])
        if dps is None or ranks is None:
            return None
        out.append(ConfigDirectory(match["name"], dps, ranks, int(match["files"]), shared=False))
    return out


class CacheFit(msgspec.Struct, frozen=True):
    """How a cache's config directories serve the pools of a stack."""

    per_rank: bool  # the pinned vLLM reads one file per rank (else one shared file per directory)
    v2_store: tuple[PoolTopology, ...]  # one-GPU pools whose tuning lives in FlashInfer's v2 store instead
    chosen: dict[Role, str]  # per-rank: the directory holding exactly each pool's files
    unserved: tuple[tuple[Role, ...], ...]  # pools no directory serves; several when they share one engine config
    configs: int  # distinct engine configs among the pools that read files
    shared_dirs: int  # directories holding the shared file

    @property
    def fits(self) -> bool:
        return not self.v2_store and not self.unserved


def engine_configs(pools: Sequence[PoolTopology]) -> list[tuple[Role, ...]]:
    """Pools grouped by engine config: vLLM tunes each distinct config into its own directory (its
    config hash), and pools that differ only in replicas or node spread share one."""
    configs: dict[str, list[Role]] = {}
    for pool in pools:
        config = pool.spec.replace(replicas=1, nodes_per_replica=None)
        configs.setdefault(repr(config), []).append(pool.role)
    return [tuple(roles) for roles in configs.values()]


def fit_cache(topology: Topology, directories: Sequence[ConfigDirectory], vllm: str, catalog: Catalog) -> CacheFit:
    """Which pools of the stack a cache with these config directories serves under vLLM `vllm`.

    Per-rank releases: each pool needs a directory holding exactly its replica's rank files; pools of
    one shape but different engine configs each prefer a directory no other pool took. Earlier
    releases: each distinct engine config needs its own directory with the shared file."""
    layout = catalog.engine.autotune_files
    per_rank = layout.per_rank(vllm)
    pools = topology.pools
    v2_store: tuple[PoolTopology, ...] = ()
    if per_rank and layout.v2_store(vllm):
        v2_store = tuple(pool for pool in pools if pool.gpus_per_replica == 1)
        pools = tuple(pool for pool in pools if pool.gpus_per_replica > 1)
    configs = engine_configs(pools)
    shared_dirs = sum(1 for d in directories if d.shared)
    if not per_rank:
        unserved = tuple(configs) if shared_dirs < len(configs) else ()
        return CacheFit(per_rank, v2_store, {}, unserved, len(configs), shared_dirs)
    used: set[str] = set()
    chosen: dict[Role, str] = {}
    for pool in pools:
        wanted = ConfigDirectory.wanted_by(pool.spec)
        exact = [d.name for d in directories if d.holds(wanted)]
        if exact:
            chosen[pool.role] = next((name for name in exact if name not in used), exact[0])
            used.add(chosen[pool.role])
    unserved = tuple((pool.role,) for pool in pools if pool.role not in chosen)
    return CacheFit(per_rank, v2_store, chosen, unserved, len(configs), shared_dirs)
