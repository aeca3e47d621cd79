"""A DynamoGraphDeployment -> the equivalent stackpin profile, and what could not be carried over.

What stackpin models is mapped onto the profile (pools and their parallelism, placement, KV cache, kernels,
CUDA graphs from --compilation-config, speculative settings, env, image, model store); every other worker
flag goes into the pool's `engineArgs` (vLLM's) or `dynamoArgs` (Dynamo's, by the pinned Dynamo's flag
catalog), so rendering the profile gives the same argv. Settings stackpin models once per stack (the KV
cache, kernels, CUDA graphs, env) come from the decode (or aggregated) worker; a prefill worker that differs
is reported. The KV connector comes from whichever worker sets --kv-transfer-config. What the profile does not
model (resources, Secrets, tolerations, node labels, volumes, shared memory) is carried per component in
spec.placement.podOverrides / sharedMemory (overrides.py). Nothing is guessed or dropped silently: each default
the DGD does not state, and each thing that cannot be carried, is reported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import stackpin.jsonio as jsonio
from stackpin.backends import DEFAULT, names
from stackpin.backends import engine as backend
from stackpin.backends.base import ServingEngine
from stackpin.catalog import Catalog, load_catalog
from stackpin.catalog.flags import dynamo_catalog
from stackpin.catalog.version import parse_version
from stackpin.errors import StackpinError
from stackpin.imports.compare import SWITCH, options, other_components, roles
from stackpin.imports.dgd import Component, Dgd
from stackpin.imports.modelled import number
from stackpin.imports.overrides import Rendered, pass_through
from stackpin.profile.engine_args import MODELLED_FRONTEND, POOL
from stackpin.profile.k8s_names import DNS_LABEL_PATTERN
from stackpin.render.pod import ARCH_KEY

if TYPE_CHECKING:
    from packaging.version import Version

# Dynamo's own worker options the importer reads (the model's parsers, render's `serving` flags; the older role
# switches compare.roles reads): consumed beside the engine's modelled table.
_PARSERS = (("--dyn-tool-call-parser", "toolCallParser"), ("--dyn-reasoning-parser", "reasoningParser"))
_DYNAMO_READ = frozenset({option for option, _ in _PARSERS} | {"--is-prefill-worker", "--is-decode-worker"})
# Fields of the engine's table the importer reads elsewhere, per worker (the KV connector, KV events, the role).
_ELSEWHERE = frozenset({"spec.placement.kvConnector", "spec.kvCache.events", "spec.placement.mode"})
# Where a modelled JSON option's other keys go: spec.cudaGraphs.compilation rides beside the modelled keys (SP230
# checks them); a section without one notes them as not carried.
_OVERFLOW = {"spec.cudaGraphs": "compilation"}
# A JSON key the lock pins (the draft's revision: stackpin.backends' speculative_config), left to the lock.
_PINNED = frozenset({"spec.speculative.draftRevision"})
# Pool fields in the order a person reads a pool.
_POOL_ORDER = ("tensorParallel", "dataParallel", "pipelineParallel", "maxNumSeqs", "maxNumBatchedTokens",
               "expertParallel", "gpuMemoryUtilization")
# Env render derives from the stack besides the engine's own (ServingEngine.ready_timeout_env, autotune_dir_env):
# carried as the profile setting it comes from, never as kernels.env.
_DERIVED_ENV = frozenset({"HF_HOME", "HF_HUB_OFFLINE"})
# What render sets on every worker that joins a ComputeDomain (a stack crossing trays of an MNNVL rack).
_DOMAIN_ENV = {"NCCL_MNNVL_ENABLE", "NCCL_CUMEM_ENABLE", "UCX_CUDA_IPC_ENABLE_MNNVL"}
_VERSION = re.compile(r":(?:v)?([0-9]+\.[0-9]+\.[0-9]+)")
# spec.service is the target a stack is tuned for; no DGD states one.
SERVICE_PLACEHOLDER = {"perAgentTokS": 80, "ttftSeconds": 10, "agents": 1}


class ImportError_(StackpinError):
    """The DGD cannot become a profile (exit 2, one line)."""


@dataclass(frozen=True)
class Note:
    component: str
    item: str
    message: str

    def __str__(self) -> str:
        return f"{self.component}: {self.item}: {self.message}"


@dataclass(frozen=True)
class Imported:
    profile: dict[str, Any]  # the profile document, in the order a person reads it
    notes: tuple[Note, ...]  # what was not carried over, or was assumed


def _json(value: str) -> Any:
    try:
        return jsonio.loads(value)
    except ValueError:
        return None


def _versions(image: str | None, given: str | None, catalog: Catalog, notes: list[Note], eng: ServingEngine
              ) -> dict[str, Any]:
    """The stack's versions: the Dynamo release (the image tag's, else --dynamo, else the nearest the catalog
    has) and what its extra for `eng` pins (stackpin.backends.pins), the runtime image Dynamo ships for it."""
    from stackpin.backends.pins import dynamo_pins, release_pins

    pins = catalog.versions.dynamo
    found = _VERSION.search(image or "")
    version = given or (found.group(1) if found else None)
    if version not in pins:
        newer = sorted((v for v in pins if version and _key(v) >= _key(version)), key=_key)
        chosen = newer[0] if newer else sorted(pins, key=_key)[-1]
        notes.append(Note("stack", "versions.dynamo", f"Dynamo {version or '(no version in the image tag)'} is not in "
                          f"stackpin's version catalog; pinned {chosen}, the nearest it has (--dynamo to choose)"))
        version = chosen
    pin = pins[version]
    release, nixl = dynamo_pins(eng, pin)
    releases = release_pins(eng, catalog.versions)
    if release is None or release not in releases:
        raise ImportError_(f"Dynamo {version}'s {eng.dynamo_extra} extra pins no {eng.label} release stackpin knows; "
                           "pass --dynamo with one that does")
    return {"dynamo": version, eng.name: release, "flashinfer": releases[release].flashinfer,
            "nixl": nixl or pin.nixl, "runtimeImage": image or f"{eng.runtime_image}:{version}"}


def _key(version: str) -> Version:
    """Its release numbers as a PEP 440 version (an image tag's `1.2.0-deepseek-v4-cuda13-dev.3` is 1.2.0)."""
    return parse_version(".".join(re.findall(r"[0-9]+", version)[:3]) or "0")


def _platform(worker: Component, given: str | None, catalog: Catalog) -> str:
    if given:
        if given not in catalog.platforms:
            raise ImportError_(f"--platform {given}: not a platform stackpin knows ({', '.join(catalog.platforms)})")
        return given
    labels = dict(worker.node_selector)
    matches = [name for name, p in catalog.platforms.items()
               if p.node_labels and all(labels.get(k) == v for k, v in p.node_labels.items())]
    if not matches:
        raise ImportError_(f"{worker.name}: its node selector names no platform stackpin knows; pass --platform "
                           f"({', '.join(catalog.platforms)})")
    # A rack platform and a node platform may share a GPU label; the rack when replicas span nodes.
    return sorted(matches, key=lambda n: catalog.platforms[n].kind != "rack" if worker.node_count > 1 else 0)[0]


def _model(model_id: str, revision: str | None, found: Any, notes: list[Note]) -> dict[str, Any]:
    """spec.model's id, revision and weights (the catalog's precision, bf16 for a model it does not know)."""
    model: dict[str, Any] = {"id": model_id}
    if revision is not None:
        model["revision"] = revision
    if found:
        facts = found[1]
        model["weights"] = "fp8-fp4" if (facts.precision.dense, facts.precision.routed_experts) == ("fp8", "fp4") \
            else facts.precision.dense
    else:
        model["weights"] = "bf16"
        notes.append(Note("stack", "model.weights", f"{model_id} is not in stackpin's model catalog: weights "
                          "assumed bf16 and validate checks none of its facts"))
    return model


def _engine_value(value: str) -> Any:
    if value == SWITCH:
        return True
    parsed = _json(value) if value.lstrip().startswith("{") else None
    # YAML types: validation checks a flag's value type against the pinned engine's (an int flag needs an int).
    return parsed if isinstance(parsed, dict) else number(value)


@dataclass(frozen=True)
class Reading:
    """How one engine's worker flags read back into profile fields, derived from the tables render writes
    through (ServingEngine.modelled, modelled_dynamo, modelled_json, modelled_off, modelled_aliases): a flag
    added to the engine's table is imported without an edit here."""

    pool: dict[str, str]  # option -> the pool's own field
    stack: dict[str, str]  # option -> field path, set once per stack (JSON options and switches included)
    json: dict[str, dict[str, str]]  # JSON option -> key -> field path
    off: dict[str, tuple[str, Any]]  # switch option -> (its off spelling, the field's value then)
    aliases: dict[str, tuple[str, str]]  # option -> (JSON option, key) it sets
    consumed: frozenset[str]  # every option the profile models: never passed through
    stack_wide: tuple[str, ...]  # options compared between workers (stackpin sets them once per stack)
    derived_env: frozenset[str]  # env render derives from the stack

    def option(self, path: str) -> str:
        """The option that renders `path` (a stack field)."""
        return next(option for option, field in self.stack.items() if field == path)

    def value(self, opts: dict[str, str], path: str) -> str | None:
        return opts.get(self.option(path))


def reading(engine: ServingEngine) -> Reading:
    table = dict(engine.modelled)
    pool = {o: f.removeprefix(POOL + ".") for o, f in table.items() if f.startswith(POOL + ".")}
    stack = {o: f for o, f in table.items() if o not in pool and f not in _ELSEWHERE}
    off = {o: engine.modelled_off[o] for o in stack if o in engine.modelled_off}
    aliases = dict(engine.modelled_aliases)
    # A switch compares by its off spelling: import reads its absence and its on spelling alike (the field's own).
    compared = [off[o][0] if o in off else o for o in stack]
    consumed = set(table) | set(engine.modelled_dynamo) | {s for s, _ in off.values()} | set(aliases) | _DYNAMO_READ
    derived = {e for e in (engine.ready_timeout_env, engine.autotune_dir_env) if e} | _DERIVED_ENV
    return Reading(pool=pool, stack=stack, json={o: dict(k) for o, k in engine.modelled_json.items()}, off=off,
                   aliases=aliases, consumed=frozenset(consumed),
                   stack_wide=(*compared, *aliases, *(o for o, _ in _PARSERS)), derived_env=frozenset(derived))


def _pool(comp: Component, opts: dict[str, str], read: Reading, flags: Any, dynamo: Any, notes: list[Note],
          role: str) -> dict[str, Any]:
    pool: dict[str, Any] = {"replicas": comp.replicas}
    found = {field: (True if opts[option] == SWITCH else number(opts[option]))
             for option, field in read.pool.items() if option in opts}
    pool.update(sorted(found.items(), key=lambda kv: (_POOL_ORDER.index(kv[0]) if kv[0] in _POOL_ORDER
                                                      else len(_POOL_ORDER), kv[0])))
    if comp.node_count > 1:
        pool["nodesPerReplica"] = comp.node_count
    engine: dict[str, Any] = {}
    dyn: dict[str, Any] = {}
    for option, value in sorted(opts.items()):
        if option in read.consumed:
            continue
        # The worker takes Dynamo's options and the engine's: an option only Dynamo has is a dynamoArg.
        dynamo_only = (dynamo is not None and dynamo.accepts(option) and not (flags and flags.accepts(option))) or \
            (dynamo is None and option.startswith("--dyn-"))
        (dyn if dynamo_only else engine)[option] = _engine_value(value)
    transfer = _json(opts.get("--kv-transfer-config", "{}")) or {}
    if isinstance(transfer, dict) and isinstance(transfer.get("kv_connector_extra_config"), dict):
        pool["kvConnectorExtraConfig"] = transfer["kv_connector_extra_config"]
    if engine:
        pool["engineArgs"] = engine
    if dyn:
        pool["dynamoArgs"] = dyn
    tp, dp, pp = (int(pool.get(k, 1)) for k in ("tensorParallel", "dataParallel", "pipelineParallel"))
    gpus_expected = tp * dp * pp // comp.node_count
    if comp.gpus and comp.gpus != gpus_expected:
        notes.append(Note(role, "resources", f"{comp.gpus} GPUs per pod, but TP x DP x PP / nodes = {gpus_expected}; "
                          "stackpin requests what the parallel sizes need"))
    return pool


def _read_json(option: str, raw: str, keys: dict[str, str], spec: dict[str, Any], notes: list[Note],
               role: str) -> None:
    """A modelled JSON option's keys into their fields; the rest beside them (_OVERFLOW) or noted."""
    section = _common_parent(keys.values())
    value = _json(raw)
    if not isinstance(value, dict):
        if section not in _OVERFLOW:
            notes.append(Note(role, option, f"{raw[:60]!r} is not JSON stackpin can read (a variable set outside "
                              "the input?); not carried over"))
        return
    out: dict[str, Any] = {}
    for key, inner in value.items():
        if key in keys:
            if keys[key] not in _PINNED:
                out[keys[key].rsplit(".", 1)[1]] = inner
        elif section in _OVERFLOW:
            out.setdefault(_OVERFLOW[section], {})[key] = inner
    for key in sorted(set(value) - set(keys)) if section not in _OVERFLOW else ():
        notes.append(Note(role, f"{option}.{key}", "not modelled; not carried over"))
    if out or section not in _OVERFLOW:
        _put(spec, section, {**_get(spec, section), **out})


def _common_parent(paths: Any) -> str:
    parents = {path.rsplit(".", 1)[0] for path in paths}
    [parent] = parents  # a JSON option is one section's (stackpin.backends)
    return str(parent)


def _get(spec: dict[str, Any], path: str) -> dict[str, Any]:
    doc: Any = spec
    for part in path.removeprefix("spec.").split("."):
        doc = doc.get(part, {}) if isinstance(doc, dict) else {}
    return doc if isinstance(doc, dict) else {}


def _put(spec: dict[str, Any], path: str, value: Any) -> None:
    from stackpin.imports.modelled import put

    put(spec, path, value)


def _stack_settings(opts: dict[str, str], spec: dict[str, Any], notes: list[Note], role: str, events: bool,
                    read: Reading) -> None:
    """What the main worker sets once per stack, through the engine's table (the model's own fields are read
    by import_dgd)."""
    spec["kvCache"] = {}
    spec["kernels"] = {}
    for option, path in read.stack.items():
        if path.startswith("spec.model."):
            continue
        if option in read.json:
            if option in opts:
                _read_json(option, opts[option], read.json[option], spec, notes, role)
            for alias, (target, key) in read.aliases.items():
                if target == option and alias in opts:
                    _put(spec, read.json[target][key], number(opts[alias]))
        elif option in read.off:
            spelling, value = read.off[option]
            if spelling in opts:
                _put(spec, path, value)
        elif option in opts and opts[option] != SWITCH:
            _put(spec, path, number(opts[option]))
    spec["kvCache"]["events"] = events
    autotune = spec.setdefault("autotune", {})
    autotune.setdefault("mode", "tune")  # a DGD that does not turn it off tunes (the engine's default)


def _transfer(workers: dict[str, Component], main: Component, disaggregated: bool,
              notes: list[Note]) -> dict[str, Any]:
    """The stack's --kv-transfer-config: the main worker's, else another worker's (Dynamo's vLLM examples set it
    on prefill only). Render writes one connector with kv_role kv_both on every pool of a disaggregated stack."""
    found: dict[str, dict[str, Any]] = {}
    for comp in [main, *(c for _, c in sorted(workers.items()) if c is not main)]:
        raw = options(comp.entry.argv).get("--kv-transfer-config") if comp.entry else None
        if raw is None:
            continue
        value = _json(raw)
        if isinstance(value, dict):
            found[comp.name] = value
        else:
            notes.append(Note(comp.name, "--kv-transfer-config", f"{raw[:60]!r} is not JSON stackpin can read; "
                              "not carried over"))
    if not found:
        return {}
    source, chosen = next(iter(found.items()))
    connector = chosen.get("kv_connector")
    for name, value in found.items():
        for key in sorted(set(value) - {"kv_connector", "kv_role", "kv_connector_extra_config"}):
            notes.append(Note(name, f"--kv-transfer-config.{key}", f"{json.dumps(value[key])} is not modelled; "
                              "not carried over"))
        if value.get("kv_role", "kv_both") != "kv_both":
            notes.append(Note(name, "--kv-transfer-config.kv_role", f"{value['kv_role']!r}; stackpin writes "
                              "kv_both on every pool (the NIXL connector pulls either way)"))
        if value.get("kv_connector") != connector:
            notes.append(Note(name, "--kv-transfer-config.kv_connector", f"{value.get('kv_connector')!r} differs "
                              f"from {source}'s {connector!r}; stackpin runs one connector per stack: {source}'s"))
    if not disaggregated:
        notes.append(Note(source, "--kv-transfer-config", "a colocated stack: render writes no KV transfer "
                          "(spec.placement.kvConnector serves disaggregated pools); not carried over"))
    for comp in workers.values() if disaggregated else ():
        if comp.name not in found:
            notes.append(Note(comp.name, "--kv-transfer-config", f"not set here ({source} sets it); stackpin "
                              f"writes {connector} with kv_role kv_both on every pool of a disaggregated stack"))
    return chosen


def _launch_script(comp: Component, notes: list[Note]) -> None:
    """What a launch script does besides starting the process: stackpin starts it directly, without a shell."""
    if comp.entry is None:
        return
    for line in comp.entry.shell:
        notes.append(Note(comp.name, "launch script", f"`{line[:80]}` is not carried over (stackpin starts "
                          "the process directly, without a shell)"))
    if comp.entry.output:
        notes.append(Note(comp.name, "launch script output", f"`{' '.join(comp.entry.output)[:80]}`: the argv is "
                          "the same; where the output also goes (a log file in the container) is not carried over "
                          "(stackpin's process writes to the container log only)"))


def _pass_through(spec: dict[str, Any], workers: dict[str, Component], frontend: Component | None,
                  catalog: Catalog, derived: set[str], notes: list[Note]) -> None:
    """spec.placement.podOverrides and sharedMemory: per component, what the DGD sets there that render would
    write otherwise (stackpin.imports.overrides)."""
    placement = spec["placement"]
    platform = catalog.platforms[spec["target"]["platform"]]
    host = catalog.engine.worker_host_per_gpu
    store = spec.get("modelStore") or {}
    tolerations = ({"key": ARCH_KEY, "operator": "Equal", "value": platform.cpu_arch, "effect": "NoSchedule"},) \
        if platform.cpu_arch == "arm64" else ()
    token: tuple[str, ...] = (f"secret {store['tokenSecret']}",) if store.get("tokenSecret") else ()
    overrides: dict[str, Any] = {}
    shared: dict[str, str] = {}
    comps = [*sorted(workers.items()), *([("frontend", frontend)] if frontend else [])]
    for role, comp in comps:
        if role == "frontend":
            rendered = Rendered(requests={}, node_selector={ARCH_KEY: platform.cpu_arch}, shared_memory=None, env={},
                                keep_env=frozenset(derived | {"DYN_ROUTER_MODE", "DYN_MIGRATION_LIMIT"}),
                                tolerations=tolerations, env_from=token, model_mount=store.get("mountPath"))
        else:
            pool = placement["pools"][role]
            gpus = int(pool.get("tensorParallel", 1)) * int(pool.get("dataParallel", 1)) * \
                int(pool.get("pipelineParallel", 1)) // comp.node_count
            rendered = Rendered(requests={"cpu": str(host.cpu * gpus), "memory": f"{host.memory_gib * gpus}Gi"},
                                node_selector={**platform.node_labels, ARCH_KEY: platform.cpu_arch},
                                shared_memory=catalog.engine.worker_shared_memory,
                                env=spec.get("kernels", {}).get("env", {}), keep_env=frozenset(derived),
                                tolerations=tolerations, env_from=token, model_mount=store.get("mountPath"))
        carried = pass_through(comp, rendered)
        if carried.patch:
            overrides[role] = carried.patch
        if carried.shared_memory:
            shared[role] = carried.shared_memory
        notes += [Note(comp.name, item, why) for item, why in carried.not_carried]
    if shared:
        placement["sharedMemory"] = shared
    if overrides:
        placement["podOverrides"] = overrides


def import_dgd(dgd: Dgd, *, platform: str | None = None, dynamo: str | None = None,
               catalog: Catalog | None = None) -> Imported:
    catalog = catalog or load_catalog()
    notes: list[Note] = []
    by_role = roles(dgd)
    for comp in other_components(dgd):
        notes.append(Note(comp.name, "component", f"a {comp.type} component (not a {backend(DEFAULT).label} worker "
                          "or the frontend); not carried over"))
    for role in [r for r in by_role if "#" in r]:
        notes.append(Note(by_role.pop(role).name, "component", f"a second {role.split('#')[0]} component; "
                          "stackpin runs one pool per role: not carried over"))
    workers = {r: c for r, c in by_role.items() if r != "frontend"}
    if not workers:
        commands = [backend(name).worker_command for name in names()]
        raise ImportError_(f"{dgd.name}: no engine worker ({' '.join(commands[0])} or "
                           f"{' or '.join(command[-1] for command in commands[1:])}) found")
    main = workers.get("decode") or workers.get("worker") or next(iter(workers.values()))
    eng = backend(_engine_name(dgd, main))
    read_back = _import_options if eng.flag_import == "options" else _import_flags
    return read_back(dgd, by_role, workers, main, eng, platform=platform, dynamo=dynamo, catalog=catalog, notes=notes)


def _import_flags(dgd: Dgd, by_role: dict[str, Component], workers: dict[str, Component], main: Component,
                  eng: ServingEngine, *, platform: str | None, dynamo: str | None, catalog: Catalog,
                  notes: list[Note]) -> Imported:
    """A stack whose workers' flags read back through the engine's tables (`reading`): vLLM's."""
    read = reading(eng)
    main_opts = options(main.entry.argv) if main.entry else {}
    model_option = read.option("spec.model.id")
    if model_option not in main_opts:
        raise ImportError_(f"{dgd.name}: {main.name} names no {model_option}")
    versions = _versions(main.image, dynamo, catalog, notes, eng)
    flags, dyn = eng.flag_catalog(versions[eng.name]), dynamo_catalog(versions["dynamo"], eng.dynamo_worker)
    model_id = main_opts[model_option]
    found = catalog.model_for(model_id)
    model = _model(model_id, read.value(main_opts, "spec.model.revision"), found, notes)
    max_len = read.option("spec.model.maxModelLen")
    if max_len in main_opts:
        model["maxModelLen"] = int(main_opts[max_len])
    else:
        model["maxModelLen"] = found[1].max_context if found else 32768
        notes.append(Note(main.name, max_len, f"not set ({eng.label} takes the model's own); the profile states "
                          f"{model['maxModelLen']}{' (the catalog maximum)' if found else ' (a placeholder: set it)'}"))
    if (mode := read.value(main_opts, "spec.model.tokenizerMode")) is not None:
        model["tokenizerMode"] = mode
    for option, field in _PARSERS:
        if option in main_opts:
            model[field] = main_opts[option]
        elif found and getattr(found[1], "serving", None) is not None:
            model[field] = "none"  # the DGD runs without it; the catalog default would add one
    spec: dict[str, Any] = {"model": model, "target": {"platform": _platform(main, platform, catalog)},
                            "versions": versions}
    # One switch per stack: any worker that publishes KV events turns them on (the router reads them all).
    events_option = next(o for o, f in eng.modelled.items() if f == "spec.kvCache.events")
    events = any(events_option in options(c.entry.argv) for c in workers.values() if c.entry)
    _stack_settings(main_opts, spec, notes, main.name, events, read)
    for comp in workers.values():
        has = comp.entry is not None and events_option in options(comp.entry.argv)
        if events:
            notes.append(Note(comp.name, events_option, "KV events are one switch per stack "
                              "(spec.kvCache.events), and render writes its own publisher settings" +
                              ("" if has else "; this worker published none and will publish them")))
    disaggregated = "prefill" in workers
    transfer = _transfer(workers, main, disaggregated, notes)
    frontend, fe_opts, placement = _frontend_placement(by_role, disaggregated, notes)
    if transfer.get("kv_connector"):
        placement["kvConnector"] = transfer["kv_connector"]
    pools = {}
    for role, comp in sorted(workers.items()):
        opts = options(comp.entry.argv) if comp.entry else {}
        pools[role] = _pool(comp, opts, read, flags, dyn, notes, role)
        if comp is not main:
            for option in read.stack_wide:
                if opts.get(option) != main_opts.get(option):
                    notes.append(Note(comp.name, option, f"{opts.get(option)!r} differs from {main.name}'s "
                                      f"{main_opts.get(option)!r}; stackpin sets it once per stack: {main.name}'s"))
    placement["pools"] = pools
    spec["placement"] = placement
    return _finish(dgd, spec, workers, main, frontend, fe_opts, catalog, notes, read.derived_env)


def _frontend_placement(by_role: dict[str, Component], disaggregated: bool,
                        notes: list[Note]) -> tuple[Component | None, dict[str, str], dict[str, Any]]:
    """The frontend, its options, and spec.placement's router and migration as the DGD runs them."""
    frontend = by_role.get("frontend")
    fe_opts = options(frontend.entry.argv) if frontend and frontend.entry else {}
    fe_env = frontend.env_values() if frontend else {}
    router = fe_opts.get("--router-mode") or fe_env.get("DYN_ROUTER_MODE") or "round-robin"
    placement: dict[str, Any] = {"mode": "disaggregated" if disaggregated else "colocated", "router": router}
    # The DGD's request migration as it runs: its flag, DYN_MIGRATION_LIMIT, or Dynamo's default 0 (off).
    migration = str(fe_opts.get("--migration-limit") or fe_env.get("DYN_MIGRATION_LIMIT") or "0")
    if migration.isdigit():
        placement["migrationLimit"] = int(migration)
    else:
        notes.append(Note(frontend.name if frontend else "frontend", "--migration-limit",
                          f"{migration!r} is not a count; Dynamo's default 0 (no migration) carried over"))
        placement["migrationLimit"] = 0
    return frontend, fe_opts, placement


def _finish(dgd: Dgd, spec: dict[str, Any], workers: dict[str, Component], main: Component,
            frontend: Component | None, fe_opts: dict[str, str], catalog: Catalog, notes: list[Note],
            engine_env: frozenset[str]) -> Imported:
    """What every engine's import shares after the pools: frontend args, env, model store, pod overrides."""
    placement = spec["placement"]
    versions = spec["versions"]
    disaggregated = "prefill" in workers
    for comp in [*(c for _, c in sorted(workers.items())), *([frontend] if frontend else [])]:
        _launch_script(comp, notes)
    per_unit = catalog.platforms[spec["target"]["platform"]]
    gpus = sum(c.replicas * c.node_count * max(c.gpus, 1) for c in workers.values())
    unit = per_unit.gpus_per_node * per_unit.nodes  # one rack, or one node
    if gpus > unit:
        spec["target"]["count"] = -(-gpus // unit)
    fe_catalog = dynamo_catalog(spec["versions"]["dynamo"], "frontend")
    frontend_args = {}
    for option in sorted(set(fe_opts) - {"--router-mode", "--http-port", "--no-router-kv-events", "--migration-limit"}):
        if option in MODELLED_FRONTEND:
            notes.append(Note(frontend.name if frontend else "frontend", option, "render writes it from the profile "
                              "(spec.kvCache.events, spec.placement); not carried over"))
        elif fe_catalog is not None and fe_catalog.accepts(option):
            frontend_args[option] = _engine_value(fe_opts[option])
        elif fe_catalog is None:  # never claim a release lacks a flag without its catalog
            frontend_args[option] = _engine_value(fe_opts[option])
            notes.append(Note(frontend.name if frontend else "frontend", option, "no catalog for Dynamo "
                              f"{spec['versions']['dynamo']}'s frontend; kept unchecked"))
        else:
            notes.append(Note(frontend.name if frontend else "frontend", option, "not an option of Dynamo "
                              f"{spec['versions']['dynamo']}'s frontend; not carried over"))
    if frontend_args:
        placement["frontendArgs"] = frontend_args
    target = catalog.platforms[spec["target"]["platform"]]
    in_domain = target.multinode_nvlink and (disaggregated or any(c.node_count > 1 for c in workers.values()))
    derived = set(engine_env) | (_DOMAIN_ENV if in_domain else set())
    env: dict[str, str] = {}
    for var in main.env:  # a variable from a reference is carried in podOverrides, as the DGD writes it
        if var.value is not None and var.source is None and var.name not in derived:
            env[var.name] = var.value
    if env:
        spec["kernels"]["env"] = env
    if main.pvc_mounts:
        claim, mount = main.pvc_mounts[0]
        store: dict[str, Any] = {"pvc": claim, "mountPath": mount,
                                 "offline": main.env_values().get("HF_HUB_OFFLINE") == "1"}
        secrets = [ref.split(" ", 1)[1] for ref in main.env_from if ref.startswith("secret ")]
        if secrets:
            store["tokenSecret"] = secrets[0]
        spec["modelStore"] = store
        if "HF_HUB_OFFLINE" not in main.env_values():
            notes.append(Note(main.name, "env HF_HUB_OFFLINE", "unset (the Hub reachable); stackpin writes 0"))
        if frontend and "HF_HOME" not in frontend.env_values():
            notes.append(Note(frontend.name, "env HF_HOME", "the frontend sets no HF_HOME; stackpin's reads "
                              "the tokenizer from the model store like the workers (HF_HOME, HF_HUB_OFFLINE)"))
    _pass_through(spec, workers, frontend, catalog, derived, notes)
    if frontend and frontend.image and frontend.image != versions["runtimeImage"]:
        notes.append(Note(frontend.name, "image",
                          f"{frontend.image}; stackpin runs the frontend from the runtime image"))
    spec["service"] = dict(SERVICE_PLACEHOLDER)
    notes.append(Note("stack", "service", "the target the stack is tuned for is not in a DGD; placeholder "
                      f"{SERVICE_PLACEHOLDER}: set it"))
    name = dgd.name.lower()[:40].strip("-") or "imported"
    if not re.fullmatch(DNS_LABEL_PATTERN, name):
        name = "imported"
    profile = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile",
               "metadata": {"name": name, "deployment": name}, "spec": spec}
    return Imported(profile, tuple(notes))


def _engine_name(dgd: Dgd, main: Component) -> str:
    """The stack's serving engine: the module its main worker runs (`dynamo.sglang` -> sglang), else the DGD's
    spec.backendFramework, else vLLM (stackpin's default)."""
    module = main.entry.module if main.entry else ""
    for name in names():
        if module == f"dynamo.{name}":
            return name
    framework = (dgd.backend_framework or "").lower()
    return framework if framework in names() else DEFAULT


def _import_options(dgd: Dgd, by_role: dict[str, Component], workers: dict[str, Component], main: Component,
                    eng: ServingEngine, *, platform: str | None, dynamo: str | None, catalog: Catalog,
                    notes: list[Note]) -> Imported:
    """A stack whose workers' flags map back option by option through the engine's own modelled table (the one
    render writes through: SGLang's); what the table does not model goes to the pool's engineArgs / dynamoArgs."""
    from stackpin.imports.modelled import map_flags, put, resolve

    versions = _versions(main.image, dynamo, catalog, notes, eng)
    flags, dyn = eng.flag_catalog(versions[eng.name]), dynamo_catalog(versions["dynamo"], eng.dynamo_worker)

    def opts_of(comp: Component) -> dict[str, str]:
        raw = options(comp.entry.argv) if comp.entry else {}
        return {resolve(option, (dyn, flags)): value for option, value in raw.items()}

    for comp in workers.values():
        for written in sorted(options(comp.entry.argv) if comp.entry else {}):
            canonical = resolve(written, (dyn, flags))
            if canonical != written:
                notes.append(Note(comp.name, written, f"written as {canonical}, the option it reaches in the "
                                  "worker's parser"))
                notes.append(Note(comp.name, canonical, f"the DGD's {written}, in its own spelling"))

    main_opts = opts_of(main)
    if "--model-path" not in main_opts:
        raise ImportError_(f"{dgd.name}: {main.name} names no --model-path")
    mapped = {role: map_flags(opts_of(comp), eng.modelled) for role, comp in workers.items()}
    main_stack = mapped[next(r for r, c in workers.items() if c is main)].stack
    stack = dict(main_stack)  # what the profile takes from it is popped; the other workers compare with main_stack
    spec: dict[str, Any] = {"engine": eng.name}
    model_id = str(stack.pop("spec.model.id"))
    found = catalog.model_for(model_id)
    revision = stack.pop("spec.model.revision", None)
    model = _model(model_id, None if revision is None else str(revision), found, notes)
    if "spec.model.maxModelLen" not in stack:
        stack["spec.model.maxModelLen"] = found[1].max_context if found else 32768
        notes.append(Note(main.name, "--context-length", f"not set ({eng.label} takes the model's own); the profile "
                          f"states {stack['spec.model.maxModelLen']}"
                          f"{' (the catalog maximum)' if found else ' (a placeholder: set it)'}"))
    spec["model"] = model
    spec["target"] = {"platform": _platform(main, platform, catalog)}
    spec["versions"] = versions
    events = any("--kv-events-config" in opts_of(c) for c in workers.values())
    spec["kvCache"] = {"events": events}
    spec["kernels"] = {}
    spec["autotune"] = {"mode": "tune"}
    for path, value in sorted(stack.items()):
        put(spec, path, value)
    disaggregated = "prefill" in workers
    frontend, fe_opts, placement = _frontend_placement(by_role, disaggregated, notes)
    backends = {str(b) for c in workers.values() if (b := opts_of(c).get("--disaggregation-transfer-backend"))}
    if disaggregated and backends:
        backend = sorted(backends)[0]
        inverse = {v: k for k, v in eng.kv_transfer_names.items()}
        placement["kvConnector"] = inverse.get(backend, backend)
        if len(backends) > 1:
            notes.append(Note("stack", "--disaggregation-transfer-backend", f"workers differ ({sorted(backends)}); "
                              f"stackpin runs one per stack: {backend}"))
    pools: dict[str, Any] = {}
    for role, comp in sorted(workers.items()):
        m = mapped[role]
        pool: dict[str, Any] = {"replicas": comp.replicas, **m.pool}
        if pool.get("expertParallel") and "--enable-dp-attention" in opts_of(comp):
            # Under DP attention render writes --tp-size tp*dp and the replica's totals of the per-rank
            # maxNumSeqs / maxNumBatchedTokens, which SGLang divides among the dp ranks (stackpin.backends.sglang)
            dp = max(int(pool.get("dataParallel", 1)), 1)
            for key in ("tensorParallel", "maxNumSeqs", "maxNumBatchedTokens"):
                if key in pool:
                    pool[key] = max(int(pool[key]) // dp, 1)
        if comp.node_count > 1:
            pool["nodesPerReplica"] = comp.node_count
        engine_args: dict[str, Any] = {}
        dynamo_args: dict[str, Any] = {}
        for option, value in m.rest.items():
            dynamo_only = dyn is not None and dyn.accepts(option) and not (flags and flags.accepts(option))
            (dynamo_args if dynamo_only else engine_args)[option] = _engine_value(value)
        if engine_args:
            pool["engineArgs"] = engine_args
        if dynamo_args:
            pool["dynamoArgs"] = dynamo_args
        for option, value in m.unmapped.items():
            notes.append(Note(comp.name, option, f"{value!r}: stackpin renders it from its profile fields and "
                              "cannot read this value back; not carried over"))
        if comp is not main:
            for path in sorted(set(m.stack) | set(main_stack)):
                if m.stack.get(path) != main_stack.get(path):
                    notes.append(Note(comp.name, path, f"{m.stack.get(path)!r} differs from {main.name}'s "
                                      f"{main_stack.get(path)!r}; stackpin sets it once per stack: {main.name}'s"))
        tp, dp, pp = (int(pool.get(k, 1)) for k in ("tensorParallel", "dataParallel", "pipelineParallel"))
        expected = tp * dp * pp // comp.node_count
        if comp.gpus and comp.gpus != expected:
            notes.append(Note(role, "resources", f"{comp.gpus} GPUs per pod, but TP x DP x PP / nodes = {expected}; "
                              "stackpin requests what the parallel sizes need"))
        pools[role] = pool
    placement["pools"] = pools
    spec["placement"] = placement
    return _finish(dgd, spec, workers, main, frontend, fe_opts, catalog, notes, reading(eng).derived_env)
