"""Reading a package's Python source statically: modules by name, names followed through imports,
literal values, enum members, dataclass fields. Nothing is imported or executed."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 12


class Unknown:
    """A value that cannot be known without running the code; keeps its source text."""

    __slots__ = ("expr",)

    def __init__(self, expr: str) -> None:
        self.expr = expr

    def __repr__(self) -> str:
        return f"Unknown({self.expr!r})"


def dotted(node: ast.AST | None) -> str:
    """`a.b.c` for a name or attribute chain, "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def last_name(node: ast.AST | None) -> str:
    """The last part of a dotted name, also of a call's function (`@config(...)` -> config)."""
    if isinstance(node, ast.Call):
        node = node.func
    return dotted(node).rsplit(".", 1)[-1]


def call_name(node: ast.AST) -> str:
    return last_name(node.func) if isinstance(node, ast.Call) else ""


def keywords(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg}


@dataclass(frozen=True)
class FieldDecl:
    """A class body's annotated field: where it is declared, its annotation and its value expression."""

    module: str
    annotation: ast.expr
    value: ast.expr | None


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Pow: operator.pow,
    ast.FloorDiv: operator.floordiv, ast.LShift: operator.lshift,
}
_FACTORIES: dict[str, Any] = {"list": [], "dict": {}, "set": [], "tuple": []}
_ENUM_BASES = {"Enum", "StrEnum", "IntEnum", "IntFlag", "Flag"}


def _jsonable(value: Any) -> Any:
    """A literal as JSON data (tuples and sets as sorted lists), or Unknown when JSON cannot hold it."""
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else Unknown(repr(value))
    if isinstance(value, list | tuple):
        items = [_jsonable(v) for v in value]
        return Unknown(repr(value)) if any(isinstance(i, Unknown) for i in items) else items
    if isinstance(value, set | frozenset):
        items = [_jsonable(v) for v in value]
        if any(isinstance(i, Unknown) for i in items):
            return Unknown(repr(value))
        return sorted(items, key=repr)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        out = {k: _jsonable(v) for k, v in value.items()}
        return Unknown(repr(value)) if any(isinstance(v, Unknown) for v in out.values()) else out
    return Unknown(repr(value))


