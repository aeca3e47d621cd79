"""Facts as data: hardware, models, engine vocabulary and version pins, each with its source.

Loaded once per process and handed out as immutable records; nothing else in stackpin spells a fact.
"""

from collections.abc import Callable
from enum import StrEnum
from functools import cache, cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec
import yaml

from stackpin.catalog.search import bundled, read_catalog_file, site_dirs
from stackpin.catalog.site import PRODUCT_LABEL, SiteView, find_site, mib_to_gib, read_site, views_of
from stackpin.catalog.version import PackageVersion, decode_version, parse_version
from stackpin.errors import InputError, Location, Problem, StackpinError
from stackpin.records import DecHook, FieldPath, Invalid, Record, load, problems_of
from stackpin.yamlio import Positions, load_data, parse_yaml

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
T = TypeVar("T")


class _Fact(Record, frozen=True, kw_only=True):
    """A catalog entry: frozen, its YAML keys its field names, a typo refused."""


class _Sourced(_Fact, frozen=True, kw_only=True):
    """A catalog entry whose figures each name their source (`sources`: field -> citation) and say
    whether they are estimates (`estimates`: field -> how it was derived). Every figure a rule, the
    step model or plan reads must appear in `sources` (tests/test_facts.py holds that)."""

    sources: dict[str, str] = msgspec.field(default_factory=dict)
    estimates: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        known = set(self.__struct_fields__) - {"sources", "estimates", "source"}
        for name, named in (("sources", self.sources), ("estimates", self.estimates)):
            unknown = sorted(set(named) - known)
            if unknown:
                raise Invalid(name, f"sources/estimates name no field of this entry: {', '.join(unknown)}")
            empty = sorted(k for k, v in named.items() if not v.strip())
            if empty:
                raise Invalid(name, f"empty source or derivation for: {', '.join(empty)}")

    def is_estimate(self, figure: str) -> bool:
        return figure in self.estimates

    def figures(self) -> tuple[str, ...]:
        """The entry's figures: numbers (a sub-model of numbers counts as one) and node labels."""
        def number(value: object) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool)

        out = []
        for name in self.__struct_fields__:
            value = getattr(self, name)
            # Cluster-facing names count where the entry cites or estimates them (a GPU's device_name).
            named = name == "device_name" and (name in self.sources or name in self.estimates)
            if name == "node_labels" or named or number(value) or (
                    isinstance(value, _Fact) and all(number(getattr(value, f)) for f in value.__struct_fields__)):
                out.append(name)
        return tuple(out)

    def unsourced(self) -> tuple[str, ...]:
        """Figures with no citation in `sources`: each is a finding (tests/test_facts.py)."""
        return tuple(f for f in self.figures() if f not in self.sources)


class Gpu(_Sourced, frozen=True, kw_only=True):
    name: str
    device_name: str
    sm_arch: str
    hbm_gib: float
    hbm_tbps: float
    scaleup_gbps: float
    native_fp8: bool
    native_fp4: bool
    # Published dense peak TFLOPs per GPU by precision; None where the GPU has no such format.
    tflops_bf16: float | None = None
    tflops_fp8: float | None = None
    tflops_fp4: float | None = None
    source: str

    def peak_tflops(self, precision: str) -> float:
        """Dense peak in `precision` (bf16, fp8 or fp4); a GPU without it: its widest format's."""
        table: dict[str, float] = {p: v for p in ("bf16", "fp8", "fp4")
                                   if (v := getattr(self, f"tflops_{p}")) is not None}
        if not table:
            raise StackpinError(f"GPU {self.name}: the catalog gives no peak TFLOPs")
        return table.get(precision, next(iter(table.values())))

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor) of the CUDA compute capability: sm_103 -> (10, 3), sm_90 -> (9, 0)."""
        digits = self.sm_arch.removeprefix("sm_").rstrip("abf")
        return int(digits[:-1]), int(digits[-1])

    @property
    def compute_major(self) -> int:
        """What vLLM's kernel gates compare."""
        return self.compute_capability[0]


