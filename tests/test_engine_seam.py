"""How far the serving-engine seam reaches: the code that names an engine outside the engine's own modules.

Issue 38's aim is that only the engine's modules know it. Counted here: every identifier, attribute,
import and string constant (docstrings aside) in stackpin/ that spells `vllm` or `sglang`, outside the
modules whose one job is one engine (ENGINE_OWNED). `tests/data/engine-names.json` holds the count per
file as of the last change that lowered it: a file may name engines less often, never more, and a file not
in it not at all. After lowering a count, write the new baseline with
`python tests/test_engine_seam.py --write` (docs/engines.md, "Where engines are still named").
"""

from __future__ import annotations

import ast
import json
import re
import sys
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "data" / "engine-names.json"
# The engine's own modules: its backend, its release readers and the scripts that run inside its environment.
ENGINE_OWNED = ("stackpin/backends/*", "stackpin/engines/vllm_*.py", "stackpin/engines/sglang_*.py",
                "stackpin/engines/dynamo_sglang.py", "stackpin/enginecheck/check_runtime*.py",
                "stackpin/enginecheck/sglang_check.py",
                "stackpin/enginecheck/vllm_check.py",  # vLLM's check of a lock (check.py: what every engine's shares)
                # The engines' one table for the stages above the seam (catalog, engines cannot import backends):
                # each engine's catalog prefix, release record, distribution, Dynamo worker and release reader.
                "stackpin/catalog/engine_kinds.py")
ENGINE = re.compile(r"vllm|sglang", re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, owners) and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def names_in(source: str) -> int:
    """How many times code (not its docstrings or comments) spells an engine's name."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    spelled: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            spelled.append(node.value)
        elif isinstance(node, ast.Name):
            spelled.append(node.id)
        elif isinstance(node, ast.Attribute):
            spelled.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            spelled.append(node.name)
        elif isinstance(node, ast.alias):
            spelled.append(f"{node.name} {node.asname or ''}")
        elif isinstance(node, ast.ImportFrom):
            spelled.append(node.module or "")
        elif isinstance(node, ast.arg):
            spelled.append(node.arg)
    return sum(1 for text in spelled if ENGINE.search(text))


def counts() -> dict[str, int]:
    found = {}
    for path in sorted((ROOT / "stackpin").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(fnmatch(rel, pattern) for pattern in ENGINE_OWNED):
            continue
        n = names_in(path.read_text(encoding="utf-8"))
        if n:
            found[rel] = n
    return found


def test_names_in_counts_code_not_docstrings() -> None:
    source = '"""About vLLM."""\nimport vllm_thing\nx = "sglang"  # vllm\ndef f(vllm_pin):\n    return y.vllm\n'
    assert names_in(source) == 4


def test_no_module_outside_the_engines_names_an_engine_more_than_it_did() -> None:
    baseline: dict[str, int] = json.loads(BASELINE.read_text(encoding="utf-8"))
    grown = [f"{path}: {n} (was {baseline.get(path, 0)})" for path, n in counts().items() if n > baseline.get(path, 0)]
    assert not grown, ("code outside the engine's modules names an engine more often than before; reach the engine "
                       "through stackpin.backends instead:\n" + "\n".join(grown))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/test_engine_seam.py --write")
    now = counts()
    BASELINE.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{sum(now.values())} names in {len(now)} files outside the engines' own modules")
