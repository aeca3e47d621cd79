"""Engine flag catalogs: what one entry point of one pinned vLLM or Dynamo release accepts.

Read from `engines/<engine>-<version>.json` on the catalog search path (`search.py`: the site's
directories, then the bundled one), as `stackpin engines add` extracted them from the published
packages. One type, `FlagCatalog`, serves validation (backends, speculative methods, env vars, model
architectures, engine arguments of the pinned vLLM) and render (every emitted flag checked).
"""

from functools import cache
from typing import Any

import msgspec

from stackpin.catalog import lazy_locate, load_first
from stackpin.catalog.engine_data import (
    CATALOG_FORMAT,
    ConfigClass,
    Deprecation,
    DynamoRelease,
    EngineOption,
    EntryPoint,
    EnvVar,
    FlashinferRelease,
    ParserRules,
    Release,
    SglangWorker,
)
from stackpin.catalog.engine_kinds import KINDS, kind
from stackpin.catalog.search import SearchPath, engine_file_name, find_engine_file, read_catalog_file, search_path
from stackpin.errors import InputError, StackpinError
from stackpin.jsonio import NestingError, check_depth
from stackpin.records import Record

# A Dynamo catalog section: `frontend`, or a serving engine's worker (engine_kinds: `dynamo_worker`).
DynamoEntry = str
# A catalogued package by its catalog file's prefix (engine_kinds: `name`): a serving engine, dynamo, flashinfer.
EngineName = str
PROJECTS: dict[str, str] = {k.name: k.distribution for k in KINDS}


class OptionUse(Record, frozen=True, kw_only=True):
    """An option string as the engine's parser reads it: which option it reaches, and how."""

    written: str  # as given
    string: str  # the registered string it is read as (underscores folded, a JSON key split off)
    flag: str  # the option's canonical flag
    option: EngineOption
    negative: bool  # sets a boolean option to False
    deprecation: Deprecation | None
    json_key: tuple[str, ...] = ()  # --compilation-config.mode -> ("mode",)


