"""Per-pool engineArgs / dynamoArgs against the pinned release's flag catalog (docs/engine-args.md).

Each flag is read as the engine's parser reads it (`FlagCatalog.resolve`: aliases, generated negatives
such as vLLM's --disable-x, deprecated spellings) and checked once, in this order: does the pinned
release have it (SP221), is it one stackpin renders from a modelled field (SP225), is it deprecated
(SP226, beside the others), is its value the right kind (SP223), inside the choices (SP222), and, for a
JSON config, are its keys ones the config class takes (SP224). Render calls `flag_problems` before it
writes an argv (and refuses any flag of its own the pinned release lacks, render/args.py check_flags).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any, Literal

import msgspec

import stackpin.jsonio as jsonio
from stackpin.backends import engine_of
from stackpin.backends.base import check_flags
from stackpin.catalog import WorkerRouter, load_catalog
from stackpin.catalog.flags import FlagCatalog, OptionUse, dynamo_catalog
from stackpin.profile.engine_args import POOL, scalar_text
from stackpin.profile.model import Placement, Pool, RouterMode, StackProfile
from stackpin.profile.topology import Role
from stackpin.rules import Context, Hit, Severity, choices_hint, pool_path, pools, rule
from stackpin.yamlio import FieldPath

Kind = Literal["engineArgs", "dynamoArgs"]


class PassedFlag(msgspec.Struct, frozen=True, dict=True):  # dict: the cached_property values
    """One engineArgs / dynamoArgs entry of one pool, with the catalogs that judge it."""

    role: Role
    kind: Kind
    flag: str
    value: Any
    catalog: FlagCatalog | None  # the entry point the flag belongs to; None without a catalog
    other: FlagCatalog | None  # the other half of Dynamo's worker (its own options), to say where a flag belongs
    profile: StackProfile  # compared and shown too (nothing compares or prints a PassedFlag)

    @property
    def path(self) -> FieldPath:
        return (*pool_path(self.role), self.kind, self.flag)

    @cached_property
    def use(self) -> OptionUse | None:
        """The option the flag reaches in its catalog, None when the catalog lacks it (or there is none)."""
        return self.catalog.resolve(self.flag) if self.catalog is not None else None

    @cached_property
    def modelled(self) -> Modelled | None:
        """The modelled option this flag sets (SP225), None when it sets none or is unknown."""
        use = self.use
        return modelled(self, self.catalog, use, self.profile) if self.catalog is not None and use else None


def _catalogs(profile: StackProfile, engine: FlagCatalog | None) -> dict[Kind, FlagCatalog | None]:
    worker = engine_of(profile).dynamo_worker
    return {"engineArgs": engine, "dynamoArgs": dynamo_catalog(profile.spec.versions.dynamo, worker)}


def passed_flags(profile: StackProfile, role: Role, pool: Pool, engine: FlagCatalog | None) -> Iterator[PassedFlag]:
    """A pool's engineArgs and dynamoArgs, each with the catalog that judges it (`engine`: the stack's engine's)."""
    catalogs = _catalogs(profile, engine)
    halves: tuple[tuple[Kind, Kind, dict[str, Any]], ...] = (
        ("engineArgs", "dynamoArgs", pool.engine_args), ("dynamoArgs", "engineArgs", pool.dynamo_args))
    for kind, other, args in halves:
        for flag, value in args.items():
            yield PassedFlag(role, kind, flag, value, catalogs[kind], catalogs[other], profile)


_LAST: list[tuple[Context, tuple[PassedFlag, ...]]] = []  # the rules run one context at a time


def _all(ctx: Context) -> tuple[PassedFlag, ...]:
    """Every passed flag of the profile, built (and resolved in its catalog) once for all the rules."""
    if _LAST and _LAST[0][0] is ctx:
        return _LAST[0][1]
    flags = tuple(p for role, _, pool in pools(ctx)
                  for p in passed_flags(ctx.profile, role, pool.spec, ctx.engine_catalog))
    _LAST[:] = [(ctx, flags)]
    return flags


