"""A Dynamo release's catalog: the options `python -m dynamo.vllm`, `python -m dynamo.sglang` and
`python -m dynamo.frontend` add (on top of the engine's, for the workers), read from the ai-dynamo wheel.
What the SGLang worker does to SGLang's own parser is read by dynamo_sglang.py.

Dynamo registers most options through two helpers of its own (dynamo/common/configuration/utils.py):
`add_argument(group, flag_name=, env_var=, default=, arg_type=, obsolete_flag=, deprecated=, ...)` and
`add_negatable_bool_argument(...)`, which calls the first with argparse.BooleanOptionalAction. The
helpers are read, not assumed: a helper whose body passes BooleanOptionalAction makes boolean options,
its `arg_type` default is the type of options that give none. `obsolete_flag` is registered beside
`flag_name` as the legacy spelling it replaces; `deprecated=Deprecated(replacement, remove_in=)` marks
the whole option. The parsers are plain argparse: a boolean option's negatives are argparse's --no-x.
"""

from __future__ import annotations

import ast
from importlib import import_module
from typing import Any

import msgspec

from stackpin.catalog.engine_data import (
    Deprecation,
    DynamoRelease,
    EngineOption,
    EntryPoint,
    EnvVar,
    Source,
    typed,
)
from stackpin.catalog.engine_kinds import SERVING, ReleaseKind
from stackpin.engines.argtypes import converter_type
from stackpin.engines.package import Package
from stackpin.engines.pysource import SourceTree, Unknown, call_name, keywords, last_name

PREFIXES = ("dynamo/",)
HELPERS = {"add_argument", "add_negatable_bool_argument"}
FRONTEND = ("dynamo.frontend.frontend_args",)
GROUPS = "dynamo.common.configuration.groups."
NO_RULE = ("argparse.BooleanOptionalAction registers --no-x beside each long option --x of a boolean option; "
           "each option lists them under `negatives`.")


def _loop_bindings(module: ast.Module) -> dict[str, list[str]]:
    """`for legacy_flag, env, repl in <literal tuples>:` -> {"legacy_flag": [flags...]}: Dynamo registers
    some deprecated aliases in such loops; the iterable may be a local name."""
    literals: dict[str, ast.expr] = {}
    for node in ast.walk(module):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.List | ast.Tuple)):
            literals[node.targets[0].id] = node.value
    out: dict[str, list[str]] = {}
    for node in ast.walk(module):
        if not isinstance(node, ast.For):
            continue
        iterable = literals.get(node.iter.id, node.iter) if isinstance(node.iter, ast.Name) else node.iter
        if not isinstance(iterable, ast.List | ast.Tuple):
            continue
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        for index, target in enumerate(targets):
            if not isinstance(target, ast.Name):
                continue
            values = []
            for element in iterable.elts:
                item = element.elts[index] if isinstance(element, ast.Tuple) and len(targets) > 1 else element
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    values.append(item.value)
            if values and all(v.startswith("-") for v in values):
                out[target.id] = values
    return out


