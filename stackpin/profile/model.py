"""The StackProfile model: frozen, typo-proof, camelCase in YAML; and its JSON Schema for editors.

Loading (YAML with positions, `extends:`) lives in `loader.py`. The annotations are evaluated (no
`from __future__ import annotations`): msgspec reads them when a profile is first read, and reading real
types costs a few ms less than evaluating strings on every cold command.
"""

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta, field

from stackpin.catalog import load_catalog
from stackpin.errors import clip
from stackpin.profile import podpatch
from stackpin.profile.engine_args import (
    ENGINE_ARG_SCHEMA,
    JsonObject,
    option_problem,
    value_problem,
    value_type_problem,
)
from stackpin.profile.identifiers import env_name_problem, image_ref_problem, model_id_problem, revision_problem
from stackpin.profile.k8s_names import (
    DNS_LABEL_MAX,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_MAX,
    DNS_SUBDOMAIN_PATTERN,
    RENDERED_LABELS,
    label_problems,
)
from stackpin.records import CamelRecord, Invalid, anchored, fields

API_VERSION = "stackpin.dev/v1"
KIND = "StackProfile"
DEFAULT_NAMESPACE = "dynamo"
LOCK_KIND = "StackLock"  # what `stackpin lock` writes; named here so the loader can tell a lockfile apart


class _Model(CamelRecord, frozen=True):
    """Frozen, typo-proof, camelCase in YAML and snake_case in Python. Enum fields hold members after
    parsing: code compares members, and JSON dumps write their values."""


class Placement(StrEnum):
    colocated = "colocated"
    disaggregated = "disaggregated"


def _checked(name: str, value: str | None, problem_of: Callable[[str], str | None]) -> None:
    """Apply an identifier rule to field `name`; its message, with the value clipped, is the error."""
    if value is not None and (problem := problem_of(value)):
        raise Invalid(name, f"{clip(value)!r} {problem}")


class AutotuneMode(StrEnum):
    off = "off"
    tune = "tune"
    replay = "replay"


class Precision(StrEnum):
    bf16 = "bf16"
    fp8 = "fp8"
    fp4 = "fp4"
    fp8_fp4 = "fp8-fp4"


def _catalog_enum(name: str, values: Iterable[str]) -> type[StrEnum]:
    """A closed set the catalog owns, as an enum whose members are named by their values: the schema
    lists them and a wrong value is refused with all of them named, with nothing repeated in code."""
    # mypy reads Enum's functional API with names only known at run time as making a member.
    return StrEnum(name, {v: v for v in values}, module=__name__)  # type: ignore[return-value]


# A platform is an entry of hardware.yaml; a CUDA graph mode one of engine.yaml's (vLLM's CUDAGraphMode).
if TYPE_CHECKING:
    # A type checker cannot see the members of an enum built at run time. These declarations name
    # only the members code refers to; tests/test_facts.py checks each is in the catalog's set.
    class PlatformName(StrEnum):
        pass

    class CudaGraphMode(StrEnum):
        NONE = "NONE"
        FULL_AND_PIECEWISE = "FULL_AND_PIECEWISE"
else:
    PlatformName = _catalog_enum("PlatformName", load_catalog().bundled_hardware.platforms)
    CudaGraphMode = _catalog_enum("CudaGraphMode", load_catalog().engine.cudagraph_modes)


class RouterMode(StrEnum):
    kv = "kv"
    round_robin = "round-robin"
    random = "random"


# Strict: YAML gives real numbers, so `true` or `18.0` where a count belongs is a mistake, not a 1 or
# an 18. Bounded like a Kubernetes int32 field; finite floats only.
PositiveInt = Annotated[int, Meta(ge=1, le=2**31 - 1)]
Version = Annotated[str, Meta(pattern=anchored(r"^[0-9]+\.[0-9]+\.[0-9]+([.-]?(post|rc|dev)[0-9]+)?$"))]  # ASCII digits
DnsLabel = Annotated[str, Meta(pattern=anchored(DNS_LABEL_PATTERN), max_length=40)]
DnsSubdomain = Annotated[str, Meta(pattern=anchored(DNS_SUBDOMAIN_PATTERN), max_length=DNS_SUBDOMAIN_MAX)]