def _known(p: PassedFlag) -> tuple[FlagCatalog, OptionUse] | None:
    """The catalog and the option when it has the flag; None when there is none (SP167) or it lacks
    the flag (SP221)."""
    use = p.use
    return (p.catalog, use) if p.catalog is not None and use is not None else None


# --- modelled fields -------------------------------------------------------------------------------

def field_path(modelled_field: str, role: Role) -> str:
    return modelled_field.replace(POOL, ".".join(pool_path(role)))


def _field_value(profile: StackProfile, path: str) -> Any:
    node: Any = profile.to_data()
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


class Modelled(msgspec.Struct, frozen=True):
    option: str  # the modelled option the flag sets
    field: str  # the profile field that sets it (pool paths filled in)
    agrees: bool  # a switch of a boolean field, set the way the field already renders it


def modelled(p: PassedFlag, catalog: FlagCatalog, use: OptionUse, profile: StackProfile) -> Modelled | None:
    """Whether a passed flag sets what stackpin renders from a field: the option itself, any spelling
    of it (aliases, --no-x, --disable-x, deprecated ones), or another option of the same config field."""
    engine = engine_of(profile)
    table = engine.modelled if p.kind == "engineArgs" else engine.modelled_dynamo
    option = use.flag
    if option not in table:
        sets = use.option.config_field
        # The table's keys are canonical flags: a plain lookup, not the parser's reading.
        option = next((o for o in table if sets and (m := catalog.flags.get(o)) and m.config_field == sets), "")
        if not option:
            return None
    path = field_path(table[option], p.role)
    agrees = (option in engine.modelled_switches and p.value is True
              and _field_value(profile, path) is (not use.negative))
    return Modelled(option, path, agrees)


# --- the rules -------------------------------------------------------------------------------------

@rule("SP221", Severity.error, "engine flag the pinned release does not have")
def unknown_flag(ctx: Context) -> Iterator[Hit]:
    for p in _all(ctx):
        if p.catalog is None or p.use is not None:
            continue
        if p.other is not None and p.other.resolve(p.flag) is not None:
            hint = f"it is an option of {p.other.name}: move it to " + (
                "dynamoArgs" if p.kind == "engineArgs" else "engineArgs")
        else:
            hint = choices_hint(p.flag, sorted(o for o in p.catalog.options if o.startswith("--")), p.catalog.name)
        yield Hit(p.path, f"{p.flag} is not an option of {p.catalog.name}: the engine refuses to start", hint)


@rule("SP225", Severity.error, "engine flag stackpin sets from a modelled field",
      warning_when="the flag repeats the value stackpin renders", acknowledge=True)
def modelled_flag(ctx: Context) -> Iterator[Hit]:
    for p in _all(ctx):
        if (known := _known(p)) is None:
            continue
        catalog, use = known
        found = p.modelled
        if found is not None and found.agrees:
            yield Hit(p.path, f"{p.flag} repeats what stackpin renders from {found.field}", "remove it",
                      Severity.warning)
        elif found is not None:
            what = f"{p.flag} is" if found.option == p.flag else f"{p.flag} sets {found.option}, which is"
            yield Hit(p.path, f"{what} rendered by stackpin from {found.field}; passed here it would override "
                      "that field (argparse keeps the last)",
                      f"remove it from {p.kind} and set {found.field}")
        for key, path in _modelled_keys(p, use).items():
            yield Hit(p.path, f"{p.flag} key {key!r} is set by stackpin from {path}",
                      f"remove the key and set {path}")


def _modelled_keys(p: PassedFlag, use: OptionUse) -> dict[str, str]:
    keys = engine_of(p.profile).modelled_keys.get(use.flag, {}) if p.kind == "engineArgs" else {}
    value = _json_object(p.value)
    return {k: field_path(v, p.role) for k, v in keys.items() if value is not None and k in value}