class _Helpers:
    """What Dynamo's option helpers do, read from their definitions."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree

    def definition(self, module: str, name: str) -> ast.FunctionDef | None:
        hit = self.tree.lookup(module, name)
        return hit[1] if hit and isinstance(hit[1], ast.FunctionDef) else None

    def boolean(self, module: str, name: str) -> bool:
        fn = self.definition(module, name)
        return fn is not None and any(
            isinstance(n, ast.keyword) and n.arg == "action" and last_name(n.value) == "BooleanOptionalAction"
            for n in ast.walk(fn))

    def default_of(self, module: str, name: str, parameter: str) -> ast.expr | None:
        fn = self.definition(module, name)
        if fn is None:
            return None
        for arg, default in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
            if arg.arg == parameter:
                return default
        return None


def _env_default(tree: SourceTree, module: str, node: ast.expr) -> tuple[str, ast.expr | None] | None:
    """`default=env_or_default("DYN_X", 5, ...)`: a call of a package function whose parameters are
    named `env_var` and `default` -> ("DYN_X", the default expression)."""
    if not isinstance(node, ast.Call):
        return None
    hit = tree.lookup(module, call_name(node))
    if hit is None or not isinstance(hit[1], ast.FunctionDef):
        return None
    names = [a.arg for a in hit[1].args.args]
    if "env_var" not in names or "default" not in names:
        return None
    bound = dict(zip(names, node.args, strict=False)) | keywords(node)
    env = bound.get("env_var")
    if not (isinstance(env, ast.Constant) and isinstance(env.value, str)):
        return None
    return env.value, bound.get("default")


def _fstring(node: ast.expr, bindings: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) \
                    and value.value.id in bindings:
                parts.append(bindings[value.value.id])
            else:
                return None
        return "".join(parts)
    return None


def _deprecated(tree: SourceTree, module: str, node: ast.expr) -> Deprecation | None:
    """`Deprecated(replacement, remove_in=...)`, or a call of a function of the module returning one."""
    if ast.unparse(node) in {"None", "False"}:
        return None
    bindings: dict[str, str] = {}
    if isinstance(node, ast.Call) and call_name(node) != "Deprecated":
        hit = tree.lookup(module, call_name(node))
        if hit and isinstance(hit[1], ast.FunctionDef):
            fn = hit[1]
            names = [a.arg for a in fn.args.args]
            bindings = {name: arg.value for name, arg in zip(names, node.args, strict=False)
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)}
            returned = next((n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value), None)
            if isinstance(returned, ast.Call):
                module, node = hit[0], returned
    if isinstance(node, ast.Call) and call_name(node) == "Deprecated":
        kw = keywords(node)
        replacement = node.args[0] if node.args else kw.get("replacement")
        remove = node.args[1] if len(node.args) > 1 else kw.get("remove_in")
        return Deprecation(replacement=_fstring(replacement, bindings) if replacement is not None else None,
                           removed_in=_fstring(remove, bindings) if remove is not None else None)
    return Deprecation()


def _options(tree: SourceTree, module: str, helpers: _Helpers) -> tuple[dict[str, EngineOption], list[str]]:
    """Options registered in `module`, through argparse or Dynamo's helpers."""
    mod = tree.module(module)
    found: dict[str, EngineOption] = {}
    unresolved: list[str] = []
    if mod is None:
        return found, unresolved
    path = tree.path_of(module)
    loops = _loop_bindings(mod)
    for node in ast.walk(mod):
        if not isinstance(node, ast.Call) or call_name(node) not in HELPERS:
            continue
        helper = isinstance(node.func, ast.Name)  # Dynamo's function, not an argparse method
        kw = keywords(node)
        strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                   and a.value.startswith("-")]
        if not helper and not strings and any(not isinstance(a, ast.Constant) for a in node.args):
            unresolved.append(f"{path}:{node.lineno}: option strings computed at run time")
            continue
        obsolete: list[str] = []
        for key, target in (("flag_name", strings), ("obsolete_flag", obsolete)):
            value = kw.get(key)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                target.append(value.value)
            elif isinstance(value, ast.Name) and value.id in loops:
                target.extend(loops[value.id])
            elif value is not None and ast.unparse(value) != "None":
                unresolved.append(f"{path}:{node.lineno}: {key}={ast.unparse(value)}")
        strings += obsolete
        if not strings:
            continue
        name = call_name(node)
        action = ast.unparse(kw["action"]) if "action" in kw else ""
        boolean = (helper and helpers.boolean(module, name)) or action.endswith("BooleanOptionalAction")
        store_true = action.strip("'\"") == "store_true"
        kind: Any = "bool" if boolean or store_true else None
        converter = kw.get("arg_type" if helper else "type")
        if converter is None and helper and not boolean:
            converter = helpers.default_of(module, name, "arg_type")
        function = None
        if kind is None and converter is not None and ast.unparse(converter) != "None":
            kind = converter_type(tree, module, converter) or "str"
            if isinstance(converter, ast.Name) and (hit := tree.lookup(module, converter.id)):
                function = converter.id if isinstance(hit[1], ast.FunctionDef) else None
        if kind is None and action in {"", "'store'", '"store"'}:
            kind = "str"
        choices = tree.strings(module, kw["choices"]) if "choices" in kw else None
        notes = ["choices computed at runtime"] if "choices" in kw and choices is None else []
        default = tree.value(module, kw["default"]) if "default" in kw else (False if store_true else None)
        env = kw.get("env_var")
        if env is None and "default" in kw and (read := _env_default(tree, module, kw["default"])):
            env = ast.Constant(read[0])
            default = tree.value(module, read[1]) if read[1] is not None else None
        negatives = sorted("--no-" + s[2:] for s in strings if s.startswith("--")) if boolean else []
        deprecation = _deprecated(tree, module, kw["deprecated"]) if "deprecated" in kw else None
        help_text = tree.text_of(module, kw.get("help"))
        if deprecation is None and help_text and help_text.lstrip().lower().startswith("[deprecated"):
            deprecation = Deprecation(message=" ".join(help_text.split()))
        deprecated: dict[str, Deprecation] = {}
        canonical = next((s for s in strings if s.startswith("--")), strings[0])  # -i, --interactive: --interactive
        if deprecation is not None:
            deprecated = dict.fromkeys([*strings, *negatives], deprecation)
        else:
            for old in obsolete:
                deprecated[old] = Deprecation(replacement=canonical)
                if boolean:
                    deprecated["--no-" + old[2:]] = Deprecation(replacement="--no-" + canonical[2:])
        found[canonical] = EngineOption(
            strings=tuple(sorted(strings)), negatives=tuple(negatives), deprecated=deprecated, type=kind,
            converter=function,
            choices=tuple(sorted(set(choices))) if choices else None,
            choices_enforced_by_argparse=True if choices else None,
            default=None if isinstance(default, Unknown) else default,
            default_expr=default.expr if isinstance(default, Unknown) else None,
            env_var=env.value if isinstance(env, ast.Constant) and isinstance(env.value, str) else None,
            defined_in=path, boolean_optional=boolean or None, store_true=store_true or None, notes=tuple(notes))
    return found, unresolved


