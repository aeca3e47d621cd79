"""A FlashInfer release's catalog: the FLASHINFER_* environment variables its Python code reads
(`os.environ.get("FLASHINFER_X", default)`, `os.getenv(...)`, `os.environ["FLASHINFER_X"]`,
`"FLASHINFER_X" in os.environ`) and what its metadata requires. FlashInfer has no command line of
its own that a serving stack passes flags to; its knobs reach it through the environment."""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterator
from typing import Any

from stackpin.catalog.engine_data import EnvVar, FlashinferRelease, Source, typed
from stackpin.engines.package import Package
from stackpin.engines.pysource import SourceTree, Unknown, dotted

PREFIX = "FLASHINFER_"
_READERS = {"os.environ.get", "os.getenv", "environ.get", "getenv"}
_NAME = re.compile(r"""["']FLASHINFER_""")
_IN_ENVIRON = re.compile(r"""FLASHINFER_\w+["']\s+(?:not\s+)?in\s+[\w.]*environ""")


def _reads_environment(text: str) -> bool:
    """Whether a file reads a FLASHINFER_ variable: hundreds of files (100 MB of source in 0.7.2)
    merely mention the prefix, and only the readers are worth parsing. Looks around each mention."""
    at = text.find(PREFIX)
    while at != -1:
        before = text[max(0, at - 48):at]
        if "environ" in before or "getenv" in before or _IN_ENVIRON.match(text, at, at + 160):
            return True
        at = text.find(PREFIX, at + 1)
    return False


def _name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(PREFIX):
        return node.value
    return None


def _near(module: ast.Module, lines: list[int]) -> Iterator[ast.AST]:
    """The nodes of `module` whose line span holds one of `lines` (sorted): the files are large, and
    walking only the statements a read sits in is what keeps this fast."""
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is not None and last is not None:
            at = bisect.bisect_left(lines, first)
            if at == len(lines) or lines[at] > last:
                continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _reads(module: ast.Module, text: str) -> list[tuple[str, ast.expr | None]]:
    """(name, default expression) of each environment read in a module."""
    found: list[tuple[str, ast.expr | None]] = []
    lines = sorted({text.count("\n", 0, m.start()) + 1 for m in _NAME.finditer(text)})
    for node in _near(module, lines):
        if isinstance(node, ast.Call) and dotted(node.func) in _READERS and node.args and (name := _name(node.args[0])):
            found.append((name, node.args[1] if len(node.args) > 1 else None))
        elif isinstance(node, ast.Subscript) and dotted(node.value).endswith("environ") and (name := _name(node.slice)):
            found.append((name, None))
        elif (isinstance(node, ast.Compare) and (name := _name(node.left)) and node.comparators
              and dotted(node.comparators[0]).endswith("environ")):
            found.append((name, None))
    return found


def build(package: Package) -> FlashinferRelease:
    tree = SourceTree(package.files)
    defaults: dict[str, set[str]] = {}
    values: dict[str, Any] = {}
    for path in sorted(package.files):
        if not _reads_environment(package.files[path]):
            continue
        module_name = SourceTree.module_name(path)
        module = tree.module(module_name)
        for name, default in _reads(module, package.files[path]) if module else []:
            value = tree.value(module_name, default) if default is not None else None
            shown = value.expr if isinstance(value, Unknown) else repr(value)
            defaults.setdefault(name, set())
            if default is not None:
                defaults[name].add(shown)
                values.setdefault(name, value)
    env: dict[str, EnvVar] = {}
    for name, seen in sorted(defaults.items()):
        value = values.get(name)
        if len(seen) > 1:  # read in several places with different defaults: say so rather than pick one
            env[name] = EnvVar(default_expr=" | ".join(sorted(seen)))
        elif isinstance(value, Unknown):
            env[name] = EnvVar(default_expr=value.expr)
        else:
            env[name] = EnvVar(default=value)
    return typed(FlashinferRelease(
        version=package.version, env_vars=env, requires=package.requires,
        source=Source(package=package.filename, sha256=package.sha256, files_parsed=tuple(sorted(tree.used)))))
