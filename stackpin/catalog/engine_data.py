"""The shape of an engine release's catalog file (`engines/<engine>-<version>.json`).

`stackpin engines add` (stackpin.engines) writes these models from a published package; `flags.py`
reads them. One schema for both, so a field the extractor records is a field readers can rely on.
Every list is sorted and every map keyed, so a regenerated file diffs cleanly.
"""

from typing import Any, Literal, TypeVar

import msgspec

from stackpin.records import Record

# The value an option takes, as the package's argument builder decides it (vLLM's _compute_kwargs):
# json is a config dataclass or dict parsed from JSON; bool_or_str a bare flag (True) or a string;
# json_or_str a JSON object or a plain string; json_list one JSON array (SGLang's json_list_type).
OptionType = Literal["bool", "int", "float", "str", "json", "list", "bool_or_str", "json_or_str", "json_list"]
Engine = Literal["vllm", "dynamo", "flashinfer", "sglang"]
CATALOG_FORMAT = 2  # bump when a reader could misread an older file


# Any JSON value (what argparse's default is when the extractor can read it); the file is JSON, so nothing
# else can be read from it.
JsonValue = Any


class Deprecation(Record, frozen=True, kw_only=True):
    """Why an option string is deprecated, in the package's own words, and what to write instead."""

    replacement: str | None = None  # an option string when the package names one, else its prose
    message: str | None = None
    removed_in: str | None = None  # the release the package says it goes away in, when it says


class EngineOption(Record, frozen=True, kw_only=True):
    """One argparse action: every string that reaches it and what it takes."""

    strings: tuple[str, ...]  # as registered with add_argument (long and short), sorted
    negatives: tuple[str, ...] = ()  # strings that set a boolean option to False (--no-x, vLLM's --disable-x)
    hidden: tuple[str, ...] = ()  # accepted, but left out of --help
    # option string -> why; every string of a deprecated option
    deprecated: dict[str, Deprecation] = msgspec.field(default_factory=dict)
    type: OptionType | None = None
    item_type: str | None = None  # list options: the element type
    converter: str | None = None  # the package's function argparse parses the text with (human_readable_int)
    choices: tuple[str, ...] | None = None
    choices_enforced_by_argparse: bool | None = None  # False: listed as a metavar, checked later or never
    default: JsonValue = None  # argparse's default when the option is not given (null also when unknown)
    default_expr: str | None = None  # the default's source text when it is computed at run time
    config_field: str | None = None  # "CacheConfig.enable_prefix_caching"
    config_class: str | None = None  # json options: the config dataclass the value fills (see config_classes)
    env_var: str | None = None  # Dynamo: the environment variable that sets the default
    defined_in: str | None = None  # Dynamo: the package file that registers it (SGLang: file:line)
    required: bool | None = None  # argparse refuses a command line without it (SGLang's --model-path)
    boolean_optional: bool | None = None
    store_true: bool | None = None
    notes: tuple[str, ...] = ()

    @property
    def all_strings(self) -> tuple[str, ...]:
        return self.strings + self.negatives


class ConfigField(Record, frozen=True, kw_only=True):
    """A field of a config dataclass that a JSON option fills (`--compilation-config '{"mode": 3}'`)."""

    annotation: str
    type: OptionType | None = None
    choices: tuple[str, ...] | None = None
    default: JsonValue = None
    default_expr: str | None = None
    config_class: str | None = None  # a nested config dataclass
    init: bool = True  # False: `field(init=False)`, set by the class itself; no JSON value may hold it


class ConfigClass(Record, frozen=True, kw_only=True):
    module: str
    fields: dict[str, ConfigField]

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys a JSON value may hold: the constructor's fields (vLLM's config classes forbid others)."""
        return tuple(name for name, field in self.fields.items() if field.init)


class EnvVar(Record, frozen=True, kw_only=True):
    """An environment variable the package reads."""

    type: str | None = None  # annotation text (vllm/envs.py declares them for type checkers)
    default: JsonValue = None
    default_expr: str | None = None
    choices: tuple[str, ...] | None = None
    option: str | None = None  # Dynamo: the flag whose default it sets
    source: str | None = None  # SGLang: file:line of the declaration or the read
    deprecated: Deprecation | None = None  # a retired name: the one the package reads instead, its words


class ParserRules(Record, frozen=True, kw_only=True):
    """What the package's argument parser does beyond plain argparse, read from its source."""

    underscores_as_dashes: bool = False  # --max_num_seqs is --max-num-seqs
    dotted_json_keys: bool = False  # --compilation-config.mode 3 sets one key of a JSON option
    optimization_level_shorthand: bool = False  # -O3 is --optimization-level 3
    # A boolean option --enable-x also answers to --disable-x (and the reverse): prefix -> inverse.
    inverse_prefixes: dict[str, str] = msgspec.field(default_factory=dict)
    no_forms_hidden_with_inverse: bool = False  # --no-enable-x kept for old command lines, left out of help


