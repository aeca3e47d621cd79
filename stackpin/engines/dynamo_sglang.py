"""What `python -m dynamo.sglang` does with SGLang's own parser, read from the ai-dynamo wheel's source.

The worker parses its command line twice (dynamo/sglang/args.py `parse_args`): Dynamo's options with
`parse_known_args`, then the rest with a second parser that SGLang's `ServerArgs.add_cli_args` fills.
Between the two it changes that parser and the remaining arguments; each change is read here from its
source, with its file:line, never assumed:

- the SGLang call that registers the engine's options (`engine_parser`), named through the import;
- options a package function adds to that parser (`add_sglang_cli_compat`: a spelling SGLang dropped),
  with the `if ...: return` guard it is added under;
- values appended to an SGLang option's choices in a loop over the parser's `_actions` (`gms`);
- `--disaggregation-mode` values rewritten before SGLang sees them (`agg`, `pd` -> `null`) or taken out
  (`encode`: the worker's own multimodal encode role).
"""

from __future__ import annotations

import ast
import copy

from stackpin.catalog.engine_data import EngineOption, EntryPoint, SglangWorker
from stackpin.engines.pysource import SourceTree, Unknown, call_name, dotted, keywords

ARGS = "dynamo.sglang.args"
DISAGGREGATION = "--disaggregation-mode"
RULE = ("The SGLang worker (python -m dynamo.sglang) also accepts every SGLang server option ({call}, {at}) of the "
        "SGLang it runs with, after its own options are parsed; worker_sglang lists what it changes in that parser.")


class EngineParser:
    """The facts of one worker's SGLang parser (empty where the source says nothing)."""

    def __init__(self) -> None:
        self.call: str | None = None
        self.options: dict[str, EngineOption] = {}
        self.choices_added: dict[str, tuple[str, ...]] = {}
        self.disaggregation_modes: dict[str, str | None] = {}
        self.at: dict[str, str] = {}


def _imported_as(mod: ast.Module, name: str) -> str | None:
    """`from sglang.srt.server_args import ServerArgs` -> "sglang.srt.server_args.ServerArgs" for `name`."""
    for node in ast.walk(mod):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return f"{node.module}.{alias.name}"
    return None


def _engine_parser_call(mod: ast.Module) -> tuple[ast.FunctionDef, ast.Call, str] | None:
    """The function calling `<imported class>.add_cli_args(<parser>)`, the call and the parser's name."""
    for fn in ast.walk(mod):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_cli_args"
                    and isinstance(node.func.value, ast.Name) and node.args and isinstance(node.args[0], ast.Name)):
                return fn, node, node.args[0].id  # type: ignore[return-value]  # AsyncFunctionDef reads alike
    return None


def _locals(fn: ast.FunctionDef) -> dict[str, ast.expr]:
    return {node.targets[0].id: node.value for node in ast.walk(fn) if isinstance(node, ast.Assign)
            and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}


class _Inline(ast.NodeTransformer):
    """A test with the function's local names spelled out (`legacy_flag` -> its string)."""

    def __init__(self, local: dict[str, ast.expr]) -> None:
        self.local = local

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.local.get(node.id, node)


def _guard(fn: ast.FunctionDef, local: dict[str, ast.expr]) -> str | None:
    """The test of a leading `if <test>: return` (the condition the function adds nothing under)."""
    for stmt in fn.body:
        if isinstance(stmt, ast.If) and len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Return):
            return ast.unparse(_Inline(local).visit(copy.deepcopy(stmt.test)))
    return None


def _added_options(tree: SourceTree, module: str, fn: ast.FunctionDef) -> dict[str, EngineOption]:
    """`parser.add_argument(...)` calls of a package function handed SGLang's parser."""
    path = tree.path_of(module)
    local = _locals(fn)
    guard = _guard(fn, local)
    found: dict[str, EngineOption] = {}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        strings = []
        for arg in node.args:
            value = local.get(arg.id, arg) if isinstance(arg, ast.Name) else arg
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("-"):
                strings.append(value.value)
        if not strings:
            continue
        kw = keywords(node)
        const = tree.value(module, kw["const"]) if "const" in kw else None
        dest = tree.value(module, kw["dest"]) if "dest" in kw else None
        hidden = dotted(kw.get("help")).endswith("SUPPRESS")
        notes = [f"added to SGLang's parser by Dynamo ({path}:{node.lineno})"
                 + (f" unless {guard}" if guard else "")]
        if isinstance(dest, str):
            notes.append(f"sets {dest}" + (f" to {const!r}" if const is not None and not isinstance(const, Unknown)
                                           else ""))
        found[strings[0]] = EngineOption(
            strings=tuple(sorted(strings)), hidden=tuple(sorted(strings)) if hidden else (), defined_in=path,
            type=None if "const" in kw else "str", notes=tuple(notes))
    return found


