"""What a vLLM release does at start-up beyond parsing its arguments (`engines/vllm-<version>.startup.yaml`).

The flag catalogs (`flags.py`) say which options a release accepts; these files say what it then does with
them once the model is built: which attention class a backend name gives, which KV-cache dtypes that class
stores or raises on, which kernel block sizes it needs, when CUDA graph modes fall back, where a draft model's
revision comes from. They are read by hand from the published wheel, each fact with its file:line, and held
to the code by tests/test_engine_check.py, which runs the release's own functions.
"""

from functools import cache
from math import gcd
from typing import Any

import yaml

from stackpin.catalog import lazy_locate, load_first
from stackpin.catalog.search import SearchPath, bundled, read_catalog_file, search_path
from stackpin.errors import StackpinError
from stackpin.records import Record
from stackpin.yamlio import load_data


def _for_major(sizes: dict[str, tuple[int, ...]], major: int) -> tuple[int, ...]:
    return sizes.get(str(major), sizes["default"])


class AttentionBackend(Record, frozen=True, kw_only=True):
    compute_majors: tuple[int, ...]
    kv_cache_dtypes: dict[str, str]  # --kv-cache-dtype -> what the layer stores; others raise
    kernel_block_sizes: dict[str, tuple[int, ...]]  # by compute-capability major, or "default"
    source: str
    # The attention heads each tensor-parallel rank holds must be a multiple of this, or the layer's constructor
    # raises; None where the kernel has no such need.
    heads_per_rank_multiple_of: int | None = None
    heads_per_rank_source: str | None = None

    def block_sizes(self, major: int) -> tuple[int, ...]:
        return _for_major(self.kernel_block_sizes, major)


class ModelStartup(Record, frozen=True, kw_only=True):
    selector_source: str
    attention: dict[str, AttentionBackend]
    companion_block_sizes: dict[str, tuple[int, ...]]
    companion_multiple_of: int
    companion_source: str
    block_size_source: str

    def block_size_problem(self, backend: str, major: int, block_size: int) -> str | None:
        """Why the KV manager's block size suits no common kernel block size, as vLLM's
        select_common_block_size decides it (the block size itself, else the largest explicit kernel size
        dividing it, must suit every kernel); None when one does."""
        explicit = [self.attention[backend].block_sizes(major), _for_major(self.companion_block_sizes, major)]

        def fits(size: int) -> bool:
            return all(size in sizes for sizes in explicit) and size % self.companion_multiple_of == 0

        if fits(block_size) or any(fits(s) for group in explicit for s in group if block_size % s == 0):
            return None
        need = 1
        for size in (*{s for group in explicit for s in group}, self.companion_multiple_of):
            need = need * size // gcd(need, size)
        return (f"no kernel block size divides {block_size}: {backend} needs {'/'.join(map(str, explicit[0]))} and "
                f"the indexer {'/'.join(map(str, explicit[1]))} on SM {major}.x; use a multiple of {need}")


class CudaGraphs(Record, frozen=True, kw_only=True):
    breakable_by_default: tuple[str, ...]
    breakable_source: str
    uncompiled: tuple[str, ...]
    uncompiled_source: str
    without_piecewise: dict[str, str]
    without_piecewise_source: str
    separate_decode_modes: tuple[str, ...]
    decode_graph_limit_source: str


class AdaptiveVerification(Record, frozen=True, kw_only=True):
    """What adaptive draft verification asks of the CUDA graph mode."""

    full_graph_modes: tuple[str, ...]  # modes with full graphs; VllmConfig raises at start for any other
    full_graph_source: str
    resolves: dict[str, str]  # the model runner's rewrite when piecewise capture is available (then without_piecewise)
    resolves_source: str


class SpeculativeStartup(Record, frozen=True, kw_only=True):
    draft_from_target: tuple[str, ...]
    source: str
    adaptive_verification: AdaptiveVerification | None = None  # None: not read for this release


class StartupFacts(Record, frozen=True, kw_only=True):
    version: str
    cuda_graphs: CudaGraphs
    speculative: SpeculativeStartup
    models: dict[str, ModelStartup]  # by architecture
    file: str = ""  # where it was read from, for messages


def startup_file_name(version: str, engine: str = "vllm") -> str:
    return f"{engine}-{version}.startup.yaml"


@cache
def _startup(engine: str, version: str, path: SearchPath, model: type[Any]) -> Any:
    """The first `engines/<engine>-<version>.startup.yaml` on the search path as `model`, or None."""
    for directory in path:
        candidate = directory.joinpath("engines", startup_file_name(version, engine))
        if candidate.is_file():
            shown = f"stackpin/catalog/engines/{candidate.name}" if directory == bundled() else str(candidate)
            text = read_catalog_file(candidate)
            try:
                data = {**load_data(text), "file": shown}
            except (yaml.YAMLError, TypeError) as exc:
                raise StackpinError(f"{shown}: not a start-up facts file ({exc})") from None
            return load_first(data, model, lazy_locate(text, shown))
    return None


def startup_facts(version: str) -> StartupFacts | None:
    """The start-up facts of a vLLM release (first on the catalog search path), or None."""
    facts: StartupFacts | None = _startup("vllm", version, search_path(), StartupFacts)
    return facts


class SourcedFact(Record, frozen=True, kw_only=True):
    """One start-up decision of an engine release: what it is and the file:line that makes it."""

    value: Any
    source: str
    note: str | None = None


class SglangStartupFacts(Record, frozen=True, kw_only=True):
    """What an SGLang release decides at start-up (`engines/sglang-<version>.startup.yaml`), keyed by topic
    (`attention.backend_default`, `cuda_graph.decode_capture_sizes`, `speculative.nextn`, ...)."""

    version: str
    facts: dict[str, SourcedFact]
    file: str = ""


def sglang_startup_facts(version: str) -> SglangStartupFacts | None:
    """The start-up facts of an SGLang release (first on the catalog search path), or None."""
    facts: SglangStartupFacts | None = _startup("sglang", version, search_path(), SglangStartupFacts)
    return facts