class PlatformKind(StrEnum):
    rack = "rack"  # an NVL72 rack: nodes that share one NVLink domain, deployed and counted whole
    node = "node"  # one HGX node


class Platform(_Sourced, frozen=True, kw_only=True):
    kind: PlatformKind
    gpu: str
    gpus_per_node: int
    nodes: int
    nvlink_domain_gpus: int
    cpu_arch: str
    multinode_nvlink: bool
    node_labels: dict[str, str]
    source: str
    # Whole-rack (or whole-node) power draw in kW, for capacity plans; None where no public figure holds.
    power_kw: float | None = None
    power_source: str = ""

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


class ActiveParams(_Fact, frozen=True, kw_only=True):
    """Parameters (billions) one token activates, per phase."""

    prefill: float
    decode: float


class Experts(_Fact, frozen=True, kw_only=True):
    """An MoE model's routed experts per layer and how many one token picks (shared experts aside)."""

    routed: int
    per_token: int


class ModelPrecision(_Fact, frozen=True, kw_only=True):
    """Precision of the checkpoint's dense weights and of its routed experts."""

    dense: str
    routed_experts: str


class ModelServing(_Fact, frozen=True, kw_only=True):
    """Dynamo worker settings a model needs whatever the stack: its tool-call and reasoning parsers (without
    them a coding agent's tool calls come back as plain text). A profile may override each."""

    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    source: str


class ModelFacts(_Sourced, frozen=True, kw_only=True):
    hf_ids: tuple[str, ...]
    model_type: str
    params_b: float
    active_params_b: ActiveParams
    architecture: str
    precision: ModelPrecision
    checkpoint_gib: float
    routed_expert_share: float
    experts: Experts | None = None  # None: not an MoE model stackpin knows the routing of (not simulated)
    kv_bytes_per_token: int
    max_context: int
    speculative_methods: tuple[str, ...]
    rejected_speculative_methods: dict[str, str]
    attention_backends: tuple[str, ...]
    rejected_attention_backends: dict[str, str]
    kv_cache_dtypes: tuple[str, ...]
    serving: ModelServing | None = None
    source: str


class DynamoParsers(_Fact, frozen=True, kw_only=True):
    """The parser names one Dynamo release accepts (catalog/dynamo_parsers.yaml, from its runtime wheel)."""

    wheel: str
    sha256: str
    tool: tuple[str, ...]
    reasoning: tuple[str, ...]


# versions.yaml's pin fields say what they hold in their metadata (the engines' release readers and the seam
# read it, so neither spells the fields): PINS is the project whose exact version a field holds (`project==X`
# in the release's Requires-Dist; default: the field's name, `_` read as `-`); NIXL_FIELD, on a Dynamo
# release's engine field, where the NIXL of the same extra is kept.
PINS, NIXL_FIELD = "pins", "nixl_field"
NIXL = "nixl"  # the project NIXL is published as: every engine's extra pins one


class DynamoPin(_Fact, frozen=True, kw_only=True):
    """What a Dynamo release's extras pin: each engine Dynamo runs has an extra named after it (its field
    here, the engine's release) that pins the engine and NIXL (the field NIXL_FIELD names)."""

    vllm: Annotated[str, msgspec.Meta(extra={NIXL_FIELD: NIXL})]
    nixl: str  # the `vllm` extra's
    crd: str
    # The `sglang` extra's pins: sglang[diffusion]==X and nixl[cu13]==Y; None where the metadata pins no exact
    # version (1.3.1's nixl is a range) or the entry predates them (a site file).
    sglang: Annotated[str | None, msgspec.Meta(extra={NIXL_FIELD: "sglang_nixl"})] = None
    sglang_nixl: str | None = None

    @staticmethod
    def extras() -> dict[str, str]:
        """Dynamo's engine extras stackpin records: the extra (its engine release's field) -> its NIXL's field."""
        return {name: meta[NIXL_FIELD] for name, meta in field_metadata(DynamoPin).items() if NIXL_FIELD in meta}

    def engine(self, extra: str) -> tuple[str | None, str | None]:
        """The engine release and NIXL that the extra named `extra` pins."""
        nixl = self.extras().get(extra)
        if nixl is None:
            raise ValueError(f"Dynamo pins no engine {extra!r}: {' or '.join(self.extras())}")
        return getattr(self, extra), getattr(self, nixl)


