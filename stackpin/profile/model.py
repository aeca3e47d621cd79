"""The StackProfile model: frozen, typo-proof, camelCase in YAML; and its JSON Schema for editors.

Loading (YAML with positions, `extends:`) lives in `loader.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator
from pydantic.alias_generators import to_camel

from stackpin.catalog import load_catalog
from stackpin.errors import clip
from stackpin.profile.engine_args import EngineArgValue, option_problem, value_problem, value_type_problem
from stackpin.profile.identifiers import env_name_problem, image_ref_problem, model_id_problem, revision_problem
from stackpin.profile.k8s_names import (
    DNS_LABEL_MAX,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_MAX,
    DNS_SUBDOMAIN_PATTERN,
    RENDERED_LABELS,
    label_problems,
)

API_VERSION = "stackpin.dev/v1"
KIND = "StackProfile"
LOCK_KIND = "StackLock"  # what `stackpin lock` writes; named here so the loader can tell a lockfile apart


class _Model(BaseModel):
    """Frozen, typo-proof, camelCase in YAML and snake_case in Python. Enum fields hold members after
    parsing (no use_enum_values): code compares members, and JSON dumps write their values."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class Placement(StrEnum):
    colocated = "colocated"
    disaggregated = "disaggregated"


def _checked(value: str | None, problem_of: Callable[[str], str | None]) -> str | None:
    """Apply an identifier rule; its message, with the value clipped, is the validation error."""
    if value is not None and (problem := problem_of(value)):
        raise ValueError(f"{clip(value)!r} {problem}")
    return value


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
    PlatformName = _catalog_enum("PlatformName", load_catalog().platforms)
    CudaGraphMode = _catalog_enum("CudaGraphMode", load_catalog().engine.cudagraph_modes)


class RouterMode(StrEnum):
    kv = "kv"
    round_robin = "round-robin"
    random = "random"


# Strict: YAML gives real numbers, so `true` or `18.0` where a count belongs is a mistake, not a 1 or
# an 18. Bounded like a Kubernetes int32 field; finite floats only.
PositiveInt = Annotated[int, Field(ge=1, le=2**31 - 1, strict=True)]
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Version = Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([.-]?(post|rc|dev)[0-9]+)?$")]  # ASCII digits only


class Metadata(_Model):
    name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=40,
                               description="Stack name; lockfiles and manifests are named after it.")]
    deployment: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=40,
                                     description="The DynamoGraphDeployment this stack is a version of.")]
    namespace: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=DNS_LABEL_MAX)] = "dynamo"
    labels: dict[str, str] = Field(default_factory=dict, description="Kubernetes labels for every rendered object.")

    @field_validator("labels")
    @classmethod
    def _kubernetes_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        problems = label_problems(labels)
        reserved = sorted(set(labels) & RENDERED_LABELS)
        if reserved:
            problems.append(f"{', '.join(reserved)} are set by stackpin render")
        if problems:
            raise ValueError("; ".join(problems))
        return labels


class ModelSpec(_Model):
    id: Annotated[str, Field(min_length=1, description="Hugging Face model id.")]
    revision: Annotated[str, Field(min_length=1, description="Branch, tag or 40-hex commit; lock pins a commit.")] = (
        "main"
    )
    weights: Precision = Field(description="Precision of the weights as served.")
    max_model_len: PositiveInt
    tokenizer_mode: str = "auto"
    tool_call_parser: str | None = Field(
        None, description="Dynamo's --dyn-tool-call-parser for every worker; default the model catalog's (coding "
        "agents' tool calls come back as plain text without one); `none` for no parser.")
    reasoning_parser: str | None = Field(
        None, description="Dynamo's --dyn-reasoning-parser for every worker; default the model catalog's; `none` "
        "for no parser.")

    # A model id and a revision become a cache path and a URL at lock time: never a path, never a URL.
    @field_validator("id")
    @classmethod
    def _model_id(cls, value: str) -> str | None:
        return _checked(value, model_id_problem)

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str) -> str | None:
        return _checked(value, revision_problem)


class KvCache(_Model):
    dtype: str = Field("auto", description="vLLM --kv-cache-dtype; checked against the model and the pinned vLLM.")
    block_size: PositiveInt | None = None
    prefix_caching: bool = True
    events: bool = Field(True, description="Publish KV events so the frontend's KV router can route by cache hits.")


class Target(_Model):
    platform: PlatformName
    count: PositiveInt = Field(1, description="Racks (or nodes, for node platforms) the stack may use.")
    node_labels: dict[str, str] | None = Field(
        None, description="The labels this site's GPU nodes carry, replacing the platform's in every worker's "
        "nodeSelector: for a label the catalog only estimates (GB300, Vera Rubin), or a site's own. "
        "`stackpin apply` says before writing when no node matches.")

    @field_validator("node_labels")
    @classmethod
    def _kubernetes_labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        problems = label_problems(labels or {})
        if problems:
            raise ValueError("; ".join(problems))
        return labels