@rule("SP226", Severity.warning, "deprecated engine flag")
def deprecated_flag(ctx: Context) -> Iterator[Hit]:
    for p in _all(ctx):
        if (known := _known(p)) is None or (why := known[1].deprecation) is None:
            continue
        until = f" (to be removed in {why.removed_in})" if why.removed_in else "; a later release may drop it"
        if why.replacement:
            hint = f"use {why.replacement}"
        else:
            hint = why.message or "see the release notes for its replacement"
        yield Hit(p.path, f"{p.flag} is deprecated in {known[0].name}{until}", hint)


def _plain(p: PassedFlag) -> tuple[FlagCatalog, OptionUse] | None:
    """A known flag that is not a modelled one (SP225 says all there is about those)."""
    known = _known(p)
    return known if known is not None and p.modelled is None else None


def is_switch(use: OptionUse) -> bool:
    """Whether the option string takes no value: store_true, either form of a boolean option."""
    return use.negative or bool(use.option.store_true) or bool(use.option.boolean_optional)


# What each option type takes as a profile holds it; str options take numbers too (argv is text).
_KINDS: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str, int, float),
                                       "json": (dict, str), "json_or_str": (dict, str), "bool_or_str": (str,),
                                       "list": (str,)}
_KIND_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "list": "a string (one argv word)",
               "bool_or_str": "true or a string"}


def shape_problem(p: PassedFlag, catalog: FlagCatalog, use: OptionUse) -> tuple[str, str] | None:
    """(message, hint) when a switch has a value, an option that takes a value has none, or the value
    is not of the kind the option parses."""
    if is_switch(use):
        if p.value is True:
            return None
        if p.value is False:
            off = None if use.negative else catalog.negative(use.flag)
            on = use.flag if use.negative else None
            other = off or on
            hint = f"write {other}: true" if other else "remove it: off is the default"
            return f"{p.flag} is a switch; false does not turn it off", hint
        return f"{p.flag} is a switch and takes no value", f"write {p.flag}: true"
    if p.value is True and use.option.type == "bool_or_str":
        return None  # a bare flag (--hf-token: use the stored token)
    if isinstance(p.value, bool):
        return f"{p.flag} takes a value, not {str(p.value).lower()}", f"write {p.flag}: <value>"
    kind = use.option.type or "str"
    kinds = _KINDS.get(kind, (str,))
    if use.option.converter and kind in ("int", "float"):
        kinds = (*kinds, str)  # the package's converter parses text too ("32k", "auto")
    if not isinstance(p.value, kinds):
        if kind in ("json", "json_or_str"):
            return f"{p.flag} takes a JSON object, not {p.value!r}", "write it as a YAML mapping of the config's keys"
        return f"{p.flag} takes {_KIND_WORDS.get(kind, kind)}, not {p.value!r}", f"write {p.flag}: <{kind}>"
    return None


@rule("SP223", Severity.error, "engine flag given the wrong kind of value")
def flag_shape(ctx: Context) -> Iterator[Hit]:
    for p in _all(ctx):
        if (known := _plain(p)) is not None and (found := shape_problem(p, *known)) is not None:
            yield Hit(p.path, *found)


def _choices(catalog: FlagCatalog, use: OptionUse) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """(choices argparse enforces, choices the engine checks later) of the option."""
    return (catalog.enforced.get(use.string) or catalog.enforced.get(use.flag),
            catalog.known.get(use.string) or catalog.known.get(use.flag))


@rule("SP222", Severity.error, "engine flag value outside its choices",
      warning_when="only the engine checks the value, at start",
      acknowledge="its warning too is a worker that fails at start; fix the value instead")
def flag_choice(ctx: Context) -> Iterator[Hit]:
    for p in _all(ctx):
        if (known := _plain(p)) is None or shape_problem(p, *known) is not None:
            continue
        catalog, use = known
        text = scalar_text(p.value)
        enforced, later = _choices(catalog, use)
        if text is None:
            continue
        if enforced and text not in enforced:
            yield Hit(p.path, f"{p.flag} {text} is not one of {catalog.name}'s choices: argparse refuses it",
                      choices_hint(text, enforced, catalog.name))
        elif later and text not in later:
            yield Hit(p.path, f"{p.flag} {text} is not a value {catalog.name} knows; it fails when the engine "
                      "starts", choices_hint(text, later, catalog.name), Severity.warning)