def _closure(tree: SourceTree, roots: tuple[str, ...]) -> list[str]:
    """The roots and the shared argument-group modules they import, transitively."""
    seen: list[str] = []
    todo = list(roots)
    while todo:
        module = todo.pop(0)
        if module in seen or tree.path_of(module) is None:
            continue
        seen.append(module)
        todo += [dep for dep in tree.imported_modules(module) if dep.startswith(GROUPS)]
    return seen


def _crd(tree: SourceTree) -> str | None:
    """The DynamoGraphDeployment API version Dynamo's planner talks to (`DYNAMO_API_VERSION = "v1beta1"`): served
    by that release's operator, but not its storage version before 1.5.0, so not the `crd` pin (pins.py)."""
    for path in sorted(tree.files):
        if path.startswith("dynamo/planner/") and "DYNAMO_API_VERSION" in tree.files[path]:
            value = tree.value(SourceTree.module_name(path), ast.Name(id="DYNAMO_API_VERSION"))
            if isinstance(value, str):
                return value
    return None


def _worker_roots(kind: ReleaseKind) -> tuple[str, ...]:
    """The modules that register a serving engine's Dynamo worker options (dynamo/<engine>/args.py and
    backend_args.py), and the argument-group modules they import."""
    return (f"{kind.dynamo_module}.args", f"{kind.dynamo_module}.backend_args")


def _section(tree: SourceTree, kind: ReleaseKind, entry: EntryPoint) -> tuple[Any, tuple[str, ...]]:
    """A serving engine's worker section and its rules: the engine's own reader of the worker where it has one
    (engine_kinds: `dynamo_section`), else the options as they are, with the engine's rule."""
    if kind.dynamo_section is None:
        return entry, (kind.dynamo_rule,) if kind.dynamo_rule else ()
    module, _, function = kind.dynamo_section.partition(":")
    section: tuple[Any, tuple[str, ...]] = getattr(import_module(module), function)(tree, entry)
    return section


def _entry_point(tree: SourceTree, helpers: _Helpers, roots: tuple[str, ...],
                 unresolved: list[str]) -> EntryPoint:
    options: dict[str, EngineOption] = {}
    for module in _closure(tree, roots):
        found, missed = _options(tree, module, helpers)
        options.update(found)
        unresolved += missed
    return EntryPoint(option_strings=tuple(sorted({s for o in options.values() for s in o.all_strings})),
                      boolean_optional_options=tuple(sorted(f for f, o in options.items() if o.boolean_optional)),
                      options=dict(sorted(options.items())))


def _env_vars(entry: EntryPoint) -> dict[str, EnvVar]:
    return {option.env_var: EnvVar(default=option.default, default_expr=option.default_expr, option=flag)
            for flag, option in entry.options.items() if option.env_var}


def build(package: Package) -> DynamoRelease:
    tree = SourceTree(package.files)
    helpers = _Helpers(tree)
    unresolved: list[str] = []
    optional = {f.name for f in msgspec.structs.fields(DynamoRelease) if f.default is not msgspec.NODEFAULT}
    workers: dict[str, Any] = {}
    rules: list[str] = []
    env_vars: dict[str, EnvVar] = {}
    for kind in SERVING:
        assert kind.dynamo_worker is not None  # a serving engine's row names its worker
        roots = _worker_roots(kind)
        if tree.path_of(roots[0]) is None and kind.dynamo_worker in optional:
            continue  # a release without this engine's worker (SGLang's: every release from 1.3.1 has it)
        entry = _entry_point(tree, helpers, roots, unresolved)
        workers[kind.dynamo_worker], own = _section(tree, kind, entry)
        rules += own
        # An env var two workers read keeps the record of the first that names it (the frontend's wins over both).
        for name, record in _env_vars(entry).items():
            env_vars.setdefault(name, record)
    frontend = _entry_point(tree, helpers, FRONTEND, unresolved)
    env_vars.update(_env_vars(frontend))
    return typed(DynamoRelease(
        version=package.version, frontend=frontend, crd=_crd(tree), **workers,
        env_vars=dict(sorted(env_vars.items())), rules=(NO_RULE, *rules), requires=package.requires,
        unresolved=tuple(sorted({*unresolved, *(f"{p}: syntax this Python cannot parse" for p in tree.unparsable)})),
        source=Source(package=package.filename, sha256=package.sha256, files_parsed=tuple(sorted(tree.used)))))