class Source(Record, frozen=True, kw_only=True):
    package: str  # the file's name as published
    sha256: str
    files_parsed: tuple[str, ...]


class EntryPoint(Record, frozen=True, kw_only=True):
    """The options one command line accepts."""

    option_strings: tuple[str, ...]  # every string the parser accepts, generated negatives included
    boolean_optional_options: tuple[str, ...] = ()  # canonical flags of the boolean options
    options: dict[str, EngineOption]  # canonical flag -> option


class VllmRelease(EntryPoint, frozen=True, kw_only=True):
    format: int = CATALOG_FORMAT
    engine: Literal["vllm"] = "vllm"
    version: str
    parser: ParserRules = msgspec.field(default_factory=ParserRules)
    rules: tuple[str, ...] = ()
    engine_args_fields: tuple[str, ...] = ()
    choices: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    config_classes: dict[str, ConfigClass] = msgspec.field(default_factory=dict)
    env_vars: dict[str, EnvVar] = msgspec.field(default_factory=dict)
    model_architectures: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    requires: tuple[str, ...] = ()  # Requires-Dist of the package's metadata, as published
    unresolved: tuple[str, ...] = ()  # what the extractor saw but could not read statically
    source: Source


class SglangWorker(EntryPoint, frozen=True, kw_only=True):
    """`python -m dynamo.sglang`: Dynamo's own options (`options`, as for the vLLM worker); the rest of the
    command line goes to the SGLang parser that `engine_parser` builds, with what the worker changes in
    it. Each fact names the file:line it was read at (`at`)."""

    engine_parser: str | None = None  # the SGLang call that registers its options (ServerArgs.add_cli_args)
    # Options the worker adds to SGLang's parser itself (a legacy spelling SGLang dropped), each with the
    # condition it is added under in `notes`.
    engine_parser_options: dict[str, EngineOption] = msgspec.field(default_factory=dict)
    # SGLang option dest -> values the worker appends to that option's choices (load_format: gms).
    engine_choices_added: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    # --disaggregation-mode values the worker rewrites before SGLang's parser sees them: value -> the
    # value SGLang gets, or None where the worker takes the flag out and plays the role itself (encode).
    disaggregation_modes: dict[str, str | None] = msgspec.field(default_factory=dict)
    at: dict[str, str] = msgspec.field(default_factory=dict)  # fact -> "dynamo/sglang/args.py:579"


class DynamoRelease(Record, frozen=True, kw_only=True):
    format: int = CATALOG_FORMAT
    engine: Literal["dynamo"] = "dynamo"
    version: str
    worker_vllm: EntryPoint  # python -m dynamo.vllm (on top of vLLM's own options)
    frontend: EntryPoint  # python -m dynamo.frontend
    worker_sglang: SglangWorker | None = None  # python -m dynamo.sglang; None in a catalog written before it
    # The DynamoGraphDeployment version its planner reads and patches (DYNAMO_API_VERSION): one the operator
    # serves, not necessarily the one it stores (versions.yaml `crd`, from `dgd_storage`).
    crd: str | None = None
    env_vars: dict[str, EnvVar] = msgspec.field(default_factory=dict)
    rules: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    source: Source


class FlashinferRelease(Record, frozen=True, kw_only=True):
    format: int = CATALOG_FORMAT
    engine: Literal["flashinfer"] = "flashinfer"
    version: str
    env_vars: dict[str, EnvVar] = msgspec.field(default_factory=dict)  # FLASHINFER_* names the package reads
    requires: tuple[str, ...] = ()
    source: Source


class SglangRelease(EntryPoint, frozen=True, kw_only=True):
    """An SGLang release: the options `ServerArgs.add_cli_args` registers (plain argparse)."""

    format: int = CATALOG_FORMAT
    engine: Literal["sglang"] = "sglang"
    version: str
    parser: ParserRules = msgspec.field(default_factory=ParserRules)
    rules: tuple[str, ...] = ()
    server_args_fields: tuple[str, ...] = ()  # every ServerArgs field, with a CLI option or not
    # Allowed values by kind (attention_backends, moe_runner_backends, kv_cache_dtypes, ...): the lists the
    # options take, as the package's choices.py and field declarations spell them.
    choices: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    env_vars: dict[str, EnvVar] = msgspec.field(default_factory=dict)
    requires: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    source: Source


Release = VllmRelease | DynamoRelease | FlashinferRelease | SglangRelease
R = TypeVar("R", bound=Record)


def typed(release: R) -> R:
    """A release the extractor built, checked and typed as a reader reads its file back (lists become
    tuples, a value outside a field's type fails here): what `engines add` writes is what readers get."""
    checked: R = msgspec.convert(msgspec.to_builtins(release), type(release))
    return checked