class Versions(_Model):
    dynamo: Version
    vllm: Version
    flashinfer: Version
    nixl: Version
    runtime_image: Annotated[str, Field(min_length=1, description="Dynamo vLLM runtime image (tag or digest).")]

    @field_validator("runtime_image")
    @classmethod
    def _runtime_image(cls, value: str) -> str | None:
        return _checked(value, image_ref_problem)


def checked_env(env: dict[str, str]) -> dict[str, str]:
    """Environment variables a container can carry: valid names, no NUL in a value."""
    problems = [f"{name[:80]!r} {env_name_problem(name)}" for name in env if env_name_problem(name)]
    problems += [f"{name}: the value holds a NUL byte" for name, value in env.items() if "\0" in value]
    if problems:
        raise ValueError("; ".join(problems))
    return env


class Kernels(_Model):
    attention: str | None = None
    moe: str | None = None
    linear: str | None = None
    all2all: str | None = Field(None, alias="all2all")  # to_camel would make it all2All
    env: dict[str, str] = Field(default_factory=dict, description="Extra engine environment variables.")

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        return checked_env(env)


class Autotune(_Model):
    mode: AutotuneMode = AutotuneMode.off
    cache: str | None = Field(None, description="OCI reference of a packed autotune cache (replay mode).")

    @field_validator("cache")
    @classmethod
    def _cache(cls, value: str | None) -> str | None:
        return _checked(value, image_ref_problem)


# The keys of vLLM's --compilation-config that spec.cudaGraphs models (render/args.py compilation_config).
MODELLED_COMPILATION_KEYS = frozenset({"cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size"})


class CudaGraphs(_Model):
    mode: CudaGraphMode = CudaGraphMode.FULL_AND_PIECEWISE
    capture_sizes: list[PositiveInt] | None = None
    max_capture_size: PositiveInt | None = None
    compilation: dict[str, JsonValue] = Field(
        default_factory=dict, description="Other keys of vLLM's --compilation-config, written beside the CUDA graph "
        "keys above (Dynamo's DeepSeek V4 recipes: `custom_ops: [all]`, `mode`, `pass_config`); checked against "
        "the pinned vLLM's CompilationConfig.")

    @field_validator("compilation")
    @classmethod
    def _compilation(cls, extra: dict[str, JsonValue]) -> dict[str, JsonValue]:
        modelled = sorted(set(extra) & MODELLED_COMPILATION_KEYS)
        if modelled:
            raise ValueError(f"{', '.join(modelled)}: set by cudaGraphs.mode, captureSizes and maxCaptureSize")
        if problem := value_problem(extra):
            raise ValueError(problem)
        return extra

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


class Speculative(_Model):
    method: str | None = Field(None, description="vLLM speculative method; null turns speculation off.")
    num_speculative_tokens: PositiveInt | None = None
    draft_model: str | None = None
    draft_revision: str | None = Field(None, description=(
        "40-hex commit of draftModel, which vLLM loads at its default branch otherwise. A draft read from the "
        "target's checkpoint (dspark, mtp) gets the lock's model revision."))
    draft_tensor_parallel_size: PositiveInt | None = None
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    rejection_sample_method: Literal["standard", "synthetic", "block", "fly"] | None = None
    adaptive_verification: bool | None = None

    @field_validator("draft_revision")
    @classmethod
    def _draft_revision(cls, value: str | None) -> str | None:
        return None if value is None else _checked(value, revision_problem)

    @property
    def enabled(self) -> bool:
        return self.method is not None

    @property
    def k(self) -> int:
        return (self.num_speculative_tokens or 0) if self.enabled else 0


