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
from typing import Any

from stackpin.catalog.engine_data import (
    Deprecation,
    DynamoRelease,
    EngineOption,
    EntryPoint,
    EnvVar,
    SglangWorker,
    Source,
    typed,
)
from stackpin.engines import dynamo_sglang
from stackpin.engines.argtypes import converter_type
from stackpin.engines.package import Package
from stackpin.engines.pysource import SourceTree, Unknown, call_name, keywords, last_name

PREFIXES = ("dynamo/",)
HELPERS = {"add_argument", "add_negatable_bool_argument"}
ENTRY_POINTS = {
    "worker_vllm": ("dynamo.vllm.args", "dynamo.vllm.backend_args"),
    "frontend": ("dynamo.frontend.frontend_args",),
    "worker_sglang": ("dynamo.sglang.args", "dynamo.sglang.backend_args"),  # every release from 1.3.1 has it
}
GROUPS = "dynamo.common.configuration.groups."
WORKER_RULE = ("The vLLM worker (python -m dynamo.vllm) also accepts every vLLM engine option "
               "(AsyncEngineArgs.add_cli_args) of the vLLM it runs with.")
SGLANG_RULE = ("The SGLang worker (python -m dynamo.sglang) also accepts every SGLang server option "
               "({call}, {at}) of the SGLang it runs with, after its own options are parsed; worker_sglang "
               "lists what it changes in that parser.")
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


def _sglang_worker(tree: SourceTree, entry: EntryPoint | None) -> tuple[SglangWorker | None, tuple[str, ...]]:
    """The SGLang worker's section, and its rule when the worker hands the rest to SGLang's parser. Its
    env vars go beside the others; one another entry point already names keeps that entry's record."""
    if entry is None:
        return None, ()
    parser = dynamo_sglang.read(tree)
    worker = SglangWorker(
        option_strings=entry.option_strings, boolean_optional_options=entry.boolean_optional_options,
        options=entry.options, engine_parser=parser.call, engine_parser_options=dict(sorted(parser.options.items())),
        engine_choices_added=dict(sorted(parser.choices_added.items())),
        disaggregation_modes=dict(sorted(parser.disaggregation_modes.items())), at=dict(sorted(parser.at.items())))
    rule = (SGLANG_RULE.format(call=parser.call, at=parser.at["engine_parser"]),) if parser.call else ()
    return worker, rule


def build(package: Package) -> DynamoRelease:
    tree = SourceTree(package.files)
    helpers = _Helpers(tree)
    entries: dict[str, EntryPoint] = {}
    env_vars: dict[str, EnvVar] = {}
    unresolved: list[str] = []
    for entry, roots in ENTRY_POINTS.items():
        if tree.path_of(roots[0]) is None and entry == "worker_sglang":
            continue  # a release without the SGLang worker
        options: dict[str, EngineOption] = {}
        for module in _closure(tree, roots):
            found, missed = _options(tree, module, helpers)
            options.update(found)
            unresolved += missed
        entries[entry] = EntryPoint(
            option_strings=tuple(sorted({s for o in options.values() for s in o.all_strings})),
            boolean_optional_options=tuple(sorted(f for f, o in options.items() if o.boolean_optional)),
            options=dict(sorted(options.items())))
        for flag, option in options.items():
            if option.env_var and not (entry == "worker_sglang" and option.env_var in env_vars):
                env_vars[option.env_var] = EnvVar(default=option.default, default_expr=option.default_expr,
                                                  option=flag)
    sglang, rules = _sglang_worker(tree, entries.get("worker_sglang"))
    return typed(DynamoRelease(
        version=package.version, worker_vllm=entries["worker_vllm"], frontend=entries["frontend"], crd=_crd(tree),
        worker_sglang=sglang,
        env_vars=dict(sorted(env_vars.items())), rules=(NO_RULE, WORKER_RULE, *rules), requires=package.requires,
        unresolved=tuple(sorted({*unresolved, *(f"{p}: syntax this Python cannot parse" for p in tree.unparsable)})),
        source=Source(package=package.filename, sha256=package.sha256, files_parsed=tuple(sorted(tree.used)))))