class FlagCatalog(Record, frozen=True, kw_only=True):
    """The options one entry point of one pinned package accepts, with its value lists."""

    name: str  # e.g. "vLLM 0.31.0" or "Dynamo 1.6.1 worker_vllm"
    version: str
    options: frozenset[str]  # every option string the parser accepts, generated negatives included
    # option -> choices argparse rejects anything outside of
    enforced: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    # option -> values the package knows but checks later (or never)
    known: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    # vLLM only: allowed values by kind (attention_backends, speculative_methods, kv_cache_dtypes, ...),
    # the env vars vllm/envs.py reads and the model registry's architectures.
    choices: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    env_vars: frozenset[str] = frozenset()
    model_architectures: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    # canonical flag -> everything the package says about the option
    flags: dict[str, EngineOption] = msgspec.field(default_factory=dict)
    owners: dict[str, str] = msgspec.field(default_factory=dict)  # every accepted option string -> its canonical flag
    config_classes: dict[str, ConfigClass] = msgspec.field(default_factory=dict)  # what JSON options' values hold
    env: dict[str, EnvVar] = msgspec.field(default_factory=dict)  # env var -> its type, default and choices
    parser: ParserRules = msgspec.field(default_factory=ParserRules)

    def accepts(self, option: str) -> bool:
        """Whether `option`, spelled exactly so, is an option string of this entry point."""
        return option in self.options

    def resolve(self, written: str) -> OptionUse | None:
        """`written` as the parser reads it (vLLM folds underscores to dashes and takes `--x.key` for one
        key of a JSON option), or None when the parser rejects it."""
        string, key = written, tuple[str, ...]()
        if self.parser.dotted_json_keys and string.startswith("--") and "." in string:
            string, _, rest = string.partition(".")
            key = tuple(rest.removesuffix("+").split("."))
        if self.parser.underscores_as_dashes and string.startswith("--"):
            string = "--" + string[2:].replace("_", "-")
        flag = self.owners.get(string)
        if flag is None:
            return None
        option = self.flags[flag]
        if key and (option.type not in ("json", "json_or_str") or not all(key)):
            return None
        return OptionUse(written=written, string=string, flag=flag, option=option,
                         negative=string in option.negatives, deprecation=option.deprecated.get(string),
                         json_key=key)

    def option(self, written: str) -> EngineOption | None:
        use = self.resolve(written)
        return use.option if use else None

    def canonical(self, written: str) -> str | None:
        """The canonical flag of the option `written` reaches (`-tp` -> `--tensor-parallel-size`)."""
        use = self.resolve(written)
        return use.flag if use else None

    def deprecation(self, written: str) -> Deprecation | None:
        use = self.resolve(written)
        return use.deprecation if use else None

    def negative(self, flag: str) -> str | None:
        """The spelling that turns boolean option `flag` off, preferring one neither deprecated nor
        hidden (vLLM 0.33.0: --disable-prefix-caching over --no-enable-prefix-caching); None when the
        option has no negative form."""
        option = self.option(flag)
        if option is None or not option.negatives:
            return None
        ranked = sorted(option.negatives, key=lambda s: (s in option.deprecated, s in option.hidden, s))
        return ranked[0]

    def config_class(self, written: str) -> ConfigClass | None:
        """The fields a JSON option's value may hold, when the package types it with a config class."""
        option = self.option(written)
        return self.config_classes.get(option.config_class) if option and option.config_class else None

    def check_value(self, written: str, value: Any) -> list[str]:
        """Why the engine would refuse `value` (as a YAML or JSON document holds it) for option `written`:
        unknown option, wrong kind of value, a value outside the choices, a JSON key its config class
        lacks. Empty when the catalog sees nothing wrong; deprecation is `resolve(written).deprecation`."""
        use = self.resolve(written)
        if use is None:
            return [f"{written} is not an option of {self.name}"]
        option = use.option
        if use.json_key:
            fields = self.config_class(use.flag)
            if fields is not None and use.json_key[0] not in fields.keys:
                return [f"{written}: {option.config_class} has no field {use.json_key[0]!r}"]
            return []
        if use.negative or option.type == "bool":
            if not isinstance(value, bool) or (option.store_true and value is False) or (use.negative and not value):
                takes = "true" if option.store_true or use.negative else "true or false"
                return [f"{written} takes {takes}, not {value!r}"]
            return []
        want: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "list": (list,),
                                             "json": (dict,), "bool_or_str": (bool, str), "json_or_str": (dict, str),
                                             "json_list": (list,)}
        kinds = want.get(option.type or "str", (str,))
        if option.converter and option.type in ("int", "float"):
            kinds = (*kinds, str)  # the package's converter parses text too ("32k", "auto"): not checked here
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            return [f"{written} takes {option.type or 'a string'}, not {value!r}"]
        if option.choices and isinstance(value, str | int) and str(value) not in option.choices:
            later = "" if option.choices_enforced_by_argparse else " (argparse passes it, the engine checks later)"
            return [f"{written} {value} is not one of {self.name}'s choices{later}: {', '.join(option.choices)}"]
        if isinstance(value, dict) and (fields := self.config_class(use.flag)) is not None:
            unknown = sorted(set(value) - set(fields.keys))
            if unknown:
                return [f"{written}: {option.config_class} has no field {', '.join(map(repr, unknown))}"]
        return []


class CatalogFileError(StackpinError):
    """A catalog file that cannot be read as this stackpin's catalog format."""


def catalog_file(engine: EngineName, version: str) -> str:
    return engine_file_name(engine, version)


