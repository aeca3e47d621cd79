"""A vLLM release's catalog: its engine options (vllm_args.py), the config classes its JSON options
fill, the values it allows by kind, the env vars `vllm/envs.py` reads and the model registry."""

from __future__ import annotations

import ast
from typing import Any

from stackpin.catalog.engine_data import ConfigClass, ConfigField, EngineOption, EnvVar, Source, VllmRelease, typed
from stackpin.engines.argtypes import classify
from stackpin.engines.package import Package
from stackpin.engines.pysource import SourceTree, Unknown, call_name
from stackpin.engines.vllm_args import ARG_UTILS, extract_options
from stackpin.engines.vllm_parser import read_parser, rule_texts

ENVS = "vllm.envs"
REGISTRY = "vllm.model_executor.models.registry"
PREFIXES = ("vllm/",)


def _split(value: Any) -> tuple[Any, str | None]:
    return (None, value.expr) if isinstance(value, Unknown) else (value, None)


def _init(value: ast.expr | None) -> bool:
    """False for `field(..., init=False)` (dataclasses' or pydantic's): not a constructor argument."""
    return not (isinstance(value, ast.Call) and call_name(value) in ("field", "Field") and any(
        kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False for kw in value.keywords))


def config_classes(tree: SourceTree, roots: dict[str, str]) -> dict[str, ConfigClass]:
    """The fields of each config class a JSON option fills, and of the config classes those hold."""
    out: dict[str, ConfigClass] = {}
    todo = sorted(roots.items())
    while todo:
        name, module = todo.pop(0)
        if name in out:
            continue
        fields: dict[str, ConfigField] = {}
        for field_name, decl in tree.class_fields(module, name).items():
            info = classify(tree, decl.module, decl.annotation)
            default, expr = _split(tree.value(decl.module, decl.value)) if decl.value is not None else (None, None)
            fields[field_name] = ConfigField(annotation=ast.unparse(decl.annotation), type=info.type,
                                             choices=info.choices, default=default, default_expr=expr,
                                             config_class=info.config_class, init=_init(decl.value))
            if info.config_class and info.config_module and info.config_class not in out:
                todo.append((info.config_class, info.config_module))
        module_path = tree.path_of(module) or module
        out[name] = ConfigClass(module=module_path, fields=fields)
    return out