def _doc(text: str) -> Meta:
    return Meta(description=text)


class Metadata(_Model, frozen=True, kw_only=True):
    name: Annotated[DnsLabel, _doc("Stack name; lockfiles and manifests are named after it.")]
    deployment: Annotated[DnsLabel, _doc("The DynamoGraphDeployment this stack is a version of.")]
    namespace: Annotated[str, Meta(pattern=anchored(DNS_LABEL_PATTERN), max_length=DNS_LABEL_MAX)] = DEFAULT_NAMESPACE
    labels: Annotated[dict[str, str], _doc("Kubernetes labels for every rendered object.")] = field(
        default_factory=dict)

    def __post_init__(self) -> None:
        problems = label_problems(self.labels)
        reserved = sorted(set(self.labels) & RENDERED_LABELS)
        if reserved:
            problems.append(f"{', '.join(reserved)} are set by stackpin render")
        if problems:
            raise Invalid("labels", "; ".join(problems))


class ModelSpec(_Model, frozen=True, kw_only=True):
    id: Annotated[str, Meta(min_length=1, description="Hugging Face model id.")]
    revision: Annotated[str, Meta(min_length=1, description="Branch, tag or 40-hex commit; lock pins a commit.")] = (
        "main")
    weights: Annotated[Precision, _doc("Precision of the weights as served.")]
    max_model_len: PositiveInt
    tokenizer_mode: str = "auto"
    tool_call_parser: Annotated[str | None, _doc(
        "Dynamo's --dyn-tool-call-parser for every worker; default the model catalog's (coding agents' tool calls "
        "come back as plain text without one); `none` for no parser.")] = None
    reasoning_parser: Annotated[str | None, _doc(
        "Dynamo's --dyn-reasoning-parser for every worker; default the model catalog's; `none` for no parser.")] = None

    # A model id and a revision become a cache path and a URL at lock time: never a path, never a URL.
    def __post_init__(self) -> None:
        _checked("id", self.id, model_id_problem)
        _checked("revision", self.revision, revision_problem)


class KvCache(_Model, frozen=True, kw_only=True):
    dtype: Annotated[str, _doc("vLLM --kv-cache-dtype; checked against the model and the pinned vLLM.")] = "auto"
    block_size: PositiveInt | None = None
    prefix_caching: bool = True
    events: Annotated[bool, _doc("Publish KV events so the frontend's KV router can route by cache hits.")] = True


class Target(_Model, frozen=True, kw_only=True):
    platform: PlatformName
    count: Annotated[PositiveInt, _doc("Racks (or nodes, for node platforms) the stack may use.")] = 1
    node_labels: Annotated[dict[str, str] | None, _doc(
        "The labels this site's GPU nodes carry, replacing the platform's in every worker's nodeSelector: for a "
        "label the catalog only estimates (GB300, Vera Rubin), or a site's own. `stackpin apply` says before "
        "writing when no node matches.")] = None

    def __post_init__(self) -> None:
        problems = label_problems(self.node_labels or {})
        if problems:
            raise Invalid("node_labels", "; ".join(problems))


class EngineName(StrEnum):
    """The serving engines a stack can run under Dynamo; each is one module of stackpin.backends (a test holds
    the two lists equal). Its name is also its key in spec.versions."""

    vllm = "vllm"
    sglang = "sglang"


