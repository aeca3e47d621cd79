"""The stack space around a base profile: every combination of the axes in space.yaml, each as the base's
merged document with that combination written in, and the leaf edits that make it (what a written pick
changes in the base file).

Replicas are not an axis: a candidate fills `racks` racks of the base's platform with whole replicas
(disaggregated: whole prefill:decode groups). Speculative methods are the ones the model's catalog entry
and the pinned engine's flag catalog both list, less those that need a separate draft model (a search does
not invent one); an engine whose catalog lists no methods keeps the base's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from stackpin.backends import engine_of
from stackpin.catalog import Catalog, Platform, load_catalog
from stackpin.errors import StackpinError
from stackpin.profile.loader import LoadedProfile
from stackpin.profile.topology import exceeds_node, nodes_per_replica_for
from stackpin.yamlio import FieldPath

SPACE_FILE = Path(__file__).with_name("space.yaml")
COLOCATED = "colocated"
DRAFT_MODEL_METHODS = ("draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "custom_class")
_POOLS = ("spec", "placement", "pools")


@dataclass(frozen=True)
class Shape:
    """One replica's parallel shape."""

    tp: int
    dp: int
    ep: bool

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    def text(self) -> str:
        return f"TP{self.tp}" + (f"xDP{self.dp}" if self.dp > 1 else "") + ("+EP" if self.ep else "")


@dataclass(frozen=True)
class Knobs:
    """One candidate's value on every axis."""

    placement: str  # "colocated" or "P:D" replica groups
    shape: Shape  # the worker's, or the decode pool's
    prefill: Shape | None
    max_num_seqs: int
    max_num_batched_tokens: int
    spec_method: str | None
    spec_k: int
    graph_mode: str
    capture: str  # per-step | engine-default (NONE: no sizes)
    kv_dtype: str

    def text(self) -> str:
        where = COLOCATED if self.prefill is None else f"disagg {self.placement} prefill {self.prefill.text()} decode"
        spec = f"{self.spec_method} k={self.spec_k}" if self.spec_method else "no spec"
        return (f"{where} {self.shape.text()}, seqs {self.max_num_seqs}, batched {self.max_num_batched_tokens}, "
                f"{spec}, {self.graph_mode}/{self.capture}, kv {self.kv_dtype}")


@dataclass(frozen=True)
class Candidate:
    """The base document with one combination written in; `edits` are the leaves that differ from the base
    (path, new value; a mapping where the base has none there, None where the candidate removes one)."""

    index: int
    knobs: Knobs | None  # None: the base itself
    document: dict[str, Any] = field(compare=False, repr=False)
    edits: tuple[tuple[FieldPath, Any], ...] = field(compare=False)
    # The base replays a pinned autotune cache this candidate cannot keep (it runs another engine config):
    # it tunes at start (autotune.mode: tune, no cache) until a cache is captured for it.
    recapture: bool = False

    @property
    def label(self) -> str:
        if self.knobs is None:
            return "base"
        return self.knobs.text() + ("; new autotune capture" if self.recapture else "")


@dataclass(frozen=True)
class Space:
    """space.yaml, read."""

    shapes: tuple[Shape, ...]
    placements: tuple[str, ...]
    prefill_shapes: tuple[Shape, ...]
    kv_connector: str
    multinode_all2all: str
    max_num_seqs: tuple[int, ...]
    max_num_batched_tokens: tuple[int, ...]
    num_tokens: dict[str, tuple[int, ...]]
    spec_off: bool
    graph_modes: tuple[str, ...]
    captures: tuple[str, ...]
    kv_dtypes: tuple[str, ...]


def _shapes(items: list[dict[str, Any]]) -> tuple[Shape, ...]:
    return tuple(Shape(int(s["tp"]), int(s["dp"]), bool(s["ep"])) for s in items)


