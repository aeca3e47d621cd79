"""What value an option built from a config field takes, read from the field's annotation.

vLLM builds most options from config dataclass fields (`get_kwargs(CacheConfig)`): its
`_compute_kwargs` turns each field's type hints into argparse keywords. `classify` follows the same
order of tests on the annotation's source text, so a field typed `bool | None` is a
BooleanOptionalAction, `Literal[...] | str` lists its values without argparse enforcing them, and a
config dataclass is a JSON option whose fields `config_class` names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from stackpin.catalog.engine_data import OptionType
from stackpin.engines.pysource import MAX_DEPTH, SourceTree, last_name

_BUILTIN = {"bool", "str", "int", "float", "dict", "list", "tuple", "set", "None", "bytes", "object", "type"}
_COLLECTIONS = ("tuple", "list", "set")
_SCALARS: dict[str, OptionType] = {"int": "int", "float": "float", "str": "str", "bool": "bool"}


@dataclass(frozen=True)
class Member:
    """One member of a type union: its head name (`bool`, `Literal`, `list`, a class) and where it is."""

    head: str
    node: ast.expr
    module: str


@dataclass(frozen=True)
class TypeInfo:
    type: OptionType | None
    choices: tuple[str, ...] | None = None
    choices_enforced: bool | None = None
    config_class: str | None = None
    config_module: str | None = None
    item_type: str | None = None

    @property
    def is_bool(self) -> bool:
        return self.type == "bool"


def members(tree: SourceTree, module: str, annotation: ast.expr, depth: int = 0) -> list[Member]:
    """The union members of an annotation, through Optional/Union/Annotated and type aliases."""
    if depth > MAX_DEPTH:
        return [Member(ast.unparse(annotation), annotation, module)]

    def again(node: ast.expr, where: str = module) -> list[Member]:
        return members(tree, where, node, depth + 1)

    if isinstance(annotation, ast.Constant):
        if annotation.value is None:
            return [Member("None", annotation, module)]
        if isinstance(annotation.value, str):  # a string annotation
            try:
                return again(ast.parse(annotation.value, mode="eval").body)
            except SyntaxError:
                return [Member(annotation.value, annotation, module)]
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return again(annotation.left) + again(annotation.right)
    if isinstance(annotation, ast.Subscript):
        head = last_name(annotation.value)
        inner = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if head in {"Optional", "Union"}:
            found = [m for element in inner for m in again(element)]
            return found + ([Member("None", annotation, module)] if head == "Optional" else [])
        if head == "Annotated":
            return again(inner[0])
        return [Member(head, annotation, module)]
    if isinstance(annotation, ast.Name | ast.Attribute):
        name = last_name(annotation)
        if name in _BUILTIN:
            return [Member(name, annotation, module)]
        hit = tree.lookup(module, name) if isinstance(annotation, ast.Name) else None
        if hit and isinstance(hit[1], ast.Assign | ast.AnnAssign) and hit[1].value is not None:
            value = hit[1].value
            if isinstance(value, ast.Subscript | ast.BinOp | ast.Name | ast.Attribute):  # a type alias
                return again(value, hit[0])
        return [Member(name, annotation, hit[0] if hit else module)]
    return [Member(ast.unparse(annotation), annotation, module)]


def _literal_choices(tree: SourceTree, member: Member) -> tuple[tuple[str, ...], OptionType]:
    values = tree.strings(member.module, member.node) or []
    first = member.node.slice.elts[0] if isinstance(member.node, ast.Subscript) and isinstance(
        member.node.slice, ast.Tuple) else member.node.slice if isinstance(member.node, ast.Subscript) else None
    is_int = isinstance(first, ast.Constant) and isinstance(first.value, int) and not isinstance(first.value, bool)
    return tuple(sorted(set(values))), "int" if is_int else "str"


def classify(tree: SourceTree, module: str, annotation: ast.expr) -> TypeInfo:
    """The option type vLLM's _compute_kwargs gives a field of this annotation."""
    found = members(tree, module, annotation)
    heads = {m.head for m in found}
    dict_like = False
    for member in found:
        if member.head in _BUILTIN or member.head in {"Literal", "Any"}:
            continue
        cls = tree.find_class(member.module, member.head)
        if cls is None:
            continue
        if tree.is_dataclass(cls[0], cls[1]):
            return TypeInfo("json", config_class=member.head, config_module=cls[0])
        # Subclasses of dict are CLI dicts; TypedDicts are not (no class checks on them).
        dict_like |= any(last_name(base) == "dict" for base in cls[1].bases)
    if dict_like:
        heads = (heads - {m.head for m in found if m.head not in _BUILTIN}) | {"dict"}
    non_builtin = any(h not in _BUILTIN for h in heads)
    if heads == {"bool", "str", "None"}:
        return TypeInfo("bool_or_str")
    if "bool" in heads:
        return TypeInfo("bool")
    if "Literal" in heads:
        literals = [_literal_choices(tree, m) for m in found if m.head == "Literal"]
        choices = tuple(sorted({c for values, _ in literals for c in values}))
        kind = literals[0][1]
        # A Literal beside `str` becomes a metavar: argparse shows the values and accepts any string.
        return TypeInfo(kind, choices=choices or None, choices_enforced="str" not in heads)
    for collection in _COLLECTIONS:
        held = next((m for m in found if m.head == collection), None)
        if held is None:
            continue
        if isinstance(held.node, ast.Subscript):
            item = held.node.slice.elts[0] if isinstance(held.node.slice, ast.Tuple) else held.node.slice
            inner = classify(tree, held.module, item)
            return TypeInfo("list", choices=inner.choices, choices_enforced=inner.choices_enforced,
                            item_type=inner.type or ast.unparse(item))
        return TypeInfo("list")
    if "int" in heads:
        return TypeInfo("int")
    if "float" in heads:
        return TypeInfo("float")
    if "dict" in heads:
        return TypeInfo("json_or_str" if "str" in heads or non_builtin else "json")
    if "str" in heads or non_builtin:
        return TypeInfo("str")
    return TypeInfo(None)


def converter_type(tree: SourceTree, module: str, node: ast.expr) -> OptionType | None:
    """The type an argparse `type=` converter gives: a builtin, json.loads, or a function of the
    package read by its return annotation (`human_readable_int(value: str) -> int`)."""
    text = ast.unparse(node)
    if "json.loads" in text:
        return "json"
    name = last_name(node)
    if name in _SCALARS:
        return _SCALARS[name]
    hit = tree.lookup(module, name) if isinstance(node, ast.Name) else None
    if hit and isinstance(hit[1], ast.FunctionDef) and hit[1].returns is not None:
        return classify(tree, hit[0], hit[1].returns).type
    return None