class VllmPin(_Fact, frozen=True, kw_only=True):
    flashinfer: Annotated[str, msgspec.Meta(extra={PINS: "flashinfer-python"})]
    torch: str


class SglangPin(_Fact, frozen=True, kw_only=True):
    """What an SGLang release's metadata pins exactly (flashinfer_python[cu13]==X, torch==Y, sglang-kernel==Z)."""

    flashinfer: Annotated[str, msgspec.Meta(extra={PINS: "flashinfer-python"})]
    torch: str
    sglang_kernel: str | None = None


@cache
def field_metadata(record: type[msgspec.Struct]) -> dict[str, dict[str, Any]]:
    """A record's fields (in order) -> the `msgspec.Meta(extra=...)` each is annotated with ({} for none)."""
    import typing

    hints = typing.get_type_hints(record, include_extras=True)
    out: dict[str, dict[str, Any]] = {}
    for name in record.__struct_fields__:
        extra: dict[str, Any] = {}
        for meta in getattr(hints[name], "__metadata__", ()):
            extra |= getattr(meta, "extra", None) or {}
        out[name] = extra
    return out


def pinned_projects(record: type[msgspec.Struct]) -> dict[str, tuple[str, bool]]:
    """A pin record's fields -> (the project whose exact version each holds, whether the field is required)."""
    required = {f.name for f in msgspec.structs.fields(record) if f.required}
    return {name: (meta.get(PINS, name.replace("_", "-")), name in required)
            for name, meta in field_metadata(record).items()}


class RemovedEnv(_Fact, frozen=True, kw_only=True):
    removed_in: PackageVersion
    use: str


class DgdStorage(_Fact, frozen=True, kw_only=True):
    """The DynamoGraphDeployment CRD's storage version by Dynamo release (versions.yaml `dgd_storage`): what a
    release's `crd` pin is when `engines add` is not told. A wheel cannot say it: the CRD ships with the
    operator, and the planner's DYNAMO_API_VERSION names a version the operator serves, not the one it stores."""

    v1beta1_from: PackageVersion  # the first release whose operator stores v1beta1; earlier ones store v1alpha1
    source: str

    def of(self, dynamo: str) -> str:
        return "v1beta1" if parse_version(dynamo) >= self.v1beta1_from else "v1alpha1"


class Versions(_Fact, frozen=True, kw_only=True):
    dynamo: dict[str, DynamoPin]
    vllm: dict[str, VllmPin]
    sglang: dict[str, SglangPin] = msgspec.field(default_factory=dict)
    removed_env: dict[str, RemovedEnv]
    distributions: dict[Literal["dynamo", "vllm", "flashinfer", "nixl"], str]
    dgd_storage: DgdStorage
    source: str

    def releases(self, engine: str) -> dict[str, Any]:
        """What each release of the engine Dynamo's extra `engine` runs pins itself (its section, named after
        the extra: FlashInfer, torch, ...), by version; {} for an engine with no section."""
        found: dict[str, Any] = getattr(self, engine) if engine in release_sections() else {}
        return found


def _section_record(section: str) -> type[msgspec.Struct] | None:
    """The record a versions.yaml section maps versions (or names) to; None for a section of plain values."""
    import typing

    args = typing.get_args(typing.get_type_hints(Versions)[section])
    record = args[1] if len(args) == 2 else None
    return record if isinstance(record, type) and issubclass(record, msgspec.Struct) else None


