"""Site facts: which cluster-facing facts the stack rests on were measured on the site's own nodes
(stackpin.catalog.site, `stackpin site import`), which are still the catalog's estimates, and where a
measurement disagrees with what the stack assumes."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.catalog.site import PRODUCT_LABEL
from stackpin.rules import Context, Hit, Severity, rule

_PLATFORM = ("spec", "target", "platform")
_HINT = "measure them: stackpin site probe, then stackpin site import (docs/site.md#site-facts)"


@rule("SP261", Severity.info, "a site measurement replaces a catalog figure")
def measured_facts(ctx: Context) -> Iterator[Hit]:
    view = ctx.catalog.site_for(ctx.profile.spec.target.platform)
    if view is None:
        return
    bundled = ctx.catalog.bundled_hardware
    platform = bundled.platforms[ctx.profile.spec.target.platform]
    gpu = bundled.gpus[platform.gpu]
    facts = view.facts
    was = {"gpuNames": gpu.device_name, "hbmMib": f"{gpu.hbm_gib:g} GiB",
           "gpuProduct": platform.node_labels.get(PRODUCT_LABEL), "powerKw": platform.power_kw}
    now = {"gpuNames": " or ".join(facts.gpu_names or ()), "hbmMib": f"{facts.hbm_mib} MiB",
           "gpuProduct": facts.gpu_product, "powerKw": facts.power_kw}
    for name in ("gpuNames", "hbmMib", "gpuProduct", "powerKw"):
        if name in facts.measured:
            kind = "an estimate" if _estimate(ctx, name) else "a figure"
            yield Hit(_PLATFORM, f"site fact {name}: {now[name]} replaces the catalog's {was[name]} ({kind}); "
                      f"{view.fact_source(name)}")


def _estimate(ctx: Context, name: str) -> bool:
    """Whether the bundled catalog marks the figure a site fact replaces as an estimate."""
    bundled = ctx.catalog.bundled_hardware
    platform = bundled.platforms[ctx.profile.spec.target.platform]
    gpu = bundled.gpus[platform.gpu]
    return {"gpuNames": gpu.is_estimate("device_name"), "hbmMib": gpu.is_estimate("hbm_gib"),
            "gpuProduct": platform.is_estimate("node_labels"), "powerKw": platform.is_estimate("power_kw")}[name]


@rule("SP262", Severity.warning, "the stack rests on catalog estimates a site can measure")
def estimated_facts(ctx: Context) -> Iterator[Hit]:
    """The facts the cluster checks (the GPU name the attestation compares, the memory validate sizes with,
    the node label every worker selects) that are still the catalog's estimates. A warning once the site has
    an overlay for the platform (what it left unmeasured); a note before (every GB300 and Vera Rubin stack
    would otherwise carry one more warning than its owner can act on without the hardware)."""
    gpu, platform = ctx.gpu, ctx.platform
    left = []
    if gpu.is_estimate("device_name"):
        left.append(f"GPU name {gpu.device_name!r} (the attestation logs another name and passes)")
    if gpu.is_estimate("hbm_gib"):
        left.append(f"HBM {gpu.hbm_gib:g} GiB per GPU")
    if ctx.profile.spec.target.node_labels is None and platform.is_estimate("node_labels"):
        labels = ", ".join(f"{k}={v}" for k, v in sorted(platform.node_labels.items()))
        left.append(f"node label {labels}")
    if left:
        measured = ctx.catalog.site_for(ctx.profile.spec.target.platform) is not None
        yield Hit(_PLATFORM, f"{ctx.profile.spec.target.platform}: {'; '.join(left)}: catalog estimate(s), not "
                  "measured on this site", _HINT, None if measured else Severity.info)


@rule("SP263", Severity.warning, "a site measurement disagrees with the catalog")
def disagreeing_facts(ctx: Context) -> Iterator[Hit]:
    view = ctx.catalog.site_for(ctx.profile.spec.target.platform)
    if view is None:
        return
    facts, gpu, platform = view.facts, ctx.gpu, ctx.platform
    want = "{}.{}".format(*gpu.compute_capability)
    if facts.compute_capability is not None and facts.compute_capability != want:
        yield Hit(_PLATFORM, f"the site's GPUs report compute capability {facts.compute_capability}; the catalog's "
                  f"{gpu.name} is {gpu.sm_arch} ({want}), which the kernel checks assume; "
                  f"{view.fact_source('computeCapability')}", "correct the catalog entry or the platform")
    if facts.gpus_per_node is not None and facts.gpus_per_node != platform.gpus_per_node:
        yield Hit(_PLATFORM, f"the site's nodes offer {facts.gpus_per_node} GPUs each (allocatable nvidia.com/gpu); "
                  f"the catalog's {ctx.profile.spec.target.platform} has {platform.gpus_per_node}, which every "
                  f"pool's layout assumes; {view.fact_source('gpusPerNode')}")
    if facts.imex is False and platform.multinode_nvlink and ctx.topology.spans_nodes:
        yield Hit(_PLATFORM, "a replica spans nodes over multi-node NVLink, but the site has no ComputeDomain "
                  f"(IMEX) support: the ComputeDomain render writes will not be served; {view.fact_source('imex')}",
                  "install NVIDIA's DRA driver for GPUs (ComputeDomains) on the cluster")