@cache
def _read(engine: EngineName, version: str, path: SearchPath) -> tuple[str, str, dict[str, Any]] | None:
    """(file, text, data) of a release's catalog file on the search path; None when none has it."""
    found = find_engine_file(engine, version, path)
    if found is None:
        return None
    text = read_catalog_file(found)
    try:
        check_depth(text)  # msgspec decodes by recursion: a deep file would be a RecursionError
        data = msgspec.json.decode(text)  # a release's catalog is 100-200 KB: half json's time
    except NestingError as exc:
        raise CatalogFileError(f"{found}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise CatalogFileError(f"{found}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CatalogFileError(f"{found}: not a catalog file (a JSON object)")
    if data.get("format") != CATALOG_FORMAT:
        raise CatalogFileError(f"{found}: catalog format {data.get('format', 1)}, this stackpin reads "
                               f"{CATALOG_FORMAT}", f"add it again: stackpin engines add {PROJECTS[engine]}=={version}")
    return str(found), text, data


def _model(engine: EngineName, version: str, path: SearchPath, cls: type[Any]) -> Any:
    found = _read(engine, version, path)
    if found is None:
        return None
    # JSON is YAML (near enough) for finding a field's line; only a broken file is parsed that way.
    try:
        return load_first(found[2], cls, lazy_locate(found[1], found[0]))
    except InputError as exc:
        raise CatalogFileError(exc.message) from None


AnyRelease = Release


@cache
def _release(engine: EngineName, version: str, path: SearchPath) -> AnyRelease | None:
    release: AnyRelease | None = _model(engine, version, path, kind(engine).record)
    return release


def engine_release(engine: EngineName, version: str) -> Release | None:
    """The catalog record of release `version` of package `engine` (a serving engine, dynamo, flashinfer), or
    None when no catalog on the search path has it."""
    release = _release(engine, version, search_path())
    return release if isinstance(release, kind(engine).record) else None


def dynamo_release(version: str) -> DynamoRelease | None:
    release = _release("dynamo", version, search_path())
    return release if isinstance(release, DynamoRelease) else None


def flashinfer_release(version: str) -> FlashinferRelease | None:
    release = _release("flashinfer", version, search_path())
    return release if isinstance(release, FlashinferRelease) else None


def _entry_catalog(name: str, version: str, entry: EntryPoint, parser: ParserRules | None = None,
                   **extra: Any) -> dict[str, Any]:
    """FlagCatalog fields of one entry point: accepted strings, owners, enforced and known choices."""
    owners: dict[str, str] = {}
    enforced: dict[str, tuple[str, ...]] = {}
    known: dict[str, tuple[str, ...]] = {}
    for flag, option in entry.options.items():
        owners.update((s, flag) for s in option.all_strings)
        if option.choices:
            # Dynamo's options pass choices= to argparse; an engine's catalog marks which ones argparse enforces.
            target = enforced if option.choices_enforced_by_argparse is not False else known
            target.update((s, option.choices) for s in option.strings)
    return {"name": name, "version": version, "options": frozenset(entry.option_strings), "enforced": enforced,
            "known": known, "flags": entry.options, "owners": owners, "parser": parser or ParserRules(), **extra}


@cache
def _engine_catalog(engine: EngineName, version: str, path: SearchPath) -> FlagCatalog | None:
    row = kind(engine)
    found = _release(engine, version, path)
    if not row.serving or not isinstance(found, row.record):
        return None
    release: Any = found  # a serving engine's record: its parser's options, choices and env vars (EntryPoint)
    # Each engine's record holds what its parser reads; config classes and the model registry where it has them.
    fields = _entry_catalog(f"{row.label} {version}", release.version, release, release.parser,
                            choices=release.choices, env_vars=frozenset(release.env_vars), env=release.env_vars,
                            model_architectures=getattr(release, "model_architectures", {}),
                            config_classes=getattr(release, "config_classes", {}))
    for option, choices in row.checked_at_start.items():  # a known value list, not an argparse one
        fields["known"][option] = release.choices.get(choices, ())
    return FlagCatalog(**fields)


def engine_catalog(engine: EngineName, version: str) -> FlagCatalog | None:
    """The flag catalog of release `version` of serving engine `engine` (what its own parser accepts), or None
    when no catalog on the search path has it."""
    return _engine_catalog(engine, version, search_path())


def vllm_catalog(version: str) -> FlagCatalog | None:
    """`engine_catalog` of vLLM, kept for the callers that still ask for it (enginecheck.vllm_check, validate)."""
    return engine_catalog("vllm", version)


@cache
def _dynamo_catalog(version: str, entry: DynamoEntry, path: SearchPath) -> FlagCatalog | None:
    release = _release("dynamo", version, path)
    if not isinstance(release, DynamoRelease):
        return None
    section: EntryPoint | None = getattr(release, entry)
    if section is None:  # an engine's worker section in a catalog written before stackpin read it
        return None
    names = {flag: option for flag, option in section.options.items() if option.env_var}
    env = {option.env_var: EnvVar(default=option.default, default_expr=option.default_expr, option=flag)
           for flag, option in names.items() if option.env_var}
    return FlagCatalog(**_entry_catalog(f"Dynamo {version} {entry}", release.version, section,
                                        env_vars=frozenset(env), env=env))


def dynamo_catalog(version: str, entry: DynamoEntry) -> FlagCatalog | None:
    """The flag catalog of one Dynamo entry point (a serving engine's worker, `python -m dynamo.<engine>`, or
    `frontend`)."""
    return _dynamo_catalog(version, entry, search_path())


def dynamo_worker(version: str, engine: EngineName) -> EntryPoint | None:
    """Serving engine `engine`'s worker section of a Dynamo release as its catalog records it (an engine's own
    section record, e.g. what the worker does to the engine's parser); None when no catalog on the search path
    has the release, or one written before stackpin read that worker."""
    release = _release("dynamo", version, search_path())
    worker = kind(engine).dynamo_worker
    section: EntryPoint | None = getattr(release, worker) if isinstance(release, DynamoRelease) and worker else None
    return section


def dynamo_sglang_worker(version: str) -> SglangWorker | None:
    """`dynamo_worker` of SGLang: kept for stackpin.enginecheck's SGLang check, which still asks for it."""
    worker = dynamo_worker(version, "sglang")
    return worker if isinstance(worker, SglangWorker) else None
