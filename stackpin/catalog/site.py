"""Site facts: what a site measured on its own GPU nodes, laid over the catalog's estimates.

A site overlay is `site.yaml` in a site catalog directory (spec.catalogPath, then STACKPIN_CATALOG_PATH: the
first directory that has one wins, as for engine catalogs); `stackpin site import` writes it from the probe's
output and the cluster's Node objects. Per catalog platform it holds measured values (the GPU names nvidia-smi
reports, memory per GPU, the GPU product label, the GPU power limit, driver, CUDA and compute capability, IMEX),
each with where and when it was measured (`measured`), and `strict`: whether the runtime attestation fails a pod
on a fact that is still only the catalog's estimate.

A measured value replaces the catalog's figure (`device_name`, `hbm_gib`, the `nvidia.com/gpu.product` node
label, `power_kw`), which then names the measurement as its source and is no longer an estimate. Render never
reads the file: the lock records the facts of its platform (`resolved.site`, a `SiteView`), so a lock renders the
same bytes wherever it is rendered.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from stackpin.errors import InputError, Location, Problem, StackpinError
from stackpin.records import CamelRecord, Invalid, load

FILE = "site.yaml"
KIND = "SiteFacts"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by GPU feature discovery from the NVML device name


class Measured(CamelRecord, frozen=True, kw_only=True):
    """Where and when one fact was measured."""

    source: Annotated[str, msgspec.Meta(min_length=1)]  # how: the command or the Node field read
    nodes: tuple[str, ...]  # the nodes it was read on
    at: Annotated[str, msgspec.Meta(min_length=1)]  # when: UTC, ISO 8601


# The facts of one platform, by their site.yaml name; each replaces the catalog figure named beside it (None:
# the value is checked, or shown, but replaces nothing).
FACTS: dict[str, str | None] = {
    "gpuNames": "device_name", "hbmMib": "hbm_gib", "gpuProduct": "node_labels", "powerKw": "power_kw",
    "gpusPerNode": None, "powerLimitW": None, "driverVersion": None, "cudaVersion": None,
    "computeCapability": None, "imex": None,
}


class SitePlatform(CamelRecord, frozen=True, kw_only=True, omit_defaults=True):
    """What a site measured on the nodes of one catalog platform. Every value set has its `measured` entry."""

    # As nvidia-smi reports them (a pre-release driver: "NVIDIA Graphics Device").
    gpu_names: tuple[str, ...] | None = None
    hbm_mib: Annotated[int, msgspec.Meta(gt=0)] | None = None  # memory.total per GPU, the smallest seen
    gpu_product: str | None = None  # the nodes' nvidia.com/gpu.product label
    gpus_per_node: Annotated[int, msgspec.Meta(gt=0)] | None = None  # the nodes' allocatable nvidia.com/gpu
    power_limit_w: Annotated[float, msgspec.Meta(gt=0)] | None = None  # nvidia-smi power.limit per GPU
    power_kw: Annotated[float, msgspec.Meta(gt=0)] | None = None  # the rack's draw, as the site metered it
    driver_version: str | None = None
    cuda_version: str | None = None
    compute_capability: str | None = None  # major.minor, as nvidia-smi's compute_cap
    imex: bool | None = None  # ComputeDomain CRD served and the nodes carry nvidia.com/gpu.clique
    measured: dict[str, Measured]

    def __post_init__(self) -> None:
        data = self.facts()
        present = set(data)
        unmeasured = sorted(present - set(self.measured))
        if unmeasured:
            raise Invalid("measured", f"no entry for {', '.join(unmeasured)}: say where and when each was measured")
        stray = sorted(set(self.measured) - present)
        if stray:
            raise Invalid("measured", f"entries for facts that are not set: {', '.join(stray)}")
        if self.gpu_names is not None and (not self.gpu_names or any(not n.strip() for n in self.gpu_names)):
            raise Invalid("gpu_names", "empty, or an empty name")

    def facts(self) -> dict[str, Any]:
        """The facts set, by site.yaml name, in FACTS order."""
        data = self.to_data()
        return {name: data[name] for name in FACTS if data.get(name) is not None}


class SiteFacts(CamelRecord, frozen=True, kw_only=True):
    """site.yaml."""

    api_version: Literal["stackpin.dev/v1"] = msgspec.field(name="apiVersion")
    kind: Literal["SiteFacts"]
    strict: bool = False  # the attestation fails a pod on a GPU name that is still the catalog's estimate
    platforms: dict[str, SitePlatform]


class SiteView(CamelRecord, frozen=True, kw_only=True):
    """The overlay as one stack sees it (and its lock records it): its platform's facts, `strict`, and the
    sha256 of the site.yaml they came from (provenance: `lock --check` compares the facts, not the file)."""

    platform: str
    strict: bool
    facts: SitePlatform
    overlay: str

    def fact_source(self, name: str) -> str:
        m = self.facts.measured[name]
        nodes = ", ".join(m.nodes[:3]) + (f" and {len(m.nodes) - 3} more" if len(m.nodes) > 3 else "")
        return f"measured by {m.source} on {nodes or 'no node named'} at {m.at} (site.yaml {self.overlay[:19]})"

    def identity(self) -> dict[str, Any]:
        """What defines the stack (hashed into its digest): the facts and `strict`, not which file held them."""
        return {"platform": self.platform, "strict": self.strict, "facts": self.facts.to_data()}


# A site.yaml holds a few lines per platform; far beyond that is a mistake, not an overlay.
MAX_SITE_BYTES = 1024 * 1024


def read_site(path: Path, platforms: set[str]) -> tuple[SiteFacts, str]:
    """(the overlay, the sha256 of its bytes); bad input raises InputError at file:line:col."""
    from stackpin.catalog.search import read_catalog_file
    from stackpin.yamlio import parse_yaml

    text = read_catalog_file(path) if path.stat().st_size <= MAX_SITE_BYTES else None
    if text is None:
        raise StackpinError(f"{path}: larger than {MAX_SITE_BYTES} bytes; not a site overlay")
    data, positions = parse_yaml(text, str(path))
    facts = load(data, SiteFacts, positions.locate)
    unknown = sorted(set(facts.platforms) - platforms)
    if unknown:
        raise InputError([Problem(positions.locate(("platforms", name)), f"platforms.{name}",
                                  f"not a catalog platform (known: {', '.join(sorted(platforms))})")
                          for name in unknown])
    return facts, "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def find_site(dirs: tuple[Path, ...]) -> Path | None:
    """The first site catalog directory's site.yaml, or None. Anything there by that name counts (a FIFO, a link
    to a device): reading it then refuses it in one line, where skipping it would hide the site's facts."""
    for directory in dirs:
        candidate = directory / FILE
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return None


def views_of(facts: SiteFacts, digest: str, gpu_of: dict[str, str], where: str) -> dict[str, SiteView]:
    """platform -> SiteView. Two platforms of one GPU must not measure it differently: the catalog holds
    one entry per GPU."""
    views = {p: SiteView(platform=p, strict=facts.strict, facts=f, overlay=digest) for p, f in facts.platforms.items()}
    seen: dict[str, tuple[str, Any]] = {}
    for p, view in sorted(views.items()):
        gpu_facts = (view.facts.gpu_names, view.facts.hbm_mib)
        other = seen.setdefault(gpu_of[p], (p, gpu_facts))
        if other[1] != gpu_facts:
            raise InputError([Problem(Location(where), f"platforms.{p}",
                                      f"measures the GPU {gpu_of[p]} otherwise than platforms.{other[0]}: the "
                                      "catalog holds one entry per GPU")])
    return views


def mib_to_gib(mib: int) -> float:
    return mib / 1024
