"""vLLM's engine options, read from `EngineArgs.add_cli_args` / `AsyncEngineArgs.add_cli_args`.

Most options are `group.add_argument("--x", **foo_kwargs["field"])` where
`foo_kwargs = get_kwargs(FooConfig)`: argparse gets the keywords vLLM derives from the config
field's annotation and default (argtypes.py mirrors that), edited in place before the call
(`foo_kwargs["f"]["type"] = ...`, `["choices"].remove(...)`), overridden in a dict literal
(`**{**foo_kwargs["f"], "default": None}`) or by explicit keywords. The rest spell their keywords
out. Every option string the parser then accepts is derived here: the registered strings, argparse's
`--no-x` for boolean options, the inverse spelling vLLM's own boolean action adds (vllm_parser.py),
and which of them are hidden or deprecated, with the replacement the package names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from stackpin.catalog.engine_data import Deprecation, EngineOption, ParserRules
from stackpin.engines.argtypes import TypeInfo, classify, converter_type
from stackpin.engines.pysource import FieldDecl, SourceTree, Unknown, call_name, dotted
from stackpin.engines.vllm_parser import deprecated_options, removed_in, replacement_in

ARG_UTILS = "vllm.engine.arg_utils"
FieldRef = tuple[str, str]  # (config class, field name)


@dataclass
class _Option:
    """One add_argument call, as far as the source says."""

    strings: list[str]
    type_info: TypeInfo = TypeInfo(None)
    default: Any = None
    config_field: str | None = None
    boolean_optional: bool = False
    store_true: bool = False
    deprecation: Deprecation | None = None
    converter: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def flag(self) -> str:
        return next((s for s in self.strings if s.startswith("--")), self.strings[0])


@dataclass
class _Scope:
    """Names bound in one add_cli_args: which kwargs dicts stand for which config class or field."""

    classes: dict[str, str] = field(default_factory=dict)  # foo_kwargs -> FooConfig
    fields: dict[str, FieldRef] = field(default_factory=dict)  # moe_kwargs -> (KernelConfig, moe_backend)
    edits: dict[FieldRef, dict[str, ast.expr]] = field(default_factory=dict)  # kwargs["f"]["k"] = expr
    removed: dict[FieldRef, list[str]] = field(default_factory=dict)  # kwargs["f"]["choices"].remove(x)
    extended: set[FieldRef] = field(default_factory=set)  # choices edited some other way

    def ref(self, node: ast.AST) -> FieldRef | None:
        """`foo_kwargs["f"]`, a name bound to one, or `get_kwargs(Foo)["f"]` -> (Foo, f)."""
        if isinstance(node, ast.Name):
            return self.fields.get(node.id)
        if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in self.classes:
                return self.classes[owner.id], node.slice.value
            if isinstance(owner, ast.Call) and call_name(owner) == "get_kwargs" and owner.args:
                return dotted(owner.args[0]), node.slice.value
        return None

    def bind(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            return
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name):
            if isinstance(value, ast.Call) and call_name(value) == "get_kwargs" and value.args:
                self.classes[target.id] = dotted(value.args[0])
            elif ref := self.ref(value):
                self.fields[target.id] = ref
        elif isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
            # foo_kwargs["f"]["type"] = ... / moe_kwargs["type"] = ...
            if (ref := self.ref(target.value)) and isinstance(target.slice.value, str):
                self.edits.setdefault(ref, {})[target.slice.value] = value

    def edit_choices(self, node: ast.AST, tree: SourceTree, module: str) -> None:
        """foo_kwargs["f"]["choices"].remove(X) and other in-place edits of a choices list."""
        target, how = None, ""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target, how = node.func.value, node.func.attr
        elif isinstance(node, ast.AugAssign):
            target, how = node.target, "augment"
        if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                and target.slice.value == "choices" and (ref := self.ref(target.value))):
            return
        if how == "remove" and isinstance(node, ast.Call) and node.args:
            values = tree.strings(module, node.args[0])
            if values:
                self.removed.setdefault(ref, []).extend(values)
                return
        self.extended.add(ref)


def _deprecation(text: str | None) -> Deprecation | None:
    if not text or "deprecated" not in text.lower():
        return None
    message = " ".join(text.split())
    return Deprecation(replacement=replacement_in(message), message=message, removed_in=removed_in(message))


def _action_deprecation(tree: SourceTree, module: str, node: ast.expr) -> Deprecation | None:
    """A custom action class of the package that warns with a deprecation message."""
    found = tree.find_class(module, dotted(node)) if isinstance(node, ast.Name) else None
    if found is None:
        return None
    for inner in ast.walk(found[1]):
        if isinstance(inner, ast.Name) and (text := tree.text_of(found[0], inner)) and "deprecated" in text.lower():
            return _deprecation(text)
    return None


def _field_converters(tree: SourceTree) -> dict[str, ast.expr]:
    """Field name -> the converter vLLM's kwargs builder gives it by name rather than by type
    (`if name == "max_model_len": kwargs[name]["type"] = human_readable_int_or_auto`,
    `elif name in human_readable_int_args: ...`), read from the function in arg_utils that does so."""
    module = tree.module(ARG_UTILS)
    found: dict[str, ast.expr] = {}
    for function in ast.walk(module) if module else ():
        if not isinstance(function, ast.FunctionDef):
            continue
        sets = {t.id: {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                for node in ast.walk(function) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Set)
                for t in node.targets if isinstance(t, ast.Name)}
        for branch in ast.walk(function):
            if not isinstance(branch, ast.If):
                continue
            test = branch.test
            if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1):
                continue
            right = test.comparators[0]
            if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                names = {right.value}
            elif isinstance(test.ops[0], ast.In) and isinstance(right, ast.Name) and right.id in sets:
                names = sets[right.id]
            else:
                continue
            for stmt in branch.body:
                if (isinstance(stmt, ast.Assign) and isinstance(target := stmt.targets[0], ast.Subscript)
                        and isinstance(target.slice, ast.Constant) and target.slice.value == "type"):
                    found.update(dict.fromkeys(names, stmt.value))
    return found


class _Reader:
    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.unresolved: list[str] = []
        self.converters = _field_converters(tree)

    def field_decl(self, owner: str, name: str) -> FieldDecl | None:
        return self.tree.class_fields(ARG_UTILS, owner).get(name)

    def from_field(self, option: _Option, ref: FieldRef, scope: _Scope) -> None:
        owner, name = ref
        decl = self.field_decl(owner, name)
        if decl is None:
            option.notes.append(f"field {owner}.{name} not found")
            self.unresolved.append(f"{option.flag}: field {owner}.{name} not found")
            return
        option.config_field = f"{owner}.{name}"
        info = classify(self.tree, decl.module, decl.annotation)
        if info.choices and (drop := set(scope.removed.get(ref, ()))):
            info = TypeInfo(info.type, tuple(c for c in info.choices if c not in drop), info.choices_enforced,
                            info.config_class, info.config_module, info.item_type)
            option.notes.append(f"removed from CLI choices: {', '.join(sorted(drop))}")
        if ref in scope.extended:
            option.notes.append("choices edited at runtime")
        option.type_info = info
        option.boolean_optional = info.is_bool
        if (converter := self.converters.get(name)) is not None and not info.is_bool:
            self.keyword(option, "type", converter)
        option.default = self.tree.value(decl.module, decl.value) if decl.value is not None else None

    def keyword(self, option: _Option, key: str, value: ast.expr) -> None:
        """An argparse keyword set explicitly, in a dict literal or by an in-place edit."""
        tree, info = self.tree, option.type_info
        if key == "default":
            option.default = tree.value(ARG_UTILS, value)
        elif key == "type":
            kind = converter_type(tree, ARG_UTILS, value)
            option.converter = None
            if isinstance(value, ast.Name) and (hit := tree.lookup(ARG_UTILS, value.id)):
                option.converter = value.id if isinstance(hit[1], ast.FunctionDef) else None
            if kind is not None:
                option.type_info = TypeInfo(kind, info.choices, info.choices_enforced, info.config_class,
                                            info.config_module, info.item_type)
            elif info.type is None:
                option.type_info = TypeInfo("str")
        elif key == "choices":
            values = tree.strings(ARG_UTILS, value)
            if values is None:
                option.notes.append("choices computed at runtime")
            option.type_info = TypeInfo(info.type or "str", tuple(sorted(set(values))) if values else None,
                                        True if values else None, info.config_class, info.config_module,
                                        info.item_type)
        elif key == "action":
            action = ast.unparse(value).strip("'\"")
            option.boolean_optional = action.endswith("BooleanOptionalAction")
            option.store_true = action == "store_true"
            if option.boolean_optional or option.store_true:
                option.type_info = TypeInfo("bool")
                if option.store_true and not isinstance(option.default, bool):
                    option.default = False
            option.deprecation = option.deprecation or _action_deprecation(tree, ARG_UTILS, value)
        elif key == "help":
            option.deprecation = option.deprecation or _deprecation(tree.text_of(ARG_UTILS, value))
        elif key == "deprecated" and ast.unparse(value) not in {"False", "None"}:
            option.deprecation = option.deprecation or Deprecation()
        elif key == "nargs" and isinstance(value, ast.Constant) and value.value in {"+", "*"}:
            option.type_info = TypeInfo("list", info.choices, info.choices_enforced, item_type=info.type)

    def call(self, node: ast.Call, scope: _Scope) -> _Option | None:
        strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                   and a.value.startswith("-")]
        if not strings:
            return None
        option = _Option(strings)
        explicit: list[tuple[str, ast.expr]] = []
        for kw in node.keywords:
            if kw.arg is not None:
                explicit.append((kw.arg, kw.value))
                continue
            literal: list[tuple[str, ast.expr]] = []
            base = scope.ref(kw.value)
            if isinstance(kw.value, ast.Dict):  # {**foo_kwargs["f"], "default": None}
                for key, value in zip(kw.value.keys, kw.value.values, strict=True):
                    if key is None:
                        base = base or scope.ref(value)
                    elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                        literal.append((key.value, value))
            if base is None:
                self.unresolved.append(f"{option.flag}: **{ast.unparse(kw.value)}")
                continue
            self.from_field(option, base, scope)
            for name, expr in [*scope.edits.get(base, {}).items(), *literal]:
                self.keyword(option, name, expr)
        for name, expr in explicit:
            self.keyword(option, name, expr)
        if option.type_info.type is None and option.config_field is None:
            option.type_info = TypeInfo("str")  # argparse stores the one string it is given
        return option

    def read(self) -> list[_Option]:
        module = self.tree.module(ARG_UTILS)
        if module is None:
            raise LookupError("vllm/engine/arg_utils.py")
        options: list[_Option] = []
        for function in ast.walk(module):
            if not (isinstance(function, ast.FunctionDef) and function.name == "add_cli_args"):
                continue
            scope = _Scope()
            nodes = sorted((n for n in ast.walk(function) if isinstance(n, ast.stmt | ast.expr)),
                           key=lambda n: (n.lineno, n.col_offset))
            for node in nodes:
                if isinstance(node, ast.Assign):
                    scope.bind(node)
                scope.edit_choices(node, self.tree, ARG_UTILS)
            for node in nodes:
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "add_argument" and (option := self.call(node, scope)) is not None):
                    options.append(option)
        return options

    def module_deprecations(self) -> dict[str, Deprecation]:
        """Option string -> deprecation, from arg_utils' module-level messages ("--x is deprecated ...").
        Some are only warned about when the engine is built, never passed to add_argument."""
        found: dict[str, Deprecation] = {}
        module = self.tree.module(ARG_UTILS)
        for stmt in module.body if module else []:
            if isinstance(stmt, ast.Assign) and (text := self.tree.text_of(ARG_UTILS, stmt.value)):
                if (deprecation := _deprecation(text)) is not None:
                    for string in deprecated_options(text):
                        found.setdefault(string, deprecation)
        return found


def _default(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, Unknown):
        return None, value.expr
    return value, None


def _finish(option: _Option, rules: ParserRules, hidden_why: str | None,
            deprecations: dict[str, Deprecation]) -> EngineOption:
    """The option's record: every string it answers to, which are hidden, which are deprecated."""
    longs = [s for s in option.strings if s.startswith("--")]
    negatives: list[str] = []
    hidden: list[str] = []
    deprecated: dict[str, Deprecation] = {}
    inverses: dict[str, str] = {}  # --no-enable-x -> --disable-x
    if option.boolean_optional:
        for string in longs:
            no_form = "--no-" + string[2:]
            negatives.append(no_form)
            for prefix, inverse in rules.inverse_prefixes.items():
                if string.startswith(prefix):
                    inverses[no_form] = inverse + string.removeprefix(prefix)
        negatives += inverses.values()
        if inverses and rules.no_forms_hidden_with_inverse:
            hidden = [s for s in negatives if s.startswith("--no-")]
    whole = option.deprecation or next((deprecations[s] for s in option.strings if s in deprecations), None)
    if whole is not None:
        deprecated = dict.fromkeys([*option.strings, *negatives], whole)
    else:
        for no_form in hidden:
            visible = inverses.get(no_form) or next(iter(inverses.values()))
            deprecated[no_form] = Deprecation(replacement=visible, message=hidden_why)
    default, default_expr = _default(option.default)
    info = option.type_info
    return EngineOption(
        strings=tuple(sorted(option.strings)), negatives=tuple(sorted(negatives)), hidden=tuple(sorted(hidden)),
        deprecated=deprecated, type=info.type, item_type=info.item_type, choices=info.choices,
        choices_enforced_by_argparse=info.choices_enforced if info.choices else None, default=default,
        default_expr=default_expr, config_field=option.config_field, config_class=info.config_class,
        converter=option.converter,
        boolean_optional=option.boolean_optional or None, store_true=option.store_true or None,
        notes=tuple(sorted(option.notes)))


@dataclass(frozen=True)
class VllmOptions:
    options: dict[str, EngineOption]
    config_classes: dict[str, str]  # config class -> module, for JSON options
    unresolved: tuple[str, ...]


def extract_options(tree: SourceTree, rules: ParserRules, hidden_why: str | None) -> VllmOptions:
    reader = _Reader(tree)
    raw = reader.read()
    deprecations = reader.module_deprecations()
    options: dict[str, EngineOption] = {}
    classes: dict[str, str] = {}
    taken = {s for option in raw for s in option.strings}
    unresolved = list(reader.unresolved)
    for option in raw:
        record = _finish(option, rules, hidden_why, deprecations)
        clash = sorted(set(record.negatives) & taken)
        if clash:  # argparse would refuse to start; a package that ships this is broken
            unresolved.append(f"{option.flag}: generated {', '.join(clash)} collides with a registered option")
        options[option.flag] = record
        if option.type_info.config_class and option.type_info.config_module:
            classes[option.type_info.config_class] = option.type_info.config_module
    return VllmOptions(options, classes, tuple(sorted(set(unresolved))))
