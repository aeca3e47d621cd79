"""SGLang's server options, read from `ServerArgs.add_cli_args` (sglang/srt/server_args.py).

SGLang (0.5.21) declares most options as fields of namespace structs (`arg_groups/fields/*.py`), each
annotated `A[T, "help"]` or `A[T, Arg(...)]`; `add_cli_args_from_dataclass` (arg_groups/arg_utils.py)
turns every field of the namespaces `_INPUT_NAMESPACES` lists into one plain argparse option:
`--field-name` (or `Arg.cli_name`) plus `Arg.aliases`; a Literal gives argparse choices; `List[X]`
nargs "+"; `bool` store_true; `Arg.action` replaces all of that. `add_cli_args` then registers the
options whose choices are computed when it runs, `--config`, and deprecated spellings by hand. This
module reads both in the order of that function, as the source says; where only running could tell
(a choices list a plugin or an env var changes), the option keeps what the source lists and the
catalog's `unresolved` says where.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from stackpin.catalog.engine_data import Deprecation, EngineOption, OptionType
from stackpin.engines.pysource import SourceTree, Unknown, call_name, dotted, keywords, last_name
from stackpin.engines.vllm_parser import replacement_in

SERVER_ARGS = "sglang.srt.server_args"
NAMESPACES = "_INPUT_NAMESPACES"
_SCALARS: dict[str, OptionType] = {"str": "str", "int": "int", "float": "float", "bool": "bool"}
_UNION_HEADS = {"Optional", "Union"}
_LIST_HEADS = {"List", "list"}


@dataclass
class _Option:
    """One add_argument call, as far as the source says."""

    strings: list[str]
    where: str  # file:line of the declaration
    type: OptionType | None = "str"
    item_type: str | None = None
    choices: list[str] | None = None
    default: Any = None
    required: bool = False
    store_true: bool = False
    boolean_optional: bool = False
    converter: str | None = None
    deprecation: Deprecation | None = None
    config_field: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def flag(self) -> str:
        return next((s for s in self.strings if s.startswith("--")), self.strings[0])


@dataclass(frozen=True)
class SglangOptions:
    options: dict[str, EngineOption]
    fields: tuple[str, ...]  # every ServerArgs field, CLI or not
    unresolved: tuple[str, ...]
    list_sources: dict[str, str]  # option -> the public choices list it takes (choices.py), for `choices`


def _deprecation(text: str | None, replacement: str | None = None) -> Deprecation | None:
    """SGLang marks a retired option by starting its help with "Deprecated" (or "(Deprecated")."""
    if not text or not text.lstrip("( ").lower().startswith("deprecated"):
        return None
    message = " ".join(text.split())
    return Deprecation(replacement=replacement or replacement_in(message), message=message)


def _unwrap_optional(node: ast.expr) -> ast.expr:
    """`Optional[X]`, `Union[X, None]`, `X | None` -> X; a union of several types stays as it is
    (arg_utils._unwrap_optional)."""
    members: list[ast.expr]
    if isinstance(node, ast.Subscript) and last_name(node.value) in _UNION_HEADS:
        members = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if last_name(node.value) == "Optional":
            members.append(ast.Constant(None))
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        members = [node.left, node.right]
    else:
        return node
    real = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None)]
    return real[0] if len(real) == 1 else node


def _is_list(node: ast.expr) -> bool:
    return isinstance(node, ast.Subscript) and last_name(node.value) in _LIST_HEADS


def _scalar(node: ast.expr | None) -> OptionType:
    """argparse's type= for an annotation: str, int and float are themselves, anything else str
    (arg_utils._infer_type_func)."""
    name = last_name(node) if isinstance(node, ast.Name | ast.Attribute) else ""
    return _SCALARS.get(name, "str") if name != "bool" else "str"


class _Reader:
    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.unresolved: list[str] = []
        self.defaults: dict[str, Any] = {}  # every ServerArgs field's default, CLI or not
        self.list_sources: dict[str, str] = {}

    def where(self, module: str, node: ast.AST) -> str:
        return f"{self.tree.path_of(module) or module}:{getattr(node, 'lineno', 0)}"

    # --- choices ---------------------------------------------------------------------------------

    def _class_strings(self, module: str, node: ast.expr) -> list[str] | None:
        """`Backend.ALL` where `ALL = (FULL, BREAKABLE, ...)` names other attributes of the class."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            return None
        found = self.tree.find_class(module, node.value.id)
        if found is None:
            return None
        where, cls = found
        expr = self.tree.class_attribute(where, cls, node.attr)
        if not isinstance(expr, ast.Tuple | ast.List):
            return None
        out: list[str] = []
        for element in expr.elts:
            if isinstance(element, ast.Name) and (inner := self.tree.class_attribute(where, cls, element.id)):
                element = inner
            value = self.tree.value(where, element)
            if not isinstance(value, str):
                return None
            out.append(value)
        return out

    def _function_strings(self, module: str, function: ast.FunctionDef) -> list[str] | None:
        """What a helper returns last (`return list(NAMES)`), its local imports followed."""
        local = {alias.asname or alias.name: (self.tree.resolve_from(module, node), alias.name)
                 for node in ast.walk(function) if isinstance(node, ast.ImportFrom) for alias in node.names}
        returns = [n for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
        if not returns:
            return None
        value = max(returns, key=lambda r: r.lineno).value
        assert value is not None
        if isinstance(value, ast.Call) and call_name(value) in {"list", "sorted", "tuple"} and value.args:
            value = value.args[0]
        if isinstance(value, ast.Name) and value.id in local:
            source, name = local[value.id]
            hit = self.tree.lookup(source, name) if source else None
            if hit and isinstance(hit[1], ast.ClassDef) and self.tree.is_enum(hit[1]):
                return list(self.tree.enum_members(hit[1]))  # iterating an enum: its members (names here)
            if hit and isinstance(hit[1], ast.Assign | ast.AnnAssign):
                return self.tree.strings(hit[0], hit[1].value)
        return self.tree.strings(module, value)

    def strings(self, module: str, node: ast.expr, local: dict[str, ast.expr] | None = None,
                depth: int = 0) -> tuple[list[str] | None, bool]:
        """The strings a choices expression holds, and whether running code decides them (a helper's
        result, a list built in add_cli_args)."""
        if depth > 8:
            return None, True
        direct = self.tree.strings(module, node)
        if direct is not None:
            return direct, False
        local = local or {}
        if isinstance(node, ast.Name) and node.id in local:
            values, _ = self.strings(module, local[node.id], local, depth + 1)
            return values, True
        if (class_values := self._class_strings(module, node)) is not None:
            return class_values, False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            (left, dyn_l), (right, dyn_r) = (self.strings(module, node.left, local, depth + 1),
                                             self.strings(module, node.right, local, depth + 1))
            return (None if left is None or right is None else left + right), dyn_l or dyn_r
        if isinstance(node, ast.Call):
            if call_name(node) in {"set", "list", "sorted", "tuple"} and node.args:
                return self.strings(module, node.args[0], local, depth + 1)
            if isinstance(node.func, ast.Name) and not node.args:
                hit = self.tree.lookup(module, node.func.id)
                if hit and isinstance(hit[1], ast.FunctionDef):
                    return self._function_strings(hit[0], hit[1]), True
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            # [m.name.lower() for m in _modes()]
            element, generator = node.elt, node.generators[0]
            lower = isinstance(element, ast.Call) and call_name(element) == "lower"
            base = element.func.value if lower and isinstance(element, ast.Call) and isinstance(
                element.func, ast.Attribute) else element
            if isinstance(base, ast.Attribute) and base.attr == "name" and not generator.ifs:
                members, _ = self.strings(module, generator.iter, local, depth + 1)
                if members is not None:
                    return [m.lower() if lower else m for m in members], True
        return None, True

    def choice_list(self, option: _Option, module: str, node: ast.expr, local: dict[str, ast.expr] | None = None,
                    mutated: dict[str, list[str]] | None = None) -> None:
        values, dynamic = self.strings(module, node, local)
        if values is None:
            option.notes.append(f"choices computed at run time: {ast.unparse(node)}")
            self.unresolved.append(f"{option.flag}: choices {ast.unparse(node)} ({option.where})")
            return
        option.choices = values
        if isinstance(node, ast.Name) and node.id.isupper() and not (local and node.id in local):
            self.list_sources[option.flag] = node.id
        if dynamic:
            option.notes.append(f"choices computed when add_cli_args runs: {ast.unparse(node)}")
            self.unresolved.append(f"{option.flag}: choices computed when add_cli_args runs ({ast.unparse(node)}); "
                                   f"the catalog holds what the source lists ({option.where})")
        for name, added in (mutated or {}).items():
            if local and name in local and isinstance(node, ast.Name) and node.id == name:
                option.notes.append(f"also {', '.join(added)} when add_cli_args' condition holds")
                self.unresolved.append(f"{option.flag}: {', '.join(added)} added to its choices only when "
                                       f"an env var is set at parse time ({option.where})")

    # --- the namespace fields --------------------------------------------------------------------

    def namespaces(self) -> list[tuple[str, ast.ClassDef]]:
        module = self.tree.module(SERVER_ARGS)
        if module is None:
            raise LookupError("sglang/srt/server_args.py")
        listed = next((stmt.value for stmt in SourceTree.top_level(module) if isinstance(stmt, ast.Assign)
                       and any(isinstance(t, ast.Name) and t.id == NAMESPACES for t in stmt.targets)), None)
        if not isinstance(listed, ast.List | ast.Tuple):
            raise LookupError(f"sglang/srt/server_args.py {NAMESPACES}")
        found: list[tuple[str, ast.ClassDef]] = []
        for element in listed.elts:
            hit = self.tree.find_class(SERVER_ARGS, dotted(element))
            if hit is None:
                raise LookupError(f"the namespace class {ast.unparse(element)}")
            found.append(hit)
        own = self.tree.find_class(SERVER_ARGS, "ServerArgs")
        if own is not None:  # fields ServerArgs declares itself come after the namespaces'
            found.append(own)
        return found

    def field_option(self, module: str, name: str, stmt: ast.AnnAssign) -> _Option | None:
        """The option add_cli_args_from_dataclass registers for one field, or None (no Arg, no_cli)."""
        tree = self.tree
        annotation = stmt.annotation
        if not (isinstance(annotation, ast.Subscript) and last_name(annotation.value) in {"A", "Annotated"}
                and isinstance(annotation.slice, ast.Tuple)):
            return None
        raw, *metadata = annotation.slice.elts
        arg: dict[str, ast.expr] | None = None
        for meta in metadata:
            if isinstance(meta, ast.Call) and call_name(meta) == "Arg":
                arg = keywords(meta)
                break
            if tree.text_of(module, meta) is not None:
                arg = {"help": meta}
                break
        if arg is None or ("no_cli" in arg and tree.value(module, arg["no_cli"]) is True):
            return None
        cli_name = tree.value(module, arg["cli_name"]) if "cli_name" in arg else "--" + name.replace("_", "-")
        aliases = tree.value(module, arg["aliases"]) if "aliases" in arg else []
        if not isinstance(cli_name, str) or not isinstance(aliases, list):
            self.unresolved.append(f"{name}: option strings {ast.unparse(annotation)} ({self.where(module, stmt)})")
            return None
        option = _Option([cli_name, *aliases], self.where(module, stmt), config_field=f"ServerArgs.{name}")
        has_default = stmt.value is not None
        option.default = tree.value(module, stmt.value) if has_default else None
        help_text = tree.text_of(module, arg.get("help"))
        option.deprecation = _deprecation(help_text)
        inner = _unwrap_optional(raw)
        parser = arg.get("type_parser")

        if "action" in arg:
            self.action(option, module, arg["action"], arg.get("action_kwargs"))
            return option
        if isinstance(inner, ast.Subscript) and last_name(inner.value) == "Literal":
            literal = list(inner.slice.elts) if isinstance(inner.slice, ast.Tuple) else [inner.slice]
            first = literal[0] if literal else None
            kind = type(first.value).__name__ if isinstance(first, ast.Constant) else "str"
            option.type = _SCALARS.get(kind, "str") if kind != "bool" else "str"
            if parser is not None:
                self.converter(option, module, parser, inner)
            if "choices" in arg:
                self.choice_list(option, module, arg["choices"])
            else:
                values = [e.value for e in literal if isinstance(e, ast.Constant)]
                if None in values:  # argparse compares the converted text: no command line gives None
                    option.notes.append("Literal lists None: only the default can be None")
                option.choices = [str(v) for v in values if v is not None]
            return option
        if _is_list(inner) and parser is None:
            assert isinstance(inner, ast.Subscript)
            option.type, option.item_type = "list", _scalar(inner.slice)
            nargs = tree.value(module, arg["nargs"]) if "nargs" in arg else "+"
            option.notes.append(f"nargs {nargs}")
            if "choices" in arg:
                self.choice_list(option, module, arg["choices"])
            return option
        if isinstance(inner, ast.Name) and inner.id == "bool":
            option.type, option.store_true = "bool", True
            return option
        option.type = _scalar(inner)
        if parser is not None:
            self.converter(option, module, parser, inner)
        if "choices" in arg:
            self.choice_list(option, module, arg["choices"])
        if "nargs" in arg:
            nargs = tree.value(module, arg["nargs"])
            if nargs in ("+", "*"):
                option.item_type, option.type = option.type, "list"
            option.notes.append(f"nargs {nargs}" + (f", const {tree.value(module, arg['const'])!r}"
                                                      if "const" in arg else ""))
        required = tree.value(module, arg["required"]) if "required" in arg else None
        option.required = required is True or (required is None and not has_default)
        return option

    def converter(self, option: _Option, module: str, node: ast.expr, annotation: ast.expr) -> None:
        """`type_parser=`: json.loads, or one of the package's functions (human_readable_int -> int)."""
        name = last_name(node)
        hit = self.tree.lookup(module, name) if isinstance(node, ast.Name) else None
        function = hit[1] if hit and isinstance(hit[1], ast.FunctionDef) else None
        parses_json = "loads" in ast.unparse(node) or (function is not None and any(
            isinstance(n, ast.Call) and call_name(n) == "loads" for n in ast.walk(function)))
        if parses_json:
            option.type = "json_list" if _is_list(annotation) else "json"
        elif function is not None and function.returns is not None:
            returned = last_name(_unwrap_optional(function.returns))
            option.type = _SCALARS.get(returned, "json" if returned in {"Dict", "dict"} else "str")
        else:
            option.type = "str"
        option.converter = name if function is not None else None

    def action(self, option: _Option, module: str, node: ast.expr, extra: ast.expr | None) -> None:
        name = last_name(node)
        text = node.value if isinstance(node, ast.Constant) else name
        if text == "store_true":
            option.type, option.store_true = "bool", True
            if not isinstance(option.default, bool) and option.default is None:
                option.default = False
        elif text == "BooleanOptionalAction":
            option.type, option.boolean_optional = "bool", True
        elif isinstance(text, str) and text.endswith("StoreTrueAction"):  # DeprecatedStoreTrueAction
            option.type, option.store_true = "bool", True
            option.default = False if option.default is None else option.default
        else:
            # action_kwargs={"type": str, "nargs": "*"}: a dict literal (its values are not all JSON)
            kwargs = {k.value: v for k, v in zip(extra.keys, extra.values, strict=True)
                      if isinstance(k, ast.Constant)} if isinstance(extra, ast.Dict) else {}
            nargs = self.tree.value(module, kwargs["nargs"]) if "nargs" in kwargs else None
            option.type = "list" if nargs in ("+", "*") else "str"
            option.item_type = "str" if option.type == "list" else None
            option.notes.append(f"parsed by the package's {name}" + (f", nargs {nargs}" if nargs else ""))

    # --- add_cli_args's own registrations --------------------------------------------------------

    def explicit(self, function: ast.FunctionDef) -> list[_Option]:
        local: dict[str, ast.expr] = {}
        mutated: dict[str, list[str]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                local[node.targets[0].id] = node.value
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in
                    {"add", "append", "extend"} and isinstance(node.func.value, ast.Name) and node.args):
                added = self.tree.strings(SERVER_ARGS, node.args[0])
                mutated.setdefault(node.func.value.id, []).extend(added or [ast.unparse(node.args[0])])
        options: list[_Option] = []
        calls = sorted((n for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                        and n.func.attr == "add_argument"), key=lambda n: n.lineno)
        for call in calls:
            strings = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not strings:
                continue
            option = _Option(strings, self.where(SERVER_ARGS, call))
            kw = keywords(call)
            dest = (self.tree.value(SERVER_ARGS, kw["dest"]) if "dest" in kw
                    else option.flag.lstrip("-").replace("-", "_"))
            option.config_field = f"ServerArgs.{dest}" if dest in self.defaults else None
            default = kw.get("default")
            if isinstance(default, ast.Call) and call_name(default) == "_declared_default" and default.args:
                option.default = self.defaults.get(self.tree.value(SERVER_ARGS, default.args[0]))
            elif default is not None:
                option.default = self.tree.value(SERVER_ARGS, default)
            if "type" in kw:
                option.type = _SCALARS.get(last_name(kw["type"]), "str")
            if "action" in kw:
                self.action(option, SERVER_ARGS, kw["action"], None)
            if "choices" in kw:
                self.choice_list(option, SERVER_ARGS, kw["choices"], local, mutated)
            new_flag = self.tree.value(SERVER_ARGS, kw["new_flag"]) if "new_flag" in kw else None
            help_text = self.tree.text_of(SERVER_ARGS, kw.get("help"))
            option.deprecation = _deprecation(help_text, new_flag if isinstance(new_flag, str) else None)
            options.append(option)
        return options

    def read(self) -> list[_Option]:
        options: list[_Option] = []
        for module, cls in self.namespaces():
            for stmt in cls.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                if "ClassVar" in ast.unparse(stmt.annotation):
                    continue
                name = stmt.target.id
                self.defaults[name] = self.tree.value(module, stmt.value) if stmt.value is not None else None
                if (option := self.field_option(module, name, stmt)) is not None:
                    options.append(option)
        server_args = self.tree.find_class(SERVER_ARGS, "ServerArgs")
        add_cli_args = next((f for f in server_args[1].body if isinstance(f, ast.FunctionDef)
                             and f.name == "add_cli_args"), None) if server_args else None
        if add_cli_args is None:
            raise LookupError("sglang/srt/server_args.py ServerArgs.add_cli_args")
        return options + self.explicit(add_cli_args)


def _finish(option: _Option) -> EngineOption:
    negatives = sorted("--no-" + s[2:] for s in option.strings if s.startswith("--")) if option.boolean_optional else []
    default, default_expr = option.default, None
    if isinstance(option.default, Unknown):
        default, default_expr = None, option.default.expr
    deprecated = dict.fromkeys([*option.strings, *negatives], option.deprecation) if option.deprecation else {}
    choices = tuple(sorted(set(option.choices))) if option.choices else None
    return EngineOption(
        strings=tuple(sorted(option.strings)), negatives=tuple(negatives), deprecated=deprecated, type=option.type,
        item_type=option.item_type, converter=option.converter, choices=choices,
        choices_enforced_by_argparse=True if choices else None, default=default, default_expr=default_expr,
        config_field=option.config_field, defined_in=option.where, required=option.required or None,
        boolean_optional=option.boolean_optional or None, store_true=option.store_true or None,
        notes=tuple(sorted(option.notes)))


def extract_options(tree: SourceTree) -> SglangOptions:
    reader = _Reader(tree)
    raw = reader.read()
    options: dict[str, EngineOption] = {}
    owner: dict[str, str] = {}
    unresolved = list(reader.unresolved)
    for option in raw:
        record = _finish(option)
        for string in record.all_strings:
            if string in owner:  # argparse refuses to start on a conflicting option string
                unresolved.append(f"{string}: registered by {owner[string]} and {option.flag} ({option.where})")
            owner.setdefault(string, option.flag)
        if option.flag in options:
            continue
        options[option.flag] = record
    return SglangOptions(options=dict(sorted(options.items())), fields=tuple(sorted(reader.defaults)),
                         unresolved=tuple(sorted(set(unresolved))), list_sources=reader.list_sources)