def _json_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = jsonio.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def json_key_problems(p: PassedFlag, catalog: FlagCatalog, use: OptionUse) -> Iterator[tuple[str, str]]:
    """(message, hint) for a JSON-config option's value: an object of keys its config class takes."""
    fields = catalog.config_class(use.flag)
    if fields is None:
        return
    cls = use.option.config_class
    value = _json_object(p.value)
    if value is None:
        if use.option.type == "json":
            yield (f"{p.flag} takes a JSON object ({cls})", "write it as a YAML mapping of the config's keys")
        return
    for key in sorted(set(value) - set(fields.keys)):
        what = (f"{key!r} is set by {cls} itself (init=False)" if key in fields.fields
                else f"{cls} of {catalog.name} has no key {key!r}")
        yield (f"{p.flag}: {what}; vLLM refuses unknown keys at start",
               choices_hint(key, sorted(fields.keys), f"{cls}'s keys"))


@rule("SP224", Severity.error, "JSON config key the config class lacks")
def json_keys(ctx: Context) -> Iterator[Hit]:
    for p in _all(ctx):
        if (known := _plain(p)) is not None and shape_problem(p, *known) is None:
            for message, hint in json_key_problems(p, *known):
                yield Hit(p.path, message, hint)


# --- what render writes from the modelled fields ----------------------------------------------------

def renders(option: str, profile: StackProfile, pool: Pool, vllm: FlagCatalog | None = None) -> str | None:
    """The spelling of a modelled option render writes for this pool, or None when it writes none (the
    engine's default then applies: `validate --upgrade-to` compares those). Held to render/args.py's
    engine_flags by tests/test_engine_args.py."""
    spec = profile.spec
    kv = spec.kv_cache
    when: dict[str, bool] = {
        "--tokenizer-mode": spec.model.tokenizer_mode != "auto",
        "--enable-expert-parallel": pool.expert_parallel,
        "--max-num-seqs": pool.max_num_seqs is not None,
        "--max-num-batched-tokens": pool.max_num_batched_tokens is not None,
        "--cpu-offload-gb": bool(spec.fallbacks.cpu_offload_gib),
        "--block-size": kv.block_size is not None,
        "--attention-backend": spec.kernels.attention is not None,
        "--moe-backend": spec.kernels.moe is not None,
        "--linear-backend": spec.kernels.linear is not None,
        "--all2all-backend": spec.kernels.all2all is not None,
        "--speculative-config": profile.speculative_for(pool).enabled,
        "--enable-flashinfer-autotune": False,  # render picks the spelling the release has (args.autotune_flags)
        "--kv-transfer-config": spec.placement.mode == Placement.disaggregated,
        "--kv-events-config": kv.events and kv.prefix_caching and spec.placement.router == RouterMode.kv,
    }
    if not when.get(option, True):
        return None
    if option == "--enable-prefix-caching" and not kv.prefix_caching:
        return (vllm.negative(option) if vllm else None) or "--no-enable-prefix-caching"
    return option


# --- routing is the frontend's ---------------------------------------------------------------------

def _router_option(p: PassedFlag, facts: WorkerRouter) -> OptionUse | None:
    """The worker router option a dynamoArgs flag reaches (engine.yaml worker_router), else None."""
    known = _known(p) if p.kind == "dynamoArgs" else None
    return known[1] if known is not None and known[1].option.defined_in in facts.defined_in else None


def _router_text(flag: str, facts: WorkerRouter, router: str) -> str:
    if flag == facts.mode_flag:
        return (f"{flag} on a worker makes its worker set advertise its own routing, which replaces the "
                f"frontend's (spec.placement.router: {router}) for it wholesale")
    return (f"{flag} is a router flag: a worker reads it only with {facts.mode_flag}, which replaces the "
            "frontend's routing; without it the flag does nothing")