def env_vars(tree: SourceTree) -> dict[str, EnvVar]:
    """Every key of `environment_variables` in vllm/envs.py, with the type and default its
    `if TYPE_CHECKING:` block declares and the choices an env_with_choices(...) entry allows."""
    module = tree.module(ENVS)
    if module is None:
        return {}
    declared: dict[str, ast.AnnAssign] = {}
    entries: dict[str, ast.expr] = {}
    for stmt in SourceTree.top_level(module):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id == "environment_variables" and isinstance(stmt.value, ast.Dict):
                entries = {k.value: v for k, v in zip(stmt.value.keys, stmt.value.values, strict=True)
                           if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            else:
                declared[stmt.target.id] = stmt
        elif (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict)
              and any(isinstance(t, ast.Name) and t.id == "environment_variables" for t in stmt.targets)):
            entries = {k.value: v for k, v in zip(stmt.value.keys, stmt.value.values, strict=True)
                       if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    out: dict[str, EnvVar] = {}
    for name, entry in entries.items():
        decl = declared.get(name)
        default, expr = _split(tree.value(ENVS, decl.value)) if decl and decl.value is not None else (None, None)
        choices = None
        if isinstance(entry, ast.Call) and call_name(entry).endswith("with_choices") and len(entry.args) >= 3:
            values = tree.strings(ENVS, entry.args[2])
            choices = tuple(sorted(set(values))) if values else None
        out[name] = EnvVar(type=ast.unparse(decl.annotation) if decl else None, default=default, default_expr=expr,
                           choices=choices)
    return out


def model_architectures(tree: SourceTree) -> dict[str, tuple[str, ...]]:
    """Architectures of the model registry's *_MODELS tables (and those it lists as previously supported)."""
    module = tree.module(REGISTRY)
    current: set[str] = set()
    previous: set[str] = set()
    for stmt in module.body if module else []:
        if not isinstance(stmt, ast.Assign | ast.AnnAssign):
            continue
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
        if isinstance(target, ast.Name) and target.id.endswith("_MODELS") and isinstance(stmt.value, ast.Dict):
            keys = {k.value for k in stmt.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if target.id == "_PREVIOUSLY_SUPPORTED_MODELS":
                previous |= keys
            elif target.id != "_OOT_SUPPORTED_MODELS":
                current |= keys
    return {"supported": tuple(sorted(current)), "previously_supported": tuple(sorted(previous))}


def _choices(tree: SourceTree, options: dict[str, EngineOption]) -> dict[str, tuple[str, ...]]:
    def field_choices(owner: str, name: str) -> tuple[str, ...]:
        decl = tree.class_fields(ARG_UTILS, owner).get(name)
        return (classify(tree, decl.module, decl.annotation).choices or ()) if decl else ()

    def enum_members(name: str, under: str = "vllm/") -> dict[str, Any]:
        found = tree.find_class_anywhere(name, under)
        return tree.enum_members(found[1]) if found else {}

    # Legacy per-model MTP names vLLM rewrites to "mtp" (with a warning).
    mtp = set(tree.strings("vllm.config.speculative", ast.Name(id="MTPModelTypes")) or []) - {"mtp"}
    all2all = options.get("--all2all-backend")
    levels = enum_members("OptimizationLevel", "vllm/config/")
    return {
        "attention_backends": tuple(sorted(enum_members("AttentionBackendEnum"))),
        "moe_backends": field_choices("KernelConfig", "moe_backend"),
        "linear_backends": field_choices("KernelConfig", "linear_backend"),
        # What --all2all-backend accepts on the CLI (arg_utils may drop internal values).
        "all2all_backends": tuple(all2all.choices or ()) if all2all else (),
        "all2all_backends_config": field_choices("ParallelConfig", "all2all_backend"),
        "cudagraph_modes": tuple(sorted(enum_members("CUDAGraphMode", "vllm/config/"))),
        "speculative_methods": field_choices("SpeculativeConfig", "method"),
        "kv_cache_dtypes": field_choices("CacheConfig", "cache_dtype"),
        "performance_modes": field_choices("VllmConfig", "performance_mode"),
        "speculative_mtp_aliases": tuple(sorted(mtp)),
        # -O<n> / --optimization-level take the IntEnum's values.
        "optimization_levels": tuple(sorted(str(v) for v in levels.values())),
    }


def build(package: Package) -> VllmRelease:
    tree = SourceTree(package.files)
    rules, hidden_why = read_parser(tree)
    extracted = extract_options(tree, rules, hidden_why)
    options = extracted.options
    accepted = {s for option in options.values() for s in option.all_strings}
    release = typed(VllmRelease(
        version=package.version,
        option_strings=tuple(sorted(accepted)),
        boolean_optional_options=tuple(sorted(f for f, o in options.items() if o.boolean_optional)),
        options=dict(sorted(options.items())),
        parser=rules,
        rules=rule_texts(rules),
        engine_args_fields=tuple(sorted(tree.class_fields(ARG_UTILS, "EngineArgs"))),
        choices=_choices(tree, options),
        config_classes=config_classes(tree, extracted.config_classes),
        env_vars=env_vars(tree),
        model_architectures=model_architectures(tree),
        requires=package.requires,
        unresolved=tuple(sorted({*extracted.unresolved, *(f"{p}: syntax this Python cannot parse"
                                                           for p in tree.unparsable)})),
        source=Source(package=package.filename, sha256=package.sha256, files_parsed=tuple(sorted(tree.used))),
    ))
    return release
