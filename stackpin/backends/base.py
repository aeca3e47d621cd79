"""What every serving engine provides (`ServingEngine`), and the flag helpers engines share.

A stack names its engine (`spec.engine`); every stage asks `stackpin.backends.engine_of(profile)` for the
engine's worker command, its flag table, catalogs and facts, and never spells an engine itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from stackpin.jsonio import canonical_json
from stackpin.profile.engine_args import EngineArgValue, scalar_text

if TYPE_CHECKING:
    from stackpin.catalog.engine_data import Release
    from stackpin.catalog.flags import DynamoEntry, FlagCatalog
    from stackpin.catalog.startup import StartupFacts
    from stackpin.profile.model import Pool, StackProfile
    from stackpin.profile.topology import Role
    from stackpin.rules import Hit

Flag = tuple[str, str | None]  # (option, value); None for a bare switch


@dataclass(frozen=True)
class Capture:
    """How `stackpin autotune capture-job` runs an engine once with autotuning on (stackpin.render.capture): a bash
    script (the worker's engine arguments arrive as "$@"; it serves until ready, records FlashInfer's runtime
    metadata and lists the cache files below the engine's cache root) and the worker's argv as that server takes
    it (`serve_args(args, dynamo_only)`: Dynamo's own options left out; ValueError on an argv it cannot serve)."""

    script: str
    serve_args: Callable[[tuple[str, ...], frozenset[str]], list[str]]


class ServingEngine(Protocol):
    """One serving engine under Dynamo. Its module is the one place that knows the engine's spelling: the
    worker it runs, which profile field becomes which flag (render writes through the table and import
    reads it back), its environment names, catalogs and facts."""

    name: str  # spec.engine and its key in spec.versions / the lock's engines
    label: str  # as people write it: "vLLM"
    distribution: str  # wheel METADATA Name, as importlib.metadata finds it in the runtime image
    worker_command: tuple[str, ...]  # Dynamo's worker entry point for this engine
    backend_framework: str  # DynamoGraphDeployment spec.backendFramework
    default_kv_connector: str  # what a disaggregated stack moves its KV cache with when kvConnector is unset
    dynamo_worker: DynamoEntry  # the Dynamo catalog's section for that worker's own options
    # Options render writes from modelled profile fields -> the field (POOL for the pool's own), and the
    # reverse lookup import uses: one table both ways.
    modelled: Mapping[str, str]
    modelled_dynamo: Mapping[str, str]  # the Dynamo worker's own options render writes
    # Boolean fields rendered as a switch pair: passing the same switch through agrees or contradicts.
    modelled_switches: frozenset[str]
    # Keys inside a JSON-config option that a modelled field sets.
    modelled_keys: Mapping[str, Mapping[str, str]]
    # The keys of a modelled JSON option, each -> the field it comes from (vLLM's --speculative-config is built
    # from spec.speculative's fields): render writes the option from them, import reads each key back.
    modelled_json: Mapping[str, Mapping[str, str]]
    # A modelled switch's "off" spelling where no flag catalog names one, and its field's value when it is off.
    modelled_off: Mapping[str, tuple[str, Any]]
    # Options that set one key of a modelled JSON option (option -> (JSON option, key)): import reads them so.
    modelled_aliases: Mapping[str, tuple[str, str]]
    # Environment the worker's command reads that render derives from the stack (never the profile's).
    ready_timeout_env: str | None  # how long the engine waits for its workers to come up (start-up budget)
    autotune_dir_env: str | None  # where the engine reads and writes FlashInfer autotune results
    # Version pins (stackpin follows Dynamo's): the ai-dynamo extra that pins this engine's release and its
    # NIXL (versions.yaml keeps them in the Dynamo entry's field of that name, and the release's own pins,
    # FlashInfer first, in the section of that name: stackpin.backends.pins reads both).
    dynamo_extra: str
    # The engine's own environment, as validation reads a profile's spec.kernels.env against it.
    cache_root_env: str | None  # the directory the engine keeps its caches below
    managed_env: Mapping[str, str]  # env vars render sets itself -> the profile field they come from
    # (prefix, where the catalog's list is read): every env var with the prefix that the release reads is in its
    # catalog's env_vars, so one it lacks is ignored; None where the catalog's list is not known complete.
    env_registry: tuple[str, str] | None
    removed_env: str | None  # the versions.yaml section of env vars its releases stopped reading
    # Its pinned release's own check of a lock, "module:function" in stackpin.enginecheck (a name, not an import:
    # enginecheck sits below this seam); stackpin.enginecheck.check.lock_check resolves it.
    lock_check: str
    runtime_image: str  # Dynamo's runtime image for this engine, without its tag (the Dynamo release)
    # How `stackpin import` reads a worker's flags back: "tables" (stackpin.imports.profile `reading`: JSON options
    # built from sections, off spellings, aliases) or "options" (each option through `modelled`, imports.modelled).
    flag_import: str
    # spec.placement.kvConnector -> the engine's own spelling of that KV transfer, where it has one (render writes
    # it, import reads it back); empty where the connector's name is passed as it is.
    kv_transfer_names: Mapping[str, str]
    # Options render states where a DGD leaves the engine's own default -> why (`stackpin import --report`).
    stated_defaults: Mapping[str, str]
    capture: Capture | None  # how a pinned autotune cache is captured; None where none is (autotune_dir_env None)
    # Its own validation rules' modules (what its release decides about its knobs): stackpin.validate imports them
    # with every engine's, and each runs only for stacks on this engine.
    rule_modules: tuple[str, ...]

    def flag_catalog(self, version: str) -> FlagCatalog | None:
        """The options the pinned release's parser accepts, or None when no catalog has it."""
        ...

    def release(self, version: str) -> Release | None:
        """The release's catalog record as published (its options, choices, env vars, requirements: what
        `stackpin engines diff` compares), or None when no catalog has it."""
        ...

    def startup(self, version: str) -> StartupFacts | None:
        """What the pinned release decides at start-up (attention backend, CUDA graph sizes), or None."""
        ...

    def speculative_kind(self, method: str) -> str:
        """stackpin's name for this engine's spelling of a speculative method (the names the step models and the
        model catalog use, vLLM's: `dspark`, `mtp`, `draft_model`, ...)."""
        ...

    def autotune_flags(self, profile: StackProfile, catalog: FlagCatalog | None) -> list[Flag]:
        """How this engine's pinned release is told to leave FlashInfer autotuning off ([] when it is on)."""
        ...

    def problems(self, profile: StackProfile) -> list[str]:
        """What the profile asks that stackpin cannot render for this engine, each with what to do instead."""
        ...

    def worker_flags(self, profile: StackProfile, role: Role, pool: Pool, *, model_revision: str,
                     catalog: FlagCatalog | None = None, serving: tuple[Flag, ...] = ()) -> list[Flag]:
        """The flags after `worker_command` for one pool, in a fixed order."""
        ...

    def render_refusals(self, profile: StackProfile) -> list[tuple[str, Hit]]:
        """(rule code, hit) of its rules that render checks again: a stack this engine would refuse at start-up
        (a lock made around validation must not render)."""
        ...


def kv_events_enabled(profile: StackProfile) -> bool:
    """Workers publish KV events (and the KV router reads them) when the stack routes by KV and caches prefixes."""
    from stackpin.profile.model import RouterMode

    kv = profile.spec.kv_cache
    return kv.events and kv.prefix_caching and profile.spec.placement.router == RouterMode.kv


def json_arg(value: Any) -> str:
    """A JSON argument: stackpin's canonical JSON (sorted keys, no spaces), as argv text."""
    return canonical_json(value).decode("utf-8")


def flatten(flags: list[Flag]) -> list[str]:
    return [part for flag, value in flags for part in ((flag,) if value is None else (flag, value))]


def passed_flags(args: Mapping[str, EngineArgValue]) -> list[Flag]:
    """A pool's engineArgs or dynamoArgs as flags, sorted by option: `true` a bare switch, a mapping
    canonical JSON, anything else its text (validation refuses `false` and other misfits first)."""
    return [(option, json_arg(value) if isinstance(value, dict) else scalar_text(value))
            for option, value in sorted(args.items())]


# --- flag checks (catalogs: stackpin.catalog.flags) ---------------------------------------------

def check_flags(flags: list[Flag], catalogs: list[FlagCatalog]) -> list[str]:
    """Problems that make the pinned engine refuse to start: an unknown option, or a value outside
    the choices argparse enforces. `catalogs` together form the entry point (Dynamo's worker accepts
    its own options and every option of the engine it runs)."""
    problems = []
    names = " + ".join(c.name for c in catalogs)
    for option, value in flags:
        owners = [c for c in catalogs if c.accepts(option)]
        if not owners:
            problems.append(f"{option} is not an option of {names}")
            continue
        for owner in owners:
            choices = owner.enforced.get(option)
            if value is not None and choices is not None and value not in choices:
                problems.append(f"{option} {value} is not one of {owner.name}'s choices: {', '.join(choices)}")
    return problems


def unknown_values(flags: list[Flag], catalogs: list[FlagCatalog]) -> list[str]:
    """Values argparse lets through but the pinned engine does not know (e.g. an attention backend
    it does not have): the engine fails at start-up, later than with an unknown option."""
    out = []
    for option, value in flags:
        for catalog in catalogs:
            known = catalog.known.get(option)
            if value is not None and known and value not in known:
                out.append(f"{option} {value} is not known to {catalog.name}")
    return out