class Versions(_Model, frozen=True, kw_only=True):
    dynamo: Version
    vllm: Annotated[Version | None, _doc("The vLLM release, for a stack whose spec.engine is vllm.")] = None
    sglang: Annotated[Version | None, _doc("The SGLang release, for a stack whose spec.engine is sglang.")] = None
    flashinfer: Version
    nixl: Version
    runtime_image: Annotated[str, Meta(min_length=1, description=(
        "Dynamo's runtime image for the stack's engine (tag or digest)."))]

    def engine(self, name: EngineName) -> str | None:
        """The pinned release of engine `name`, or None."""
        value: str | None = getattr(self, name.value)
        return value

    def __post_init__(self) -> None:
        _checked("runtime_image", self.runtime_image, image_ref_problem)


def env_problem(env: dict[str, str]) -> str | None:
    """Why these environment variables cannot go into a container (valid names, no NUL in a value)."""
    problems = [f"{name[:80]!r} {env_name_problem(name)}" for name in env if env_name_problem(name)]
    problems += [f"{name}: the value holds a NUL byte" for name, value in env.items() if "\0" in value]
    return "; ".join(problems) or None


def _check_env(name: str, env: dict[str, str]) -> None:
    if problem := env_problem(env):
        raise Invalid(name, problem)


class Kernels(_Model, frozen=True, kw_only=True):
    attention: str | None = None
    moe: str | None = None
    linear: str | None = None
    all2all: str | None = field(default=None, name="all2all")  # camelCase would make it all2All
    env: Annotated[dict[str, str], _doc("Extra engine environment variables.")] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_env("env", self.env)


class Autotune(_Model, frozen=True, kw_only=True):
    mode: AutotuneMode = AutotuneMode.off
    cache: Annotated[str | None, _doc("OCI reference of a packed autotune cache (replay mode).")] = None

    def __post_init__(self) -> None:
        _checked("cache", self.cache, image_ref_problem)


# The keys of vLLM's --compilation-config that spec.cudaGraphs models (render/args.py compilation_config).
MODELLED_COMPILATION_KEYS = frozenset({"cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size"})


def _check_compilation(name: str, extra: JsonObject) -> None:
    modelled = sorted(set(extra) & MODELLED_COMPILATION_KEYS)
    if modelled:
        raise Invalid(name, f"{', '.join(modelled)}: set by cudaGraphs.mode, captureSizes and maxCaptureSize")
    if problem := value_problem(extra):
        raise Invalid(name, problem)