@cache
def load_space(path: Path = SPACE_FILE) -> Space:
    from stackpin.yamlio import load_data

    data = load_data(path.read_text(encoding="utf-8"))
    spec = data["speculative"]
    return Space(
        shapes=_shapes(data["shapes"]["values"]), placements=tuple(data["placements"]["values"]),
        prefill_shapes=_shapes(data["prefill_shapes"]["values"]), kv_connector=str(data["kv_connector"]["value"]),
        multinode_all2all=str(data["multinode_all2all"]["value"]),
        max_num_seqs=tuple(data["max_num_seqs"]["values"]),
        max_num_batched_tokens=tuple(data["max_num_batched_tokens"]["values"]),
        num_tokens={str(k): tuple(v) for k, v in spec["num_tokens"].items()}, spec_off=bool(spec["try_without"]),
        graph_modes=tuple(data["graphs"]["modes"]), captures=tuple(data["graphs"]["capture"]),
        kv_dtypes=tuple(data["kv_cache_dtype"]["values"]))


def speculative_choices(loaded: LoadedProfile, space: Space, catalog: Catalog) -> list[tuple[str | None, int]]:
    """(method, draft tokens) pairs to try: off, then each method the model and the pinned engine both take."""
    profile = loaded.profile
    base = profile.spec.speculative
    out: list[tuple[str | None, int]] = [(None, 0)] if space.spec_off else []
    flags = engine_of(profile).flag_catalog(profile.spec.engine_version)
    offered = flags.choices.get("speculative_methods", ()) if flags is not None else ()
    found = catalog.model_for(profile.spec.model.id)
    model_methods = found[1].speculative_methods if found is not None else ()
    methods = [m for m in model_methods if m in offered and m not in DRAFT_MODEL_METHODS]
    if base.method and base.method not in methods:
        methods.append(base.method)  # the base's own (a draft model it names, or an engine without a catalog)
    for method in methods:
        counts = space.num_tokens.get(method, space.num_tokens["default"])
        if method == base.method and base.num_speculative_tokens and base.num_speculative_tokens not in counts:
            counts = (*counts, base.num_speculative_tokens)
        out += [(method, k) for k in sorted(counts)]
    return out