@cache
def release_sections() -> dict[str, type[msgspec.Struct]]:
    """The sections of the engines' own releases (named after Dynamo's extra that pins them) -> their record."""
    return {extra: record for extra in DynamoPin.extras()
            if extra in Versions.__struct_fields__ and (record := _section_record(extra)) is not None}


class AutotuneFiles(_Fact, frozen=True, kw_only=True):
    """Which FlashInfer autotune files a vLLM release reads (engine.yaml `autotune_files`)."""

    per_rank_since: PackageVersion  # first release with one autotune_configs_dp{d}_rank{r}.json per rank
    v2_store_since: PackageVersion  # first release that sends a one-rank engine to FlashInfer's v2 store

    def per_rank(self, release: str) -> bool:
        """Whether this vLLM reads one file per rank (else one shared autotune_configs.json)."""
        return parse_version(release) >= self.per_rank_since

    def v2_store(self, release: str) -> bool:
        """Whether this vLLM keeps a one-rank, one-node engine's tuning in FlashInfer's v2 store."""
        return parse_version(release) >= self.v2_store_since


class MaxCaptureSize(_Fact, frozen=True, kw_only=True):
    """vLLM's default largest CUDA graph capture size, by GPU family."""

    default: int
    sm100_family: int


class DefaultCaptureSizes(_Fact, frozen=True, kw_only=True):
    """vLLM's default capture list: `first`, then steps of `step` below `wide_from`, then of `wide_step`."""

    first: tuple[int, ...]
    step: int
    wide_from: int
    wide_step: int

    def up_to(self, max_size: int) -> list[int]:
        """The sizes vLLM captures by default when the largest is `max_size`."""
        sizes = [s for s in self.first if s <= max_size]
        if max_size >= self.step:
            sizes += range(self.step, min(max_size + 1, self.wide_from), self.step)
        if max_size >= self.wide_from:
            sizes += range(self.wide_from, max_size + 1, self.wide_step)
        return sorted(set(sizes))


class MemoryDefaults(_Fact, frozen=True, kw_only=True):
    """vLLM's defaults when max-num-seqs / max-num-batched-tokens are unset, on GPUs of threshold_gib or more."""

    threshold_gib: float
    max_num_seqs: int
    max_num_batched_tokens: int

    def max_num_seqs_for(self, hbm_gib: float) -> int | None:
        """vLLM's max-num-seqs default on a GPU of `hbm_gib`; None where the catalog does not know it."""
        return self.max_num_seqs if hbm_gib >= self.threshold_gib else None

    def max_num_batched_tokens_for(self, hbm_gib: float) -> int | None:
        """vLLM's max-num-batched-tokens default on a GPU of `hbm_gib`; None where the catalog does not know it."""
        return self.max_num_batched_tokens if hbm_gib >= self.threshold_gib else None


class MemoryReserve(_Fact, frozen=True, kw_only=True):
    """Per-GPU memory outside weights and KV cache (stackpin estimates)."""

    runtime_gib: float
    cudagraph_mib_per_size: float


class StartupEstimate(_Fact, frozen=True, kw_only=True):
    """The rates behind the rendered startup probe's budget (stackpin estimates)."""

    base_s: float
    load_gib_per_s: float
    capture_s_per_size: float
    autotune_s: float
    margin: float
    probe_period_s: int


class HostPerGpu(_Fact, frozen=True, kw_only=True):
    """CPU and memory a GPU pod requests for each of its GPUs."""

    cpu: PositiveInt
    memory_gib: PositiveInt


class ImageVolume(_Fact, frozen=True, kw_only=True):
    """The Kubernetes releases that have image volumes (behind a feature gate) and turn them on by default."""

    since: str
    default_on: str
    feature_gate: str