class Pool(_Model):
    replicas: PositiveInt = 1
    tensor_parallel: PositiveInt = 1
    data_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    expert_parallel: bool = False
    nodes_per_replica: PositiveInt | None = Field(
        None, description="Nodes one replica spans; derived from the GPUs it needs when unset.")
    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    gpu_memory_utilization: Annotated[Number, Field(gt=0, le=1)] = 0.9
    speculative: Speculative | None = Field(None, description="Overrides spec.speculative for this pool.")
    compilation: dict[str, JsonValue] = Field(
        default_factory=dict, description="Extra --compilation-config keys of this pool's workers only, over "
        "spec.cudaGraphs.compilation (Dynamo's V4 recipes set some on decode only).")
    kv_connector_extra_config: dict[str, JsonValue] = Field(
        default_factory=dict, description="`kv_connector_extra_config` of this pool's --kv-transfer-config when "
        "disaggregated (Dynamo's V4 recipes give the decode workers NIXL `num_threads: 8`).")
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables of this pool's workers only, over spec.kernels.env "
        "(Dynamo's V4 Pro recipe tunes its prefill workers' FP4 MoE and indexer limits this way).")
    engine_args: dict[str, EngineArgValue] = Field(
        default_factory=dict, description="vLLM flags stackpin does not model (`--max-logprobs: 20`, `--x: true` "
        "for a switch, a mapping for a JSON config), checked against the pinned vLLM and rendered after the "
        "modelled flags.")
    dynamo_args: dict[str, EngineArgValue] = Field(
        default_factory=dict, description="Flags of Dynamo's `dynamo.vllm` worker, likewise checked against the "
        "pinned Dynamo.")
    # GPUs per replica, nodes, pods and parallel sizes are derived in topology.py, nowhere else.


    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        return checked_env(env)

    @field_validator("compilation")
    @classmethod
    def _compilation(cls, extra: dict[str, JsonValue]) -> dict[str, JsonValue]:
        return CudaGraphs._compilation(extra)

    @field_validator("kv_connector_extra_config")
    @classmethod
    def _kv_extra(cls, extra: dict[str, JsonValue]) -> dict[str, JsonValue]:
        if problem := value_problem(extra):
            raise ValueError(problem)
        return extra

    @field_validator("engine_args", "dynamo_args", mode="before")
    @classmethod
    def _flag_types(cls, args: Any) -> Any:
        if isinstance(args, dict):
            problems = [f"{str(name)[:80]}: {p}" for name, value in args.items() if (p := value_type_problem(value))]
            if problems:
                raise ValueError("; ".join(problems))
        return args

    @field_validator("engine_args", "dynamo_args")
    @classmethod
    def _flags(cls, args: dict[str, EngineArgValue]) -> dict[str, EngineArgValue]:
        problems = [p for name in args if (p := option_problem(name))]
        problems += [f"{name}: {p}" for name, value in args.items() if (p := value_problem(value))]
        problems += [f"{name}: the value holds a NUL byte" for name, value in args.items()
                     if isinstance(value, str) and "\0" in value]
        if problems:
            raise ValueError("; ".join(problems))
        return args


class Pools(_Model):
    worker: Pool | None = None
    prefill: Pool | None = None
    decode: Pool | None = None


class PlacementSpec(_Model):
    mode: Placement
    router: RouterMode = RouterMode.kv
    kv_connector: str | None = Field(None, description="KV-transfer connector between prefill and decode.")
    migration_limit: int = Field(
        3, ge=0, le=2**32 - 1,
        description="How many times the frontend may move one request to another worker when its worker goes "
        "away, times out, ends the stream early or refuses it for overload (Dynamo's `--migration-limit`). "
        "Dynamo's own default, 0, turns migration off, so every in-flight request of a decode pod that is "
        "rolled, rescheduled or lost fails; an agent's turn is a long request that a client retries from the "
        "start. 3 lets a request survive a rolling update that moves it more than once; 0 turns it off.")
    frontend_args: dict[str, EngineArgValue] = Field(
        default_factory=dict, description="Flags of Dynamo's `dynamo.frontend` stackpin does not model (Dynamo's "
        "recipes: `--trust-remote-code: true`, `--kv-cache-block-size: 256`), rendered after the modelled ones and "
        "checked against the pinned Dynamo's frontend.")
    pools: Pools  # which of them the mode runs: topology.py

    @field_validator("frontend_args", mode="before")
    @classmethod
    def _frontend_flag_types(cls, args: Any) -> Any:
        return Pool._flag_types(args)

    @field_validator("frontend_args")
    @classmethod
    def _frontend_flags(cls, args: dict[str, EngineArgValue]) -> dict[str, EngineArgValue]:
        return Pool._flags(args)


class Fallbacks(_Model):
    """What a GPU without native support must use instead; stated so that nobody is surprised."""

    precision_emulation: list[Literal["fp8", "fp4"]] = Field(default_factory=list)
    cpu_offload_gib: Annotated[Number, Field(ge=0, le=2**20)] = 0


class ModelStore(_Model):
    """Where workers read the weights: a PVC holding a Hugging Face cache with the pinned revision
    pre-staged (as the upstream DeepSeek V4 recipes do), instead of every pod downloading ~0.5 TB."""

    pvc: Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=DNS_SUBDOMAIN_MAX,
                              description="PersistentVolumeClaim name.")]
    mount_path: Annotated[str, Field(pattern=r"^/[^\x00]*$")] = "/model-cache"
    offline: bool = Field(True, description="HF_HUB_OFFLINE=1: the revision must already be on the volume.")
    token_secret: Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=DNS_SUBDOMAIN_MAX)] | None = Field(
        None, description="Secret whose keys (HF_TOKEN) become environment variables.")


class Service(_Model):
    per_agent_tok_s: Annotated[Number, Field(gt=0, le=1e6)]
    ttft_seconds: Annotated[Number, Field(gt=0, le=86400)]
    agents: PositiveInt