class SourceTree:
    """The .py files of one package, parsed on demand; `used` records which files were read."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = files
        self._parsed: dict[str, ast.Module | None] = {}
        self.used: set[str] = set()
        self.unparsable: set[str] = set()

    # --- modules -----------------------------------------------------------------------------

    def path_of(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self.files:
                return candidate
        return None

    @staticmethod
    def module_name(path: str) -> str:
        return path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")

    def module(self, module: str) -> ast.Module | None:
        path = self.path_of(module)
        if path is None:
            return None
        if path not in self._parsed:
            try:
                self._parsed[path] = ast.parse(self.files[path], filename=path)
            except SyntaxError:
                # Newer syntax than this Python reads: the file is named in the catalog's `unresolved`.
                self._parsed[path] = None
                self.unparsable.add(path)
        self.used.add(path)
        return self._parsed[path]

    @staticmethod
    def top_level(mod: ast.Module) -> Iterator[ast.stmt]:
        """Module statements, with those under top-level `if` / `try` (TYPE_CHECKING, fallbacks)."""
        for stmt in mod.body:
            yield stmt
            if isinstance(stmt, ast.If | ast.Try):
                yield from stmt.body
                yield from stmt.orelse

    def resolve_from(self, module: str, node: ast.ImportFrom) -> str | None:
        if node.level == 0:
            return node.module
        parts = module.split(".")
        is_package = (self.path_of(module) or "").endswith("__init__.py")
        base = parts if is_package else parts[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def imported_modules(self, module: str) -> list[str]:
        mod = self.module(module)
        if mod is None:
            return []
        return [src for node in ast.walk(mod) if isinstance(node, ast.ImportFrom)
                if (src := self.resolve_from(module, node))]

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.stmt] | None:
        """The top-level statement that defines `name` in `module`, following `from x import name`."""
        mod = self.module(module)
        if mod is None or depth > MAX_DEPTH:
            return None
        statements = list(self.top_level(mod))
        for stmt in statements:
            if isinstance(stmt, ast.ClassDef | ast.FunctionDef) and stmt.name == name:
                return module, stmt
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                return module, stmt
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name
                    and stmt.value is not None):
                return module, stmt
        for stmt in statements:
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name and (source := self.resolve_from(module, stmt)):
                        if hit := self.lookup(source, alias.name, depth + 1):
                            return hit
        return None

    def find_class(self, module: str, name: str) -> tuple[str, ast.ClassDef] | None:
        hit = self.lookup(module, name)
        if hit and isinstance(hit[1], ast.ClassDef):
            return hit[0], hit[1]
        return None

    def find_class_anywhere(self, name: str, under: str) -> tuple[str, ast.ClassDef] | None:
        """The first module below `under` (a path prefix) that defines class `name` (text filter first)."""
        for path in sorted(self.files):
            if path.startswith(under) and f"class {name}" in self.files[path]:
                if found := self.find_class(self.module_name(path), name):
                    return found
        return None

    # --- classes -----------------------------------------------------------------------------

    @staticmethod
    def is_enum(cls: ast.ClassDef) -> bool:
        return any(last_name(base) in _ENUM_BASES for base in cls.bases)

    def enum_members(self, cls: ast.ClassDef) -> dict[str, Any]:
        """NAME -> value of an enum's members (Unknown for auto() and computed ones)."""
        members: dict[str, Any] = {}
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if not name.startswith("_"):
                    members[name] = self._literal(stmt.value)
        return members

    def is_dataclass(self, module: str, cls: ast.ClassDef) -> bool:
        """@dataclass, or a decorator that is itself marked @dataclass_transform (vLLM's @config)."""
        for decorator in cls.decorator_list:
            name = last_name(decorator)
            if name == "dataclass":
                return True
            hit = self.lookup(module, name)
            if hit and isinstance(hit[1], ast.FunctionDef) and any(
                    last_name(d) == "dataclass_transform" for d in hit[1].decorator_list):
                return True
        return False

    def class_fields(self, module: str, name: str, depth: int = 0) -> dict[str, FieldDecl]:
        """Annotated fields of a class and its bases (bases first, as dataclasses order them)."""
        found = self.find_class(module, name)
        if found is None or depth > MAX_DEPTH:
            return {}
        where, cls = found
        fields: dict[str, FieldDecl] = {}
        for base in cls.bases:
            if isinstance(base, ast.Name):
                fields.update(self.class_fields(where, base.id, depth + 1))
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if "ClassVar" in ast.unparse(stmt.annotation):
                    continue
                fields[stmt.target.id] = FieldDecl(where, stmt.annotation, stmt.value)
        return fields

    def class_attribute(self, module: str, cls: ast.ClassDef, attr: str) -> ast.expr | None:
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr:
                return stmt.value
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets):
                return stmt.value
        for base in cls.bases:
            if isinstance(base, ast.Name) and (found := self.find_class(module, base.id)):
                if (value := self.class_attribute(found[0], found[1], attr)) is not None:
                    return value
        return None

    # --- values ------------------------------------------------------------------------------

    @staticmethod
    def _literal(node: ast.expr) -> Any:
        try:
            return _jsonable(ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return Unknown(ast.unparse(node))

    def value(self, module: str, node: ast.expr | None, depth: int = 0) -> Any:
        """The JSON value `node` has without running anything, else Unknown(its source text). Follows
        module constants, class attributes (`ModelConfig.seed`), enum members, dataclass field()s."""
        if node is None:
            return None
        literal = self._literal(node)
        if not isinstance(literal, Unknown) or depth > MAX_DEPTH:
            return literal

        def again(inner: ast.expr) -> Any:
            return self.value(module, inner, depth + 1)

        if isinstance(node, ast.Name):
            hit = self.lookup(module, node.id)
            if hit and isinstance(hit[1], ast.Assign | ast.AnnAssign):
                return self.value(hit[0], hit[1].value, depth + 1)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found = self.find_class(module, node.value.id)
            if found and self.is_enum(found[1]):
                member = self.enum_members(found[1]).get(node.attr)
                if member is not None:
                    return member
            elif found and (expr := self.class_attribute(found[0], found[1], node.attr)) is not None:
                return self.value(found[0], expr, depth + 1)
        elif isinstance(node, ast.Call) and call_name(node) in {"field", "Field"}:
            kw = keywords(node)
            if "default" in kw:
                return again(kw["default"])
            if node.args and call_name(node) == "Field":
                return again(node.args[0])
            factory = kw.get("default_factory")
            if isinstance(factory, ast.Name) and factory.id in _FACTORIES:
                return _FACTORIES[factory.id]
            if isinstance(factory, ast.Lambda):
                return again(factory.body)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = again(node.left), again(node.right)
            if isinstance(left, int | float | str) and isinstance(right, int | float | str):
                try:
                    return _jsonable(_BINOPS[type(node.op)](left, right))
                except (TypeError, ValueError, OverflowError):
                    pass
        elif isinstance(node, ast.Call) and call_name(node) in _FACTORIES and not node.args and not node.keywords:
            return _FACTORIES[call_name(node)]
        return Unknown(ast.unparse(node))

    def strings(self, module: str, node: ast.AST | None, depth: int = 0) -> list[str] | None:
        """The strings a choices list or Literal[...] spells (followed through names, enums, get_args,
        concatenation); None when they cannot be read statically."""
        if node is None or depth > MAX_DEPTH:
            return None

        def again(inner: ast.AST) -> list[str] | None:
            return self.strings(module, inner, depth + 1)

        if isinstance(node, ast.Constant):
            return [node.value] if isinstance(node.value, str) else [str(node.value)] if isinstance(
                node.value, int) and not isinstance(node.value, bool) else []
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            out: list[str] = []
            for element in node.elts:
                part = again(element.value if isinstance(element, ast.Starred) else element)
                if part is None:
                    return None
                out += part
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.BitOr):
            left, right = again(node.left), again(node.right)
            if isinstance(node.op, ast.BitOr):  # a type union: members that are no literal add nothing
                return (left or []) + (right or [])
            return None if left is None or right is None else left + right
        if isinstance(node, ast.Subscript):
            head = last_name(node.value)
            if head in {"Literal", "Optional", "Union"}:
                return again(node.slice)
            if head == "Annotated" and isinstance(node.slice, ast.Tuple) and node.slice.elts:
                return again(node.slice.elts[0])
            return None
        if isinstance(node, ast.Call):
            if call_name(node) in {"get_args", "list", "tuple", "sorted", "set"} and node.args:
                return again(node.args[0])
            return None
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            return self._enum_comprehension(module, node)
        if isinstance(node, ast.Name):
            if node.id in {"str", "int", "float", "bool", "None", "dict", "list"}:
                return []
            hit = self.lookup(module, node.id)
            if hit and isinstance(hit[1], ast.Assign | ast.AnnAssign):
                return self.strings(hit[0], hit[1].value, depth + 1)
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found = self.find_class(module, node.value.id)
            if found:
                member = self.enum_members(found[1]).get(node.attr)
                return [member] if isinstance(member, str) else None
        return None

    def _enum_comprehension(self, module: str, node: ast.ListComp | ast.GeneratorExp | ast.SetComp) -> list[str] | None:
        """[m.value for m in SomeEnum] / [m.name for m in SomeEnum]."""
        generator, element = node.generators[0], node.elt
        if (generator.ifs or not isinstance(element, ast.Attribute) or not isinstance(generator.iter, ast.Name)):
            return None
        found = self.find_class(module, generator.iter.id)
        if found is None:
            return None
        members = self.enum_members(found[1])
        if element.attr == "name":
            return list(members)
        if element.attr == "value" and all(isinstance(v, str) for v in members.values()):
            return [str(v) for v in members.values()]
        return None

    def text_of(self, module: str, node: ast.AST | None, depth: int = 0) -> str | None:
        """A string expression's text (constants, names of constants, `+` and implicit concatenation;
        f-string parts that are not constant become `{...}`)."""
        if node is None or depth > MAX_DEPTH:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(str(v.value) if isinstance(v, ast.Constant) else "{...}" for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.text_of(module, node.left, depth + 1), self.text_of(module, node.right, depth + 1)
            return None if left is None or right is None else left + right
        if isinstance(node, ast.Name):
            hit = self.lookup(module, node.id)
            if hit and isinstance(hit[1], ast.Assign | ast.AnnAssign):
                return self.text_of(hit[0], hit[1].value, depth + 1)
        return None