def capture_sizes(knobs: Knobs) -> list[int] | None:
    """per-step: multiples of a decode step's tokens (1 + k), doubling up to max-num-seqs steps, none past the
    step budget; engine-default (or graphs off): None."""
    if knobs.graph_mode == "NONE" or knobs.capture != "per-step":
        return None
    step = 1 + knobs.spec_k
    top = min(knobs.max_num_seqs * step, knobs.max_num_batched_tokens)
    sizes = []
    size = step
    while size <= top:
        sizes.append(size)
        size *= 2
    if top // step * step not in sizes:
        sizes.append(top // step * step)
    return sizes


def _put(pool: dict[str, Any], key: str, value: Any, default: Any) -> None:
    """Write a pool field; one the base leaves out stays out when the value is its default (a minimal edit)."""
    if key in pool or value != default:
        pool[key] = value


def _pool(template: dict[str, Any], shape: Shape, replicas: int, gpus_per_node: int, seqs: int | None,
          tokens: int | None) -> dict[str, Any]:
    pool = dict(template)
    pool.pop("speculative", None)  # a per-pool override would hide the candidate's speculative settings
    pool["replicas"] = replicas
    _put(pool, "tensorParallel", shape.tp, 1)
    _put(pool, "dataParallel", shape.dp, 1)
    _put(pool, "expertParallel", shape.ep, False)
    _put(pool, "nodesPerReplica", nodes_per_replica_for(shape.gpus, gpus_per_node), 1)
    if seqs is not None:
        pool["maxNumSeqs"] = seqs
    if tokens is not None:
        pool["maxNumBatchedTokens"] = tokens
    return pool


def _with(doc: dict[str, Any], path: FieldPath, value: Any) -> dict[str, Any]:
    """`doc` with `path` set, copying only the mappings on the way (the base stays as it was)."""
    out = dict(doc)
    node: dict[Any, Any] = out
    for key in path[:-1]:
        child = node.get(key)
        node[key] = dict(child) if isinstance(child, dict) else {}
        node = node[key]
    node[path[-1]] = value
    return out


def _get(doc: dict[str, Any], path: FieldPath) -> Any:
    node: Any = doc
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def leaf_edits(base: Any, new: Any, path: FieldPath = ()) -> list[tuple[FieldPath, Any]]:
    """The leaves where `new` differs from `base` (a key `new` drops is set to None: maps merge)."""
    if isinstance(base, dict) and isinstance(new, dict):
        out: list[tuple[FieldPath, Any]] = []
        for key in [*base, *(k for k in new if k not in base)]:
            if key not in new:
                if base[key] is not None:
                    out.append(((*path, key), None))
            elif key not in base:
                out.append(((*path, key), new[key]))
            else:
                out += leaf_edits(base[key], new[key], (*path, key))
        return out
    return [] if base == new else [(path, new)]


def _templates(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The base's pool fields to start from: (prefill's, the worker's or decode pool's)."""
    pools: dict[str, Any] = _get(doc, _POOLS) or {}
    main: dict[str, Any] = pools.get("worker") or pools.get("decode") or {}
    return pools.get("prefill") or main, main


def document_of(base: dict[str, Any], knobs: Knobs, racks: int, platform: Platform,
                space: Space) -> dict[str, Any] | None:
    """The base document with `knobs` written in; None when not one whole replica (group) fits the racks."""
    total = racks * platform.total_gpus
    prefill_template, main_template = _templates(base)
    doc = base
    if racks != int(_get(base, ("spec", "target", "count")) or 1):
        doc = _with(doc, ("spec", "target", "count"), racks)
    if knobs.prefill is None:
        replicas = total // knobs.shape.gpus
        if replicas == 0:
            return None
        pools: dict[str, Any] = {"worker": _pool(main_template, knobs.shape, replicas, platform.gpus_per_node,
                                                 knobs.max_num_seqs, knobs.max_num_batched_tokens),
                                 "prefill": None, "decode": None}
        doc = _with(doc, ("spec", "placement", "mode"), COLOCATED)
    else:
        p, d = (int(x) for x in knobs.placement.split(":"))
        groups = total // (p * knobs.prefill.gpus + d * knobs.shape.gpus)
        if groups == 0:
            return None
        pre_tokens = prefill_template.get("maxNumBatchedTokens")
        pools = {"worker": None,
                 "prefill": _pool(prefill_template, knobs.prefill, groups * p, platform.gpus_per_node,
                                  prefill_template.get("maxNumSeqs"), pre_tokens),
                 "decode": _pool(main_template, knobs.shape, groups * d, platform.gpus_per_node,
                                 knobs.max_num_seqs, knobs.max_num_batched_tokens)}
        doc = _with(doc, ("spec", "placement", "mode"), "disaggregated")
        if not _get(doc, ("spec", "placement", "kvConnector")):
            doc = _with(doc, ("spec", "placement", "kvConnector"), space.kv_connector)
    base_pools = _get(base, _POOLS) or {}
    for role, pool in pools.items():
        if pool is None and base_pools.get(role) is None:
            continue  # absent in the base and the candidate alike: nothing to write
        doc = _with(doc, (*_POOLS, role), pool)
    shapes = [knobs.shape] + ([knobs.prefill] if knobs.prefill is not None else [])
    if any(s.ep and exceeds_node(s.gpus, platform.gpus_per_node) for s in shapes):
        doc = _with(doc, ("spec", "kernels", "all2all"), space.multinode_all2all)
    spec_path = ("spec", "speculative")
    speculative = dict(_get(base, spec_path) or {})
    if knobs.spec_method is None:
        speculative = {key: None for key in speculative}
    else:
        speculative["method"] = knobs.spec_method
        speculative["numSpeculativeTokens"] = knobs.spec_k
    doc = _with(doc, spec_path, speculative)
    graphs = dict(_get(base, ("spec", "cudaGraphs")) or {})
    graphs["mode"] = knobs.graph_mode
    sizes = capture_sizes(knobs)
    if sizes is not None or graphs.get("captureSizes") is not None:
        graphs["captureSizes"] = sizes
    if sizes is not None or graphs.get("maxCaptureSize") is not None:
        graphs["maxCaptureSize"] = max(sizes) if sizes else None
    doc = _with(doc, ("spec", "cudaGraphs"), graphs)
    if knobs.kv_dtype != (_get(base, ("spec", "kvCache", "dtype")) or "auto"):
        doc = _with(doc, ("spec", "kvCache", "dtype"), knobs.kv_dtype)
    return doc


# What vLLM hashes into the config directory a FlashInfer autotune cache is keyed by (VllmConfig.compute_hash,
# model_executor/warmup/flashinfer_autotune_cache.py:19-41 in 0.31.0; max-num-seqs and batched tokens included,
# config/scheduler.py:278-282): a candidate that changes any of these runs under another directory, where a cache
# captured for the base holds nothing. Replica counts and node spread are not in it (profile/tuning.py
# engine_configs).
_HASHED = (("spec", "model"), ("spec", "placement", "mode"), ("spec", "placement", "kvConnector"),
           ("spec", "speculative"), ("spec", "cudaGraphs"), ("spec", "kvCache"), ("spec", "kernels"))
_NOT_HASHED = ("replicas", "nodesPerReplica")


def engine_config(doc: dict[str, Any]) -> tuple[Any, ...]:
    """The parts of a profile document that decide the engine config an autotune cache belongs to."""
    pools = _get(doc, _POOLS) or {}
    shaped = {role: {k: v for k, v in pool.items() if k not in _NOT_HASHED} for role, pool in pools.items()
              if isinstance(pool, dict)}
    return (*(repr(_get(doc, path)) for path in _HASHED), repr(sorted(shaped.items())))


def replays_cache(doc: dict[str, Any]) -> bool:
    autotune = _get(doc, ("spec", "autotune")) or {}
    return autotune.get("mode") == "replay" and bool(autotune.get("cache"))


def without_cache(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` tuning at start instead of replaying the base's cache: what it runs until one is captured for it
    (mode: tune, the setting a capture job runs; the model predicts it with its autotune factor for tune)."""
    autotune = dict(_get(doc, ("spec", "autotune")) or {})
    autotune["mode"] = "tune"
    autotune["cache"] = None
    return _with(doc, ("spec", "autotune"), autotune)


def candidates(loaded: LoadedProfile, racks: int, space: Space | None = None,
               catalog: Catalog | None = None) -> Iterator[Candidate]:
    """The base (index 0), then every combination of the axes that fits `racks` racks, in a fixed order;
    a combination that writes the base's own document again is not repeated."""
    space = space or load_space()
    catalog = catalog or load_catalog()
    profile = loaded.profile
    platform = catalog.platforms[profile.spec.target.platform]
    if platform.kind.value != "rack":
        raise StackpinError(f"{loaded.path}: spec.target.platform {profile.spec.target.platform} is a "
                            f"{platform.kind.value}, not a rack; search fills whole racks",
                            "search a profile on an NVL72 rack platform")
    base = loaded.document
    yield Candidate(0, None, base, ())
    placements: list[tuple[str, Shape | None]] = [(p, None) for p in space.placements if p == COLOCATED]
    placements += [(p, s) for p in space.placements if p != COLOCATED for s in space.prefill_shapes]
    axes = itertools.product(placements, space.shapes, space.max_num_seqs, space.max_num_batched_tokens,
                             speculative_choices(loaded, space, catalog), space.graph_modes, space.captures,
                             space.kv_dtypes)
    index = 0
    base_config = engine_config(base) if replays_cache(base) else None
    for (placement, prefill), shape, seqs, tokens, (method, k), mode, capture, kv in axes:
        if mode == "NONE" and capture != space.captures[0]:
            continue  # graphs off: no sizes to choose
        knobs = Knobs(placement, shape, prefill, seqs, tokens, method, k, mode, capture, kv)
        doc = document_of(base, knobs, racks, platform, space)
        if doc is None:
            continue
        recapture = base_config is not None and engine_config(doc) != base_config
        if recapture:
            doc = without_cache(doc)
        edits = tuple(leaf_edits(base, doc))
        if not edits:
            continue  # the base itself
        index += 1
        yield Candidate(index, knobs, doc, edits, recapture)