class WorkerRouter(_Fact, frozen=True, kw_only=True):
    """Where Dynamo's worker takes router flags (engine.yaml says what they do there)."""

    defined_in: tuple[str, ...]  # the package files of the router option groups (a catalog option's defined_in)
    mode_flag: str  # the flag (or its env var) that makes a worker set advertise its own routing


class Engine(_Fact, frozen=True, kw_only=True):
    cudagraph_modes: tuple[str, ...]  # the closed set profiles choose from (profile.model.CudaGraphMode)
    full_decode_modes: tuple[str, ...]
    piecewise_modes: tuple[str, ...]
    fallback_backends: tuple[str, ...]
    kv_connectors: tuple[str, ...]
    default_max_capture_size: MaxCaptureSize
    sm100_family: tuple[str, ...]
    default_capture_sizes: DefaultCaptureSizes
    memory_dependent_defaults: MemoryDefaults
    memory_reserve: MemoryReserve
    headroom_warn_fraction: float
    source: str
    startup_estimate: StartupEstimate
    startup_unknown_checkpoint_gib: float
    worker_shared_memory: str
    worker_host_per_gpu: HostPerGpu
    image_volume: ImageVolume
    autotune_files: AutotuneFiles
    worker_router: WorkerRouter

    def max_capture_ceiling(self, sm_arch: str) -> int:
        """The cap of vLLM's default max capture size on a GPU of this SM arch (1024 on the SM100 family)."""
        sizes = self.default_max_capture_size
        return sizes.sm100_family if sm_arch in self.sm100_family else sizes.default

    def __post_init__(self) -> None:
        for name in ("full_decode_modes", "piecewise_modes"):
            unknown = sorted(set(getattr(self, name)) - set(self.cudagraph_modes))
            if unknown:
                raise Invalid(name, f"{', '.join(unknown)} not in cudagraph_modes")


class GroveNames(_Sourced, frozen=True, kw_only=True):
    """The Grove name budget Dynamo's webhook checks (dynamo_admission.yaml says how it is counted)."""

    limit: PositiveInt
    role_suffixes: tuple[str, ...]
    min_pcs_name: PositiveInt
    hash_hex: PositiveInt


class AdmissionRule(_Fact, frozen=True, kw_only=True):
    """A create rule of Dynamo's (webhook or newer CRD) as CEL over the value at `path`."""

    api_version: str
    kind: str = "DynamoGraphDeployment"
    path: str
    field: str
    rule: str
    message: str
    optional_old_self: bool = False
    origin: Literal["webhook", "cel"]
    source: str


class DynamoAdmission(_Fact, frozen=True, kw_only=True):
    source: str
    grove_names: GroveNames
    rules: tuple[AdmissionRule, ...]


class Hardware(_Fact, frozen=True, kw_only=True):
    """hardware.yaml."""

    gpus: dict[str, Gpu]
    platforms: dict[str, Platform]


class _ModelsFile(_Fact, frozen=True, kw_only=True):
    """models.yaml."""

    models: dict[str, ModelFacts]


class _ParsersFile(_Fact, frozen=True, kw_only=True):
    """dynamo_parsers.yaml."""

    dynamo: dict[str, DynamoParsers]


