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
# Top to bottom: each stage may import the ones before it. errors, yamlio and extras are shared leaves.
STAGES = ("catalog", "engines", "profile", "validate", "examples", "lock", "imports", "autotune", "render",
          "enginecheck", "history", "diff", "deploy", "bench", "sim", "plan", "report", "demo", "api", "cli")
LEAVES = ("errors", "yamlio", "extras")


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
