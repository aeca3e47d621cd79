"""The package tree is the pipeline: a stage imports only stages above it (and the shared leaves).

Held over every import in stackpin/, function-level and TYPE_CHECKING ones included, so a lazy
import cannot hide a dependency that points the wrong way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stackpin"
# Top to bottom: each stage may import the ones before it. errors, yamlio, jsonio, records, models, extras,
# version and children are shared leaves.
STAGES = ("catalog", "engines", "profile", "rules", "backends", "validate", "examples", "lock", "autotune", "render",
          "enginecheck", "history", "diff", "deploy", "site", "bench", "sim", "plan", "upgrade", "rollout", "search",
          "report", "demo", "imports", "api", "cli")
LEAVES = ("errors", "yamlio", "jsonio", "records", "models", "extras", "version", "children")


def _stage(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("stackpin."):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("stackpin.")]
    return found


def test_only_packages_and_shared_leaves_sit_in_stackpin() -> None:
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__", *LEAVES}
    assert not loose, f"modules outside a stage package: {sorted(loose)}"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(STAGES), "a new package needs a place in STAGES"
    for name in packages:
        assert (PACKAGE / name / "README.md").is_file(), f"stackpin/{name} has no README"


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_only_stages_above_it(stage: str) -> None:
    allowed = set(STAGES[: STAGES.index(stage) + 1]) | set(LEAVES)
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {module}"
             for path in sorted((PACKAGE / stage).rglob("*.py"))
             for line, module in _imports(path) if _stage(module) not in allowed]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("leaf", LEAVES)
def test_shared_leaves_import_no_stage(leaf: str) -> None:
    stages = {_stage(m) for _, m in _imports(PACKAGE / f"{leaf}.py")} - set(LEAVES)
    assert not stages, f"stackpin/{leaf}.py imports {sorted(stages)}"


def test_bench_scripts_do_not_import_test_helpers() -> None:
    for path in sorted((ROOT / "bench").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [n for n in names if n == "tests" or n.startswith("tests.")], path.name


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the stackpin modules it imports anywhere (function-level and TYPE_CHECKING included);
    `from package import submodule` counts as importing the submodule."""
    paths = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against the importing module's package
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets.add(base)
                targets.update(f"{base}.{a.name}" for a in node.names)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_among_stackpin_modules() -> None:
    graph = _import_graph()
    assert "stackpin.validate.autotune" in graph["stackpin.validate"]  # a function-level `from pkg import mod`
    cycles = _cycles(graph)
    assert not cycles, "import cycles (break each: move what both sides need into a module of its own):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)