class Catalog:
    """The catalog's facts, read-only. Each file is read and checked the first time a command asks for what
    it holds: every command imports the profile's enums (platforms, graph modes), few need the models, the
    pins or the admission rules, and YAML parsing is most of what loading the catalog costs."""

    _sites: tuple[Path, ...]  # the site catalog directories whose pins are laid over the bundled ones
    # A lock's site facts (render): these and no site.yaml; None: the first site.yaml on the search path.
    _pinned: tuple[SiteView, ...] | None

    def __init__(self, sites: tuple[Path, ...], pinned: tuple[SiteView, ...] | None = None) -> None:
        object.__setattr__(self, "_sites", sites)
        object.__setattr__(self, "_pinned", pinned)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"the catalog is read-only: cannot set {name}")

    @cached_property
    def bundled_hardware(self) -> Hardware:
        """hardware.yaml as shipped, without a site's measurements."""
        return _bundled("hardware.yaml", Hardware)

    @cached_property
    def site_views(self) -> dict[str, SiteView]:
        """platform -> what the site measured there: the lock's facts when this catalog is a lock's, else
        the first site.yaml on the search path (stackpin.catalog.site)."""
        if self._pinned is not None:
            return {view.platform: view for view in self._pinned}
        path = find_site(self._sites)
        if path is None:
            return {}
        hardware = self.bundled_hardware
        facts, digest = read_site(path, set(hardware.platforms))
        return views_of(facts, digest, {k: p.gpu for k, p in hardware.platforms.items()}, str(path))

    def site_for(self, platform: str) -> SiteView | None:
        return self.site_views.get(platform)

    def for_lock(self, view: SiteView | None) -> "Catalog":
        """This catalog with a lock's site facts in place of any site.yaml: what render reads."""
        return _load_pinned(self._sites, (view,) if view is not None else ())

    @cached_property
    def _hardware(self) -> Hardware:
        return overlay_hardware(self.bundled_hardware, self.site_views)

    @property
    def gpus(self) -> dict[str, Gpu]:
        return self._hardware.gpus

    @property
    def platforms(self) -> dict[str, Platform]:
        return self._hardware.platforms

    @cached_property
    def models(self) -> dict[str, ModelFacts]:
        return _bundled("models.yaml", _ModelsFile).models

    @cached_property
    def versions(self) -> Versions:
        """The bundled pins with those of the site catalogs laid over them."""
        return _versions(self._sites)

    @cached_property
    def engine(self) -> Engine:
        return _bundled("engine.yaml", Engine)

    @cached_property
    def dynamo_parsers(self) -> dict[str, DynamoParsers]:
        return _bundled("dynamo_parsers.yaml", _ParsersFile).dynamo

    @cached_property
    def dynamo_admission(self) -> DynamoAdmission:
        return _bundled("dynamo_admission.yaml", DynamoAdmission)

    def model_for(self, model_id: str) -> tuple[str, ModelFacts] | None:
        """Catalog entry for a Hugging Face id (or a catalog key), if the catalog knows the model."""
        for key, facts in self.models.items():
            if model_id == key or model_id in facts.hf_ids:
                return key, facts
        return None

    def gpu_of(self, platform: str) -> Gpu:
        return self.gpus[self.platforms[platform].gpu]


BUNDLED = "stackpin/catalog"  # how the bundled files are named in messages


def _text(name: str) -> str:
    return bundled().joinpath(name).read_text(encoding="utf-8")


# The bundled YAML files' data as one JSON file (`make catalog`, scripts/extract_catalog.py): libyaml takes
# ~6 ms to read them in every command, msgspec ~0.5 ms. Each entry names the CRC-32 of the YAML text it came
# from, and a file edited since is read as YAML; tests/test_facts.py keeps the extract in step.
EXTRACT = "bundled-data.json"


class _Extracted(msgspec.Struct, frozen=True):
    crc32: int
    data: msgspec.Raw  # decoded on each read: every caller gets data of its own, as from YAML


@cache
def _extract() -> dict[str, _Extracted]:
    try:
        return msgspec.json.decode(bundled().joinpath(EXTRACT).read_bytes(), type=dict[str, _Extracted])
    except (OSError, msgspec.DecodeError):  # no extract (or a broken one): every file is read as YAML
        return {}


def _data(name: str, text: str) -> Any:
    """The data of the bundled file `name` whose text is `text`: the extract's when it came from this text."""
    import zlib

    entry = _extract().get(name)
    if entry is not None and entry.crc32 == zlib.crc32(text.encode("utf-8")):
        return msgspec.json.decode(entry.data)
    return load_data(text)