class CudaGraphs(_Model, frozen=True, kw_only=True):
    mode: CudaGraphMode = CudaGraphMode.FULL_AND_PIECEWISE
    capture_sizes: list[PositiveInt] | None = None
    max_capture_size: PositiveInt | None = None
    compilation: Annotated[JsonObject, _doc(
        "Other keys of vLLM's --compilation-config, written beside the CUDA graph keys above (Dynamo's DeepSeek V4 "
        "recipes: `custom_ops: [all]`, `mode`, `pass_config`); checked against the pinned vLLM's "
        "CompilationConfig.")] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_compilation("compilation", self.compilation)

    def compilation_config(self, pool_keys: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """vLLM's --compilation-config for these settings: the modelled CUDA graph keys and the extra ones (a
        pool's own extra keys over the stack's)."""
        config: dict[str, Any] = {**self.compilation, **(pool_keys or {}), "cudagraph_mode": self.mode.value}
        if self.capture_sizes is not None:
            # vLLM de-duplicates and sorts the list itself; doing it here keeps the bytes canonical.
            config["cudagraph_capture_sizes"] = sorted(set(self.capture_sizes))
        if self.max_capture_size is not None:
            config["max_cudagraph_capture_size"] = self.max_capture_size
        return config


class Speculative(_Model, frozen=True, kw_only=True):
    method: Annotated[str | None, _doc("vLLM speculative method; null turns speculation off.")] = None
    num_speculative_tokens: PositiveInt | None = None
    draft_model: str | None = None
    draft_revision: Annotated[str | None, _doc(
        "40-hex commit of draftModel, which vLLM loads at its default branch otherwise. A draft read from the "
        "target's checkpoint (dspark, mtp) gets the lock's model revision.")] = None
    draft_tensor_parallel_size: PositiveInt | None = None
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    rejection_sample_method: Literal["standard", "synthetic", "block", "fly"] | None = None
    adaptive_verification: bool | None = None

    def __post_init__(self) -> None:
        _checked("draft_revision", self.draft_revision, revision_problem)

    @property
    def enabled(self) -> bool:
        return self.method is not None

    @property
    def k(self) -> int:
        return (self.num_speculative_tokens or 0) if self.enabled else 0


def _check_flags(name: str, args: dict[str, Any]) -> None:
    """engineArgs / dynamoArgs / frontendArgs: values of the accepted types, option names, JSON-able values."""
    problems = [f"{str(flag)[:80]}: {p}" for flag, value in args.items() if (p := value_type_problem(value))]
    if not problems:
        problems = [p for flag in args if (p := option_problem(flag))]
        problems += [f"{flag}: {p}" for flag, value in args.items() if (p := value_problem(value))]
        problems += [f"{flag}: the value holds a NUL byte" for flag, value in args.items()
                     if isinstance(value, str) and "\0" in value]
    if problems:
        raise Invalid(name, "; ".join(problems))


# A flag's value: `true` for a switch, a string or number, or a mapping for a JSON config (EngineArgValue).
# Typed Any here so that _check_flags words a wrong one (one message per flag rather than one per member
# of the union); the schema still says which types are accepted.
Flags = Annotated[dict[str, Any], Meta(extra_json_schema={"additionalProperties": ENGINE_ARG_SCHEMA})]


class Pool(_Model, frozen=True, kw_only=True):
    replicas: PositiveInt = 1
    tensor_parallel: PositiveInt = 1
    data_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    expert_parallel: bool = False
    nodes_per_replica: Annotated[PositiveInt | None, _doc(
        "Nodes one replica spans; derived from the GPUs it needs when unset.")] = None
    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    gpu_memory_utilization: Annotated[float, Meta(gt=0, le=1)] = 0.9
    speculative: Annotated[Speculative | None, _doc("Overrides spec.speculative for this pool.")] = None
    compilation: Annotated[JsonObject, _doc(
        "Extra --compilation-config keys of this pool's workers only, over spec.cudaGraphs.compilation (Dynamo's "
        "V4 recipes set some on decode only).")] = field(default_factory=dict)
    kv_connector_extra_config: Annotated[JsonObject, _doc(
        "`kv_connector_extra_config` of this pool's --kv-transfer-config when disaggregated (Dynamo's V4 recipes "
        "give the decode workers NIXL `num_threads: 8`).")] = field(default_factory=dict)
    env: Annotated[dict[str, str], _doc(
        "Environment variables of this pool's workers only, over spec.kernels.env (Dynamo's V4 Pro recipe tunes "
        "its prefill workers' FP4 MoE and indexer limits this way).")] = field(default_factory=dict)
    engine_args: Annotated[Flags, _doc(
        "vLLM flags stackpin does not model (`--max-logprobs: 20`, `--x: true` for a switch, a mapping for a JSON "
        "config), checked against the pinned vLLM and rendered after the modelled flags.")] = field(
        default_factory=dict)
    dynamo_args: Annotated[Flags, _doc(
        "Flags of Dynamo's `dynamo.vllm` worker, likewise checked against the pinned Dynamo.")] = field(
        default_factory=dict)
    # GPUs per replica, nodes, pods and parallel sizes are derived in topology.py, nowhere else.

    def __post_init__(self) -> None:
        _check_env("env", self.env)
        _check_compilation("compilation", self.compilation)
        if problem := value_problem(self.kv_connector_extra_config):
            raise Invalid("kv_connector_extra_config", problem)
        _check_flags("engine_args", self.engine_args)
        _check_flags("dynamo_args", self.dynamo_args)


class Pools(_Model, frozen=True, kw_only=True):
    worker: Pool | None = None
    prefill: Pool | None = None
    decode: Pool | None = None


POOL_NAMES = tuple(fields(Pools))


# The components a stack runs pods for: the frontend and the pools (topology.ROLES says which per mode).
Component = Literal["frontend", "worker", "prefill", "decode"]
# A Kubernetes quantity as people write sizes (`40Gi`, `512Mi`, `0`), a string: `1` in YAML is a number.
Quantity = Annotated[str, Meta(pattern=anchored(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"),
                               max_length=32)]
PodPatch = Annotated[JsonObject, Meta(description="A strategic merge patch of a PodTemplateSpec.")]


class PlacementSpec(_Model, frozen=True, kw_only=True):
    mode: Placement
    router: RouterMode = RouterMode.kv
    kv_connector: Annotated[str | None, _doc("KV-transfer connector between prefill and decode.")] = None
    migration_limit: Annotated[int, Meta(ge=0, le=2**32 - 1, description=(
        "How many times the frontend may move one request to another worker when its worker goes away, times out, "
        "ends the stream early or refuses it for overload (Dynamo's `--migration-limit`). Dynamo's own default, 0, "
        "turns migration off, so every in-flight request of a decode pod that is rolled, rescheduled or lost "
        "fails; an agent's turn is a long request that a client retries from the start. 3 lets a request survive "
        "a rolling update that moves it more than once; 0 turns it off."))] = 3
    frontend_args: Annotated[Flags, _doc(
        "Flags of Dynamo's `dynamo.frontend` stackpin does not model (Dynamo's recipes: `--trust-remote-code: "
        "true`, `--kv-cache-block-size: 256`), rendered after the modelled ones and checked against the pinned "
        "Dynamo's frontend.")] = field(default_factory=dict)

    shared_memory: Annotated[dict[Component, Quantity], _doc(
        "Size of the tmpfs at /dev/shm per component (`frontend`, and `worker` or `prefill`/`decode`), over the "
        "catalog's worker default (the frontend's is the operator's otherwise); `\"0\"` mounts none. Rendered as "
        "v1beta1's sharedMemorySize and v1alpha1's sharedMemory.")] = field(default_factory=dict)
    pod_overrides: Annotated[dict[Component, PodPatch], _doc(
        "A Kubernetes strategic merge patch of a component's pod template (`metadata`, `spec`), applied last, to "
        "both DynamoGraphDeployment versions alike: what the profile does not model (CPU/memory requests and "
        "limits, RDMA NICs, hugepages, volumes and mounts, envFrom, tolerations, node selectors, labels, "
        "annotations). The engine container is `main` (`spec.containers: [{name: main, resources: ...}]`). Lists "
        "merge as the API server merges them (containers, env, volumes by name, volumeMounts by mountPath, ...; "
        "other lists replace); null deletes a key; `$patch: replace` and `$patch: delete` as Kubernetes defines "
        "them. Refused: GPU resources, DRA claims, nodeName and replicas (the topology's), the main container's "
        "image, command and args (engineArgs, dynamoArgs, frontendArgs), other directives. Validate notes each "
        "component that has one (SP271).")] = field(default_factory=dict)

    pools: Pools  # which of them the mode runs: topology.py
    def __post_init__(self) -> None:
        _check_flags("frontend_args", self.frontend_args)
        runs = {"frontend", *(("worker",) if self.mode == Placement.colocated else ("prefill", "decode"))}
        for name, given in (("shared_memory", self.shared_memory), ("pod_overrides", self.pod_overrides)):
            stray = sorted(set(given) - runs)
            if stray:
                raise Invalid(name, f"{', '.join(stray)}: the {self.mode.value} placement runs no such component "
                                    f"(it runs {', '.join(sorted(runs))})")
        problems = [f"{component}.{where}: {why}" if where else f"{component}: {why}"
                    for component, patch in sorted(self.pod_overrides.items())
                    for where, why in (podpatch.patch_problems(patch) or podpatch.forbidden_problems(patch, component))]
        if problems:
            raise Invalid("pod_overrides", "; ".join(problems))


class Fallbacks(_Model, frozen=True, kw_only=True):
    """What a GPU without native support must use instead; stated so that nobody is surprised."""

    precision_emulation: list[Literal["fp8", "fp4"]] = field(default_factory=list)
    cpu_offload_gib: Annotated[float, Meta(ge=0, le=2**20)] = 0.0


class ModelStore(_Model, frozen=True, kw_only=True):
    """Where workers read the weights: a PVC holding a Hugging Face cache with the pinned revision
    pre-staged (as the upstream DeepSeek V4 recipes do), instead of every pod downloading ~0.5 TB."""

    pvc: Annotated[DnsSubdomain, _doc("PersistentVolumeClaim name.")]
    mount_path: Annotated[str, Meta(pattern=r"^/[^\x00]*$")] = "/model-cache"
    offline: Annotated[bool, _doc("HF_HUB_OFFLINE=1: the revision must already be on the volume.")] = True
    token_secret: Annotated[DnsSubdomain | None, _doc(
        "Secret whose keys (HF_TOKEN) become environment variables.")] = None


class Service(_Model, frozen=True, kw_only=True):
    per_agent_tok_s: Annotated[float, Meta(gt=0, le=1e6)]
    ttft_seconds: Annotated[float, Meta(gt=0, le=86400)]
    agents: PositiveInt


RULE_CODE_PATTERN = r"^SP[0-9]{3}$"


class Acknowledgement(_Model, frozen=True, kw_only=True):
    """A validation finding the stack's owners accept on purpose, with why (eslint-disable with a reason)."""

    rule: Annotated[str, Meta(pattern=anchored(RULE_CODE_PATTERN), description=(
        "The rule's code. Its warnings and infos are accepted, never an error: a stack that fails to start "
        "(`stackpin rules -o json` says which rules can be acknowledged)."))]
    reason: Annotated[str, Meta(min_length=1, max_length=500, description=(
        "Why the finding is accepted: printed beside it. Line breaks fold into spaces."))]
    where: Annotated[Annotated[str, Meta(min_length=1, max_length=300)] | None, Meta(description=(
        "Narrows the acknowledgement to one pool (`worker`, `prefill`, `decode`: findings under "
        "spec.placement.pools.ROLE) or to a field path as findings print it "
        "(`spec.placement.pools.worker.tensorParallel`) and the fields under it; every finding of the rule when "
        "unset."))] = None

    def __post_init__(self) -> None:
        # A finding prints on one line, its reason with it.
        folded = " ".join(self.reason.split())
        if not folded:
            raise Invalid("reason", "a reason is required: say why the finding is accepted")
        msgspec.structs.force_setattr(self, "reason", folded)
        where = self.where
        if where is None or where in POOL_NAMES or (
                where.startswith(("spec.", "metadata.")) and not any(c.isspace() for c in where)):
            return
        raise Invalid("where", f"{clip(where)!r} is neither a pool ({', '.join(POOL_NAMES)}) nor a field path as "
                      "findings print it (spec.FIELD...)")


class Spec(_Model, frozen=True, kw_only=True):
    engine: Annotated[EngineName, _doc(
        "The serving engine Dynamo runs in every worker: its release is spec.versions.<engine>.")] = EngineName.vllm
    model: ModelSpec
    target: Target
    versions: Versions
    kv_cache: KvCache = field(default_factory=KvCache)
    kernels: Kernels = field(default_factory=Kernels)
    autotune: Autotune = field(default_factory=Autotune)
    cuda_graphs: CudaGraphs = field(default_factory=CudaGraphs)
    speculative: Speculative = field(default_factory=Speculative)
    placement: PlacementSpec
    fallbacks: Fallbacks = field(default_factory=Fallbacks)
    model_store: ModelStore | None = None
    service: Service
    mirrors: Annotated[dict[str, str], _doc(
        "Registry -> mirror (host[:port][/prefix]) used to resolve images.")] = field(default_factory=dict)
    attestation: Annotated[bool, _doc(
        "Each worker checks, before its engine starts, that the runtime image's vLLM, FlashInfer, Dynamo and NIXL, "
        "the mounted autotune cache and the GPU are the locked ones; false turns the check off (SP185 warns).")] = True
    catalog_path: Annotated[list[str], _doc(
        "Site catalog directories (as `stackpin engines add --catalog DIR` writes them) searched first for this "
        "stack's engine releases and version pins, before STACKPIN_CATALOG_PATH's and the bundled catalog; "
        "relative to the working directory, as STACKPIN_CATALOG_PATH's entries are.")] = field(default_factory=list)
    acknowledge: Annotated[list[Acknowledgement], _doc(
        "Warnings accepted on purpose, each with its reason: still reported, marked acknowledged, and not counted "
        "by `validate --fail-on`. Validation only: not locked, hashed or rendered. A profile that `extends:` a "
        "base and sets its own list replaces the base's (lists replace); one that matches no finding is reported "
        "(SP251).")] = field(default_factory=list)

    @property
    def engine_version(self) -> str:
        """The pinned release of the stack's engine (the model refuses a spec without it)."""
        return self.versions.engine(self.engine) or ""

    def __post_init__(self) -> None:
        # Exactly the engine's release is pinned: another engine's version would be locked and attested for
        # nothing, and read by a reviewer as what runs.
        others = [e.value for e in EngineName if e != self.engine and self.versions.engine(e) is not None]
        if self.versions.engine(self.engine) is None:
            raise Invalid("versions", f"spec.engine is {self.engine.value}: pin its release in "
                          f"spec.versions.{self.engine.value}")
        if others:
            raise Invalid("versions", f"spec.engine is {self.engine.value}: spec.versions.{others[0]} pins an "
                          f"engine this stack does not run; remove it")
        dirs = self.catalog_path
        problems = [f"{clip(d)!r}: {why}" for d in dirs for why in (
            "is empty" if not d.strip() else None, "holds a NUL byte" if "\0" in d else None) if why]
        if len(set(dirs)) != len(dirs):
            problems.append("names a directory twice")
        if problems:
            raise Invalid("catalog_path", "; ".join(problems))


class StackProfile(_Model, frozen=True, kw_only=True):
    api_version: Literal["stackpin.dev/v1"] = field(name="apiVersion")
    kind: Literal["StackProfile"]
    extends: Annotated[str | None, _doc("Base profile path, relative to this file.")] = None
    metadata: Metadata
    spec: Spec

    @property
    def name(self) -> str:
        return self.metadata.name

    def speculative_for(self, pool: Pool) -> Speculative:
        """The speculative settings a pool runs with: its own override, else the stack's."""
        return pool.speculative if pool.speculative is not None else self.spec.speculative


def _without_required(node: Any) -> Any:
    """A copy of a schema with no `required` anywhere and $refs pointing at the Partial* defs."""
    if isinstance(node, dict):
        out = {k: _without_required(v) for k, v in node.items() if k != "required"}
        if isinstance(out.get("$ref"), str):
            out["$ref"] = out["$ref"].replace("#/$defs/", "#/$defs/Partial")
        return out
    if isinstance(node, list):
        return [_without_required(v) for v in node]
    return node


def profile_json_schema() -> dict[str, Any]:
    """The profile schema for editors. A profile that `extends:` a base is checked for known keys and
    types only: required fields may come from the base (load_profile checks the merged result)."""
    defs = msgspec.json.schema(StackProfile)["$defs"]
    partial_defs = {f"Partial{name}": _without_required(d) for name, d in defs.items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://stackpin.dev/schemas/stackprofile.v1.json",
        "title": "stackpin StackProfile",
        "$defs": {**defs, **partial_defs},
        "if": {"type": "object", "required": ["extends"]},
        "then": {"$ref": "#/$defs/PartialStackProfile"},
        "else": {"$ref": "#/$defs/StackProfile"},
    }

