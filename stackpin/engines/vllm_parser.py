"""What vLLM's FlexibleArgumentParser does beyond argparse, read from `vllm/utils/argparse_utils.py`.

- It may register its own action in place of argparse.BooleanOptionalAction
  (`self.register("action", BooleanOptionalAction, EnableDisableAction)` in 0.33.0): that action's
  class-level prefix map (`{"--enable-": "--disable-", "--disable-": "--enable-"}`) names the inverse
  spelling every boolean option also answers to, and when it lists only the registered strings and
  the inverses as visible (`visible_option_strings`) and the parser puts those in place of
  `option_strings` after registering, argparse's `--no-x` forms stay accepted but leave --help.
- Its parse_args folds underscores to dashes before the first dot of a long option, takes
  `--json-option.key value` for one key of a JSON option, and rewrites `-O3` to
  `--optimization-level 3`.
"""

from __future__ import annotations

import ast
import re

from stackpin.catalog.engine_data import ParserRules
from stackpin.engines.pysource import SourceTree, last_name

MODULE = "vllm.utils.argparse_utils"
PARSER = "FlexibleArgumentParser"


def _parser_class(tree: SourceTree) -> tuple[str, ast.ClassDef] | None:
    return tree.find_class(MODULE, PARSER) or tree.find_class_anywhere(PARSER, "vllm/")


def _replacement_action(parser: ast.ClassDef) -> str | None:
    """X in `self.register("action", BooleanOptionalAction, X)`."""
    for node in ast.walk(parser):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                and len(node.args) == 3 and isinstance(node.args[0], ast.Constant) and node.args[0].value == "action"
                and last_name(node.args[1]) == "BooleanOptionalAction" and isinstance(node.args[2], ast.Name)):
            return node.args[2].id
    return None


def _prefix_map(action: ast.ClassDef) -> dict[str, str]:
    """The class-level {"--enable-": "--disable-", ...} of the replacement action."""
    for stmt in action.body:
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Dict) and value.keys:
            pairs = [(k.value, v.value) for k, v in zip(value.keys, value.values, strict=True)
                     if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
            if (len(pairs) == len(value.keys) and all(isinstance(k, str) and isinstance(v, str)
                                                      and k.startswith("--") and v.startswith("--") for k, v in pairs)):
                return {str(k): str(v) for k, v in pairs}
    return {}


def _no_forms_hidden(module: ast.Module, action: ast.ClassDef) -> bool:
    """Whether argparse's --no-x strings leave help once an inverse exists: the action's visible list
    holds its constructor's `option_strings` (the strings as registered) and the inverses, not
    `self.option_strings` (which BooleanOptionalAction extended with --no-x), and something puts the
    visible list in place of `option_strings` after the parser has registered every string."""
    init = next((s for s in action.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is None or len(init.args.args) < 2:
        return False
    registered = init.args.args[1].arg
    visible = None
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "visible_option_strings" for t in node.targets):
            visible = node.value.body if isinstance(node.value, ast.IfExp) else node.value
    if visible is None:
        return False
    names = {n.id for n in ast.walk(visible) if isinstance(n, ast.Name)}
    extended = any(isinstance(n, ast.Attribute) and n.attr == "option_strings" for n in ast.walk(visible))
    swapped = any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
                  and n.value.attr == "visible_option_strings"
                  and any(isinstance(t, ast.Attribute) and t.attr == "option_strings" for t in n.targets)
                  for n in ast.walk(module))
    return registered in names and not extended and swapped


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _calls(fn: ast.AST, attr: str, *args: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
               and [a.value for a in n.args if isinstance(a, ast.Constant)][: len(args)] == list(args)
               for n in ast.walk(fn))


def read_parser(tree: SourceTree) -> tuple[ParserRules, str | None]:
    """The parser's rules, and the package's words on why --no-x stays accepted (its docstring)."""
    found = _parser_class(tree)
    if found is None:
        return ParserRules(), None
    module_name, parser = found
    module = tree.module(module_name)
    assert module is not None  # find_class parsed it
    inverse: dict[str, str] = {}
    hidden, why = False, None
    if (action_name := _replacement_action(parser)) and (action := tree.find_class(module_name, action_name)):
        inverse = _prefix_map(action[1])
        hidden = bool(inverse) and _no_forms_hidden(module, action[1])
        doc = ast.get_docstring(action[1]) or ""
        why = next((" ".join(p.split()) for p in doc.split("\n\n") if "--no-" in p), None)
    parse_args = _method(parser, "parse_args")
    rules = ParserRules(
        underscores_as_dashes=parse_args is not None and _calls(parse_args, "replace", "_", "-"),
        dotted_json_keys=parse_args is not None and any(
            isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant) and n.left.value == "."
            for n in ast.walk(parse_args)),
        optimization_level_shorthand=parse_args is not None and _calls(parse_args, "startswith", "-O"),
        inverse_prefixes=inverse,
        no_forms_hidden_with_inverse=hidden,
    )
    return rules, why


def rule_texts(rules: ParserRules) -> tuple[str, ...]:
    """The rules in words, for people reading the catalog."""
    texts = ["argparse.BooleanOptionalAction registers --no-x beside each long option --x of a boolean "
             "option; each option lists them under `negatives`."]
    if rules.inverse_prefixes:
        pairs = ", ".join(f"{k}x -> {v}x" for k, v in sorted(rules.inverse_prefixes.items()))
        texts.append(f"FlexibleArgumentParser's boolean action also registers the inverse spelling ({pairs}); "
                     "listed under `negatives`.")
    if rules.no_forms_hidden_with_inverse:
        texts.append("Where an inverse exists, the --no-x forms stay accepted but leave --help; they are "
                     "listed as `hidden` and `deprecated` with the inverse as replacement.")
    if rules.underscores_as_dashes:
        texts.append("FlexibleArgumentParser accepts underscores for dashes in long option names.")
    if rules.dotted_json_keys:
        texts.append("FlexibleArgumentParser accepts dotted --x.key=value for one key of a JSON-config option.")
    if rules.optimization_level_shorthand:
        texts.append("FlexibleArgumentParser rewrites -O<n>, -O <n> and -O=<n> to --optimization-level <n>.")
    return tuple(texts)


_OPTION = re.compile(r"--[a-z0-9][a-z0-9-]*[a-z0-9]")


def deprecated_options(text: str) -> list[str]:
    """Option strings a message declares deprecated: those before "is/are deprecated" in its sentence."""
    found: list[str] = []
    for sentence in re.split(r"(?<=\.)\s+", text):
        match = re.search(r"\b(?:is|are)\s+deprecated\b", sentence)
        if match:
            found += _OPTION.findall(sentence[: match.start()])
    return found


def replacement_in(text: str) -> str | None:
    """The option a deprecation message tells users to write instead ("Use --x instead"), if any."""
    match = re.search(r"\b[Uu]se\s+(--[A-Za-z0-9][\w.+-]*[A-Za-z0-9_])", text)
    return match.group(1) if match else None


def removed_in(text: str) -> str | None:
    match = re.search(r"removed in (v?\d+(?:\.\d+)*)", text)
    return match.group(1) if match else None