def _read(name: str) -> Any:
    return _data(name, _text(name))


def catalog_extract() -> bytes:
    """The content of the extract for the bundled YAML files as they are now."""
    import zlib

    texts = {path.name: _text(path.name) for path in sorted(bundled().glob("*.yaml"))}
    entries = {name: {"crc32": zlib.crc32(text.encode("utf-8")), "data": load_data(text)}
               for name, text in texts.items()}
    return msgspec.json.encode(entries) + b"\n"  # in the files' order: mappings keep it (the platforms' enum)


def lazy_locate(text: str, file: str) -> Callable[[FieldPath], Location]:
    """Where a field path of `text` (the file `file`) sits. The file is parsed again, with positions, at the
    first call only: on the error path, never when the catalog reads cleanly."""
    found: list[Positions] = []

    def locate(path: FieldPath) -> Location:
        if not found:
            try:
                found.append(parse_yaml(text, file)[1])
            except InputError:  # read by a looser reader than parse_yaml's (JSON): no line to give
                found.append(Positions(file, {}))
        return found[0].locate(path)

    return locate


def load_first(data: Any, root: type[Any], locate: Callable[[FieldPath], Location],
               dec_hook: DecHook | None = None) -> Any:
    """`data` as a `root` (one msgspec conversion when it is one); its first problem (in file order) as one
    located line, exit 2. A catalog file that is wrong is one file:line:col and field, not a page: a site
    catalog is fixed one problem at a time. With `lazy_locate`, a file is parsed for positions only then."""
    try:
        return load(data, root, locate, dec_hook)
    except InputError as exc:
        raise InputError(exc.problems[:1]) from None


# The sections of version pins (a site's versions.yaml lays its own over each): every mapping of records.
PIN_SECTIONS = tuple(name for name in Versions.__struct_fields__ if _section_record(name) is not None)


def versions_skeleton() -> dict[str, Any]:
    """The bundled versions.yaml with empty pin sections: the facts a site's pins are laid over
    (`distributions`), to check a site file on its own."""
    bundled: dict[str, Any] = _read("versions.yaml")
    return {**bundled, **{section: {} for section in PIN_SECTIONS}, "source": ""}


def _merge(bundled: dict[str, Any], sites: tuple[Path, ...]) -> tuple[dict[str, Any], dict[FieldPath, Path]]:
    """merged_versions, and the site file each pin came from ((section, version) -> path)."""
    merged = {key: dict(value) if key in PIN_SECTIONS else value for key, value in bundled.items()}
    origins: dict[FieldPath, Path] = {}
    sources: list[str] = [str(merged.get("source", ""))]
    for directory in reversed(sites):
        path = directory / "versions.yaml"
        if not path.is_file():
            continue
        text = read_catalog_file(path)
        try:
            site = load_data(text) or {}
        except yaml.YAMLError as exc:
            raise StackpinError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(site, dict):
            raise StackpinError(f"{path}: expected a mapping of {', '.join(PIN_SECTIONS)}")
        for section in PIN_SECTIONS:
            pins = site.get(section) or {}
            if not isinstance(pins, dict):
                where = lazy_locate(text, str(path))((section,))
                raise StackpinError(f"{where}: {section}: expected a mapping of versions")
            merged[section].update(pins)
            origins.update(((section, version), path) for version in pins)
        sources.append(f"{path}: {site.get('source', 'no source given')}")
    merged["source"] = "; ".join(sources)
    return merged, origins


def merged_versions(bundled: dict[str, Any], sites: tuple[Path, ...]) -> dict[str, Any]:
    """The bundled version pins with each site directory's `versions.yaml` laid over them (the first
    directory of STACKPIN_CATALOG_PATH wins), as `stackpin engines add --catalog DIR` writes them."""
    return _merge(bundled, sites)[0]