RULE_CODE_PATTERN = r"^SP[0-9]{3}$"


class Acknowledgement(_Model):
    """A validation finding the stack's owners accept on purpose, with why (eslint-disable with a reason)."""

    rule: Annotated[str, Field(pattern=RULE_CODE_PATTERN, description="The rule's code. Its warnings and infos "
                               "are accepted, never an error: a stack that fails to start (`stackpin rules -o json` "
                               "says which rules can be acknowledged).")]
    reason: Annotated[str, Field(min_length=1, max_length=500, description="Why the finding is accepted: printed "
                                 "beside it. Line breaks fold into spaces.")]
    where: Annotated[str, Field(min_length=1, max_length=300)] | None = Field(
        None, description="Narrows the acknowledgement to one pool (`worker`, `prefill`, `decode`: findings "
        "under spec.placement.pools.ROLE) or to a field path as findings print it "
        "(`spec.placement.pools.worker.tensorParallel`) and the fields under it; every finding of the rule "
        "when unset.")

    @field_validator("reason")
    @classmethod
    def _one_line(cls, reason: str) -> str:
        # A finding prints on one line, its reason with it.
        folded = " ".join(reason.split())
        if not folded:
            raise ValueError("a reason is required: say why the finding is accepted")
        return folded

    @field_validator("where")
    @classmethod
    def _where(cls, where: str | None) -> str | None:
        if where is None or where in Pools.model_fields or (
                where.startswith(("spec.", "metadata.")) and not any(c.isspace() for c in where)):
            return where
        raise ValueError(f"{clip(where)!r} is neither a pool ({', '.join(Pools.model_fields)}) nor a field path "
                         "as findings print it (spec.FIELD...)")


class Spec(_Model):
    model: ModelSpec
    target: Target
    versions: Versions
    kv_cache: KvCache = Field(default_factory=KvCache)
    kernels: Kernels = Field(default_factory=Kernels)
    autotune: Autotune = Field(default_factory=Autotune)
    cuda_graphs: CudaGraphs = Field(default_factory=CudaGraphs)
    speculative: Speculative = Field(default_factory=Speculative)
    placement: PlacementSpec
    fallbacks: Fallbacks = Field(default_factory=Fallbacks)
    model_store: ModelStore | None = None
    service: Service
    mirrors: dict[str, str] = Field(
        default_factory=dict, description="Registry -> mirror (host[:port][/prefix]) used to resolve images.")
    attestation: bool = Field(
        True, description="Each worker checks, before its engine starts, that the runtime image's vLLM, "
        "FlashInfer, Dynamo and NIXL, the mounted autotune cache and the GPU are the locked ones; false turns "
        "the check off (SP185 warns).")
    catalog_path: list[str] = Field(
        default_factory=list, description="Site catalog directories (as `stackpin engines add --catalog DIR` "
        "writes them) searched first for this stack's engine releases and version pins, before "
        "STACKPIN_CATALOG_PATH's and the bundled catalog; relative to the working directory, as "
        "STACKPIN_CATALOG_PATH's entries are.")
    acknowledge: list[Acknowledgement] = Field(
        default_factory=list, description="Warnings accepted on purpose, each with its reason: still reported, "
        "marked acknowledged, and not counted by `validate --fail-on`. Validation only: not locked, hashed or "
        "rendered. A profile that `extends:` a base and sets its own list replaces the base's (lists replace); "
        "one that matches no finding is reported (SP251).")

    @field_validator("catalog_path")
    @classmethod
    def _catalog_dirs(cls, dirs: list[str]) -> list[str]:
        problems = [f"{clip(d)!r}: {why}" for d in dirs for why in (
            "is empty" if not d.strip() else None, "holds a NUL byte" if "\0" in d else None) if why]
        if len(set(dirs)) != len(dirs):
            problems.append("names a directory twice")
        if problems:
            raise ValueError("; ".join(problems))
        return dirs


class StackProfile(_Model):
    api_version: Literal["stackpin.dev/v1"] = Field(alias="apiVersion")
    kind: Literal["StackProfile"]
    extends: str | None = Field(None, description="Base profile path, relative to this file.")
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
    full = StackProfile.model_json_schema(by_alias=True)
    defs = full.pop("$defs")
    partial_defs = {f"Partial{name}": _without_required(d) for name, d in defs.items()}
    defs["StackProfile"] = full
    partial_defs["PartialStackProfile"] = _without_required(full)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://stackpin.dev/schemas/stackprofile.v1.json",
        "title": "stackpin StackProfile",
        "$defs": {**defs, **partial_defs},
        "if": {"type": "object", "required": ["extends"]},
        "then": {"$ref": "#/$defs/PartialStackProfile"},
        "else": {"$ref": "#/$defs/StackProfile"},
    }

