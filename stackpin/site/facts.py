"""Readings (the probe's, per node) and Node objects (the cluster's) -> a site overlay (site.yaml).

Per platform, each fact is what every node measured agrees on, or, where nodes differ, what the stack must
plan for: every GPU name seen (the attestation accepts any of them), the smallest memory and power limit, the
versions as a sorted list joined by ", " (so a mixed pool shows). Each fact says where (the command or Node
field, the nodes) and when (the latest probe time; the import's time for what the Node objects say).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from stackpin.catalog.site import PRODUCT_LABEL, Measured, SiteFacts, SitePlatform
from stackpin.errors import StackpinError
from stackpin.site.readings import NodeReading

GPU_RESOURCE = "nvidia.com/gpu"
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # set by GPU feature discovery on NVLink-fabric nodes with IMEX configured


class NodeObject(msgspec.Struct, frozen=True):
    """What a Node object says that the overlay records."""

    name: str
    labels: dict[str, str]
    gpus: int | None  # allocatable nvidia.com/gpu


def node_object(obj: dict[str, Any]) -> NodeObject:
    meta = obj.get("metadata") or {}
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    count = allocatable.get(GPU_RESOURCE)
    try:
        gpus = int(count) if count is not None else None
    except (TypeError, ValueError):
        gpus = None
    return NodeObject(str(meta.get("name", "")), dict(meta.get("labels") or {}), gpus)


def _joined(values: set[str]) -> str:
    return ", ".join(sorted(values))


def platform_facts(readings: Sequence[NodeReading], nodes: Sequence[NodeObject], imex_crd: bool | None,
                   now: str) -> SitePlatform:
    """One platform's facts from its nodes' readings and Node objects (either may be empty; not both)."""
    ok = [r for r in readings if r.problem is None]
    facts: dict[str, Any] = {}
    measured: dict[str, Measured] = {}

    def put(name: str, value: Any, source: str, on: Sequence[str], at: str) -> None:
        if value is not None:
            facts[name] = value
            measured[name] = Measured(source=source, nodes=tuple(sorted(on)), at=at)

    def smi(name: str, field: str, pick: Callable[[list[Any]], Any]) -> None:
        values = [(r.node, getattr(g, field)) for r in ok for g in r.gpus if getattr(g, field) is not None]
        if values:
            on = sorted({n for n, _ in values})
            at = max(r.at for r in ok if r.node in on)
            put(name, pick([v for _, v in values]), f"nvidia-smi --query-gpu={_QUERY_NAMES[field]}", on, at)

    smi("gpuNames", "name", lambda v: tuple(sorted(set(v))))
    smi("hbmMib", "memory_mib", min)
    smi("powerLimitW", "power_limit_w", min)
    smi("driverVersion", "driver_version", lambda v: _joined(set(v)))
    smi("computeCapability", "compute_cap", lambda v: _joined(set(v)))
    cuda = [(r.node, r.cuda_version) for r in ok if r.cuda_version]
    if cuda:
        on = [n for n, _ in cuda]
        put("cudaVersion", _joined({v for _, v in cuda}), "nvidia-smi (its summary's CUDA Version)", on,
            max(r.at for r in ok if r.node in on))
    if nodes:
        names = [n.name for n in nodes]
        products = {n.labels[PRODUCT_LABEL] for n in nodes if PRODUCT_LABEL in n.labels}
        if len(products) > 1:
            raise StackpinError(f"the nodes carry different {PRODUCT_LABEL} labels ({_joined(products)}): one pool "
                                "per platform; narrow them with --selector")
        labelled = [n.name for n in nodes if PRODUCT_LABEL in n.labels]
        put("gpuProduct", products.pop() if products else None, f"Node label {PRODUCT_LABEL}", labelled, now)
        counts = [(n.name, n.gpus) for n in nodes if n.gpus]
        if counts:
            put("gpusPerNode", min(c for _, c in counts), f"Node allocatable {GPU_RESOURCE}", [n for n, _ in counts],
                now)
        if imex_crd is not None:
            cliqued = all(CLIQUE_LABEL in n.labels for n in nodes)
            put("imex", imex_crd and cliqued, f"ComputeDomain CRD {'served' if imex_crd else 'not served'}; "
                f"Node label {CLIQUE_LABEL} on {'every' if cliqued else 'not every'} node", names, now)
    if not facts:
        raise StackpinError("no fact measured: every node's probe failed and no Node object was read")
    return SitePlatform.from_data({**facts, "measured": {k: msgspec.to_builtins(v) for k, v in measured.items()}})


_QUERY_NAMES = {"name": "name", "memory_mib": "memory.total", "power_limit_w": "power.limit",
                "driver_version": "driver_version", "compute_cap": "compute_cap"}


def site_facts(platforms: dict[str, SitePlatform], strict: bool = False) -> SiteFacts:
    return SiteFacts(api_version="stackpin.dev/v1", kind="SiteFacts", strict=strict,
                     platforms=dict(sorted(platforms.items())))


def site_yaml(facts: SiteFacts, problems: Sequence[str] = ()) -> str:
    """site.yaml's text: a comment saying where it came from and which nodes gave nothing, then the facts."""
    from stackpin.yamlio import dump_yaml

    head = ["# Site facts measured by `stackpin site probe` / `stackpin site import` (docs/site.md#site-facts).",
            "# Put it in a site catalog directory (spec.catalogPath or STACKPIN_CATALOG_PATH), then relock."]
    head += [f"# not measured: {p}" for p in problems]
    return "\n".join(head) + "\n" + dump_yaml(facts.to_data(), sort_keys=False)


def build_site(readings: Sequence[NodeReading], nodes: Sequence[NodeObject], *, platforms: set[str],
               platform: str | None = None, imex_crd: bool | None = None, now: str,
               strict: bool = False) -> tuple[SiteFacts, list[str]]:
    """(the overlay, the nodes that gave nothing and why). A node belongs to the platform its probe line names;
    a Node object no probe line names belongs to `platform` (--platform), else it is left out."""
    unknown = sorted({r.platform for r in readings} - platforms)
    if unknown:
        raise StackpinError(f"the probe lines name platform(s) the catalog does not know: {', '.join(unknown)}")
    if platform is not None and platform not in platforms:
        raise StackpinError(f"--platform {platform}: not a catalog platform (known: {', '.join(sorted(platforms))})")
    owner = {r.node: r.platform for r in readings}
    grouped: dict[str, tuple[list[NodeReading], list[NodeObject]]] = {}
    for r in readings:
        grouped.setdefault(r.platform, ([], []))[0].append(r)
    for n in nodes:
        key = owner.get(n.name, platform)
        if key is not None:
            grouped.setdefault(key, ([], []))[1].append(n)
    if not grouped:
        raise StackpinError("nothing to import: no probe line, and no GPU node for --platform")
    problems = [f"{r.node} ({r.platform}): {r.problem}" for r in readings if r.problem]
    out = {key: platform_facts(rs, ns, imex_crd if ns else None, now) for key, (rs, ns) in grouped.items()}
    return site_facts(out, strict), problems