def dgd_storage() -> DgdStorage:
    """The bundled `dgd_storage` fact alone: `engines add` reads it without loading (and caching for the
    process) the catalog whose site pins it is about to write."""
    storage: DgdStorage = msgspec.convert(_read("versions.yaml")["dgd_storage"], DgdStorage, dec_hook=decode_version)
    return storage


def versions_of(merged: dict[str, Any]) -> Versions:
    """Merged version pins as Versions; msgspec.ValidationError (a ValueError) when they are not."""
    versions: Versions = msgspec.convert(merged, Versions, dec_hook=decode_version)
    return versions


def _bundled(name: str, root: type[T]) -> T:
    """A bundled file as a `root`; its first problem at its line."""
    text = _text(name)
    value: T = load_first(_data(name, text), root, lazy_locate(text, f"{BUNDLED}/{name}"), decode_version)
    return value


def _versions(sites: tuple[Path, ...]) -> Versions:
    """The merged pins; the first problem at its line in the file that wrote it: a site's versions.yaml
    for a pin it supplied, the bundled one for the rest."""
    merged, origins = _merge(_read("versions.yaml"), sites)
    try:
        return versions_of(merged)
    except msgspec.ValidationError:
        pass
    path, message = problems_of(merged, Versions, decode_version)[0]
    site = origins.get(path[:2])
    file = str(site) if site is not None else f"{BUNDLED}/versions.yaml"
    where = lazy_locate(read_catalog_file(site) if site else _text("versions.yaml"), file)(path)
    raise InputError([Problem(where, ".".join(map(str, path)), message)])


@cache
def _load(sites: tuple[Path, ...]) -> Catalog:
    return Catalog(sites)


_PINNED: dict[tuple[tuple[Path, ...], bytes], Catalog] = {}


def _load_pinned(sites: tuple[Path, ...], pinned: tuple[SiteView, ...]) -> Catalog:
    """One catalog per search path and lock site facts (render reads many locks of few sites)."""
    key = (sites, msgspec.json.encode(pinned))
    found = _PINNED.get(key)
    if found is None:
        found = _PINNED[key] = Catalog(sites, pinned)
    return found


def overlay_hardware(hardware: Hardware, views: dict[str, SiteView]) -> Hardware:
    """`hardware` with each platform's measured facts in place of the catalog's figures: the figure's source
    names the measurement, and it is no longer an estimate."""
    if not views:
        return hardware
    gpus, platforms = dict(hardware.gpus), dict(hardware.platforms)

    def measured(entry: Any, field: str, value: Any, fact: str, view: SiteView) -> Any:
        return entry.replace(**{field: value, "sources": {**entry.sources, field: view.fact_source(fact)},
                                "estimates": {k: v for k, v in entry.estimates.items() if k != field}})

    for name, view in sorted(views.items()):
        facts, platform = view.facts, platforms[name]
        gpu = gpus[platform.gpu]
        if facts.gpu_names is not None:
            gpu = measured(gpu, "device_name", facts.gpu_names[0], "gpuNames", view)
        if facts.hbm_mib is not None:
            gpu = measured(gpu, "hbm_gib", mib_to_gib(facts.hbm_mib), "hbmMib", view)
        gpus[platform.gpu] = gpu
        if facts.gpu_product is not None:
            platform = measured(platform, "node_labels", {**platform.node_labels, PRODUCT_LABEL: facts.gpu_product},
                                "gpuProduct", view)
        if facts.power_kw is not None:
            platform = measured(platform, "power_kw", facts.power_kw, "powerKw", view)
            platform = platform.replace(power_source=view.fact_source("powerKw"))
        platforms[name] = platform
    return hardware.replace(gpus=gpus, platforms=platforms)


def load_catalog() -> Catalog:
    """The catalog: bundled facts, with the version pins of the site catalogs on STACKPIN_CATALOG_PATH."""
    return _load(site_dirs())