def _choices_added(tree: SourceTree, fn: ast.FunctionDef, parser: str) -> tuple[dict[str, tuple[str, ...]], int]:
    """`for action in <parser>._actions: if ... == "<dest>" ...: action.choices = list(action.choices) + [...]`."""
    out: dict[str, tuple[str, ...]] = {}
    line = 0
    for loop in ast.walk(fn):
        if not (isinstance(loop, ast.For) and dotted(loop.iter) == f"{parser}._actions"):
            continue
        for test in (n for n in ast.walk(loop) if isinstance(n, ast.If)):
            dests = [c.value for n in ast.walk(test.test) if isinstance(n, ast.Compare)
                     for c in n.comparators if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            for node in ast.walk(test):
                if (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == "choices"
                        and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add)):
                    added = tree.strings("", node.value.right)
                    if added and len(dests) == 1:
                        out[dests[0]] = tuple(added)
                        line = line or node.lineno
    return out, line


def _mode_values(tree: SourceTree, module: str, node: ast.expr) -> list[str] | None:
    """The values an `x in {A, B}` or `x == A` test names; `Enum.MEMBER.value` read as the member's value."""
    elements = node.elts if isinstance(node, ast.Set | ast.Tuple | ast.List) else [node]
    out = []
    for element in elements:
        target = element.value if isinstance(element, ast.Attribute) and element.attr == "value" else element
        value = tree.value(module, target)
        if not isinstance(value, str):
            return None
        out.append(value)
    return out


def _disaggregation_modes(tree: SourceTree, mod: ast.Module) -> tuple[dict[str, str | None], int]:
    """`if mode in {...}: <f>(args, "--disaggregation-mode", "null")` and `if mode == X: ... return
    <f>(args, "--disaggregation-mode")`: value -> what SGLang's parser gets (None: taken out)."""
    out: dict[str, str | None] = {}
    line = 0
    for branch in ast.walk(mod):
        if not (isinstance(branch, ast.If) and isinstance(branch.test, ast.Compare)
                and len(branch.test.ops) == 1 and isinstance(branch.test.ops[0], ast.In | ast.Eq)):
            continue
        for stmt in branch.body:
            call = stmt.value if isinstance(stmt, ast.Assign | ast.Return | ast.Expr) else None
            if not isinstance(call, ast.Call):
                continue
            texts = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not texts or texts[0] != DISAGGREGATION:
                continue
            values = _mode_values(tree, ARGS, branch.test.comparators[0])
            if values is None:
                continue
            becomes = texts[1] if len(texts) > 1 else None
            if becomes is None and not isinstance(stmt, ast.Return):
                continue
            out.update(dict.fromkeys(values, becomes))
            line = line or branch.lineno
    return out, line


def read(tree: SourceTree) -> EngineParser:
    """The facts of dynamo.sglang's SGLang parser, from dynamo/sglang/args.py and what it calls."""
    facts = EngineParser()
    mod = tree.module(ARGS)
    path = tree.path_of(ARGS)
    if mod is None:
        return facts
    found = _engine_parser_call(mod)
    if found is not None:
        fn, call, parser = found
        owner = call.func.value.id  # type: ignore[attr-defined]  # a Name, checked in _engine_parser_call
        facts.call = f"{_imported_as(mod, owner) or owner}.add_cli_args"
        facts.at["engine_parser"] = f"{path}:{call.lineno}"
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1
                    and isinstance(node.args[0], ast.Name) and node.args[0].id == parser):
                hit = tree.lookup(ARGS, call_name(node))
                if hit and isinstance(hit[1], ast.FunctionDef) and (added := _added_options(tree, hit[0], hit[1])):
                    facts.options.update(added)
                    facts.at["engine_parser_options"] = f"{path}:{node.lineno}"
        facts.choices_added, line = _choices_added(tree, fn, parser)
        if line:
            facts.at["engine_choices_added"] = f"{path}:{line}"
    facts.disaggregation_modes, line = _disaggregation_modes(tree, mod)
    if line:
        facts.at["disaggregation_modes"] = f"{path}:{line}"
    return facts


def worker_section(tree: SourceTree, entry: EntryPoint) -> tuple[SglangWorker, tuple[str, ...]]:
    """The Dynamo catalog's SGLang worker section (its own options, `entry`, and what it does to SGLang's
    parser), and its rule when the worker hands the rest to SGLang's parser (engine_kinds: `dynamo_section`)."""
    parser = read(tree)
    worker = SglangWorker(
        option_strings=entry.option_strings, boolean_optional_options=entry.boolean_optional_options,
        options=entry.options, engine_parser=parser.call, engine_parser_options=dict(sorted(parser.options.items())),
        engine_choices_added=dict(sorted(parser.choices_added.items())),
        disaggregation_modes=dict(sorted(parser.disaggregation_modes.items())), at=dict(sorted(parser.at.items())))
    rule = (RULE.format(call=parser.call, at=parser.at["engine_parser"]),) if parser.call else ()
    return worker, rule