@rule("SP231", Severity.error, "router flag on a worker")
def worker_router_flag(ctx: Context) -> Iterator[Hit]:
    facts = ctx.catalog.engine.worker_router
    router = str(ctx.profile.spec.placement.router)
    hint = "routing is the frontend's: set spec.placement.router and remove it here"
    for p in _all(ctx):
        if (use := _router_option(p, facts)) is not None:
            yield Hit(p.path, _router_text(use.flag, facts, router), hint)
    catalog = dynamo_catalog(ctx.profile.spec.versions.dynamo, engine_of(ctx.profile).dynamo_worker)
    if catalog is None:
        return
    # The worker's router flags read their env vars as defaults (DYN_ROUTER_MODE, ...): the same override.
    env_flags = {o.env_var: flag for flag, o in catalog.flags.items()
                 if o.env_var and o.defined_in in facts.defined_in}
    envs: list[tuple[FieldPath, dict[str, str]]] = [(("spec", "kernels", "env"), ctx.profile.spec.kernels.env)]
    envs += [((*path, "env"), pool.spec.env) for _, path, pool in pools(ctx)]
    for where, env in envs:
        for name in sorted(set(env) & set(env_flags)):
            flag = env_flags[name]
            yield Hit((*where, name), f"{name} sets {flag}: {_router_text(flag, facts, router)}", hint)


def flag_problems(profile: StackProfile, role: Role, pool: Pool, engine: FlagCatalog | None) -> list[str]:
    """What makes render refuse a pool's passed flags: the errors of SP221-SP225 and SP231 as one line each."""
    out = []
    facts = load_catalog().engine.worker_router
    for p in passed_flags(profile, role, pool, engine):
        where = f"{role} {p.kind} {p.flag}"
        if p.catalog is None:
            continue
        if (known := _known(p)) is None:
            out.append(f"{where}: not an option of {p.catalog.name}")
            continue
        if _router_option(p, facts) is not None:
            out.append(f"{where}: a router flag; routing is the frontend's (spec.placement.router)")
            continue
        catalog, use = known
        found = p.modelled
        if found is not None and not found.agrees:
            out.append(f"{where}: stackpin renders {found.option} from {found.field}")
            continue
        out += [f"{where}: key {k!r} is set from {f}" for k, f in _modelled_keys(p, use).items()]
        if found is not None:
            continue
        if (shape := shape_problem(p, catalog, use)) is not None:
            out.append(f"{where}: {shape[0]}")
            continue
        text = scalar_text(p.value)
        enforced, _ = _choices(catalog, use)
        if text is not None and enforced and text not in enforced:
            out.append(f"{where}: {text} is not one of its choices")
        out += [f"{where}: {message}" for message, _ in json_key_problems(p, catalog, use)]
    return out


# --- what the stack's engine is given for its modelled fields ---------------------------------------

@rule("SP272", Severity.error, "modelled value the pinned engine's parser refuses")
def modelled_values(ctx: Context) -> Iterator[Hit]:
    """For an engine without stackpin's per-knob rule families (those read vLLM's catalog), the argv render
    writes from the modelled fields is held to the engine's own parser: an unknown option or a value outside
    the choices argparse enforces fails the worker at start, and render would refuse it. Also what the
    engine cannot be given (its `problems`)."""
    engine = engine_of(ctx.profile)
    if engine.rule_modules:
        return  # the engine's own rules (vLLM's kernels, graphs, speculative, precision) say it field by field
    for problem in engine.problems(ctx.profile):
        field, _, why = problem.partition(": ")
        yield Hit(tuple(field.split(".")), why or problem)
    if ctx.engine_catalog is None:
        return
    for role, _, pool in pools(ctx):
        flags = engine.worker_flags(ctx.profile, role, pool.spec, model_revision="-", catalog=ctx.engine_catalog)
        own = set(engine.modelled)
        for text in check_flags([f for f in flags if f[0] in own], [ctx.engine_catalog]):
            option = text.split(" ", 1)[0]
            where = field_path(engine.modelled.get(option, "spec"), role)
            yield Hit(tuple(where.split(".")), f"{engine.label} {ctx.engine_catalog.version}: {text}", None)
