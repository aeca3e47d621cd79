"""The Python API (docs/api.md): every public name resolves, `import stackpin` stays cheap, the page's
examples print what it shows, and type checkers see the API typed."""

from __future__ import annotations

import os
import pkgutil
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import stackpin
from tests.helpers import ROOT

DOC = ROOT / "docs" / "api.md"
EXAMPLE = re.compile(r"^```python\n(?P<code>.*?)^```\n\n```text\n(?P<out>.*?)^```$", re.MULTILINE | re.DOTALL)
EXAMPLES = [(m["code"], m["out"]) for m in EXAMPLE.finditer(DOC.read_text(encoding="utf-8"))]
# What the examples read and write, copied fresh for each so that one's promote does not change another's history.
EXAMPLE_DIRS = ("profiles", "lockfiles", "history", "deployments")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STACKPIN_", "PYTHON"))}
    # This tree first, whichever stackpin is installed; revision times (after the committed history's newest: times
    # never go back) and authors fixed; no cache outside.
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "STACKPIN_CACHE_DIR": "",
            "SOURCE_DATE_EPOCH": "1767400000", "STACKPIN_AUTHOR": "Ada Lovelace <ada@example.com>", **extra}


def run_example(code: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run one example of the page in `workdir`, a fresh copy of what the examples use."""
    for name in EXAMPLE_DIRS:
        shutil.copytree(ROOT / name, workdir / name)
    return subprocess.run([sys.executable, "-c", code], cwd=workdir, env=_env(), capture_output=True, text=True,
                          timeout=300)


def test_every_public_name_resolves() -> None:
    assert stackpin.__all__ == sorted(set(stackpin.__all__))
    for name in stackpin.__all__:
        value = getattr(stackpin, name)
        assert value.__module__.startswith("stackpin."), name
        assert value.__doc__ or name[0].isupper(), f"{name} has no docstring"  # docs/api.md shows the types
    namespace: dict[str, object] = {}
    exec("from stackpin import *", namespace)
    assert set(stackpin.__all__) <= set(namespace)
    assert set(stackpin.__all__) <= set(dir(stackpin))


def test_the_errors_are_stackpin_errors() -> None:
    errors = [name for name in stackpin.__all__ if name.endswith("Error") or name == "StackMismatch"]
    assert len(errors) == 8
    for name in errors:
        assert issubclass(getattr(stackpin, name), stackpin.StackpinError), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'lock_profile'"):
        stackpin.lock_profile  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from stackpin import no_such_name", {})


def test_no_public_name_is_a_subpackage_name() -> None:
    """Importing `stackpin.X` sets the package's attribute X to that module: a function named after a
    subpackage would turn into the module as soon as anything imported it."""
    modules = {info.name for info in pkgutil.iter_modules(stackpin.__path__)}
    assert {"validate", "lock", "render", "diff", "history"} <= modules
    assert not modules & set(stackpin.__all__)


def _modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                          env=_env(), capture_output=True, text=True, timeout=120, check=True)
    return set(done.stdout.split())


def test_import_stackpin_loads_nothing_else() -> None:
    """The CLI imports stackpin on every start: the package alone, no pydantic, yaml or typing."""
    added = _modules_after("import stackpin") - _modules_after("pass")
    assert added == {"stackpin"}
    assert _modules_after("import stackpin\nstackpin.StackpinError") - _modules_after("pass") == {
        "stackpin", "stackpin.errors"}


def test_a_name_loads_its_module_when_used() -> None:
    loaded = _modules_after("import stackpin\nstackpin.validate_profiles")
    assert "stackpin.api" in loaded and "msgspec" not in loaded  # the entry point imports on call
    assert "stackpin.lock.lockfile" in _modules_after("import stackpin\nstackpin.StackLock")


def test_the_page_has_an_example_for_each_entry_point() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert text.count("```python") == len(EXAMPLES)  # every example shows its output
    code = "".join(c for c, _ in EXAMPLES)
    entry_points = [name for name in stackpin.__all__ if name[0].islower()]
    assert [name for name in entry_points if f"stackpin.{name}(" not in code] == []


@pytest.mark.parametrize(("code", "out"), EXAMPLES, ids=[f"example{i}" for i in range(1, len(EXAMPLES) + 1)])
def test_each_example_prints_what_the_page_shows(code: str, out: str, tmp_path: Path) -> None:
    done = run_example(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == out


GOOD = """\
from pathlib import Path

import stackpin
from stackpin import CheckResult, HistoryStore, Locked, RenderedStack, Severity, StackDiff, StackLock


def check(paths: list[Path]) -> bool:
    result: CheckResult = stackpin.validate_profiles(paths, upgrade_to=None)
    return not result.failed(Severity.warning) and all(r.count(Severity.error) == 0 for r in result.reports)


def pin(path: str) -> list[str]:
    written: list[Locked] = stackpin.lock_profiles(path, Path("lockfiles"), offline=True, on_note=print)
    return [lock.stack_digest for _, lock in written]


def manifests(lock: StackLock) -> list[str]:
    stacks: list[RenderedStack] = stackpin.render_locks([lock], output_dir="manifests")
    return [str(obj["kind"]) for stack in stacks for obj in stack.objects()]


def change(a: str, b: StackLock, store: HistoryStore) -> str:
    diff: StackDiff = stackpin.diff_stacks(a, b, history=store)
    return diff.one_line()


def record(lock: StackLock) -> int:
    store = stackpin.open_history("history")
    entries = stackpin.list_revisions(store, "dsv41-flash")
    recorded = stackpin.promote(lock, "why", store, Path("deployments"), allow_same=True)
    return recorded.revision.revision + len(entries) + len(stackpin.load_profile("p.yaml").profile.name)


try:
    record(stackpin.read_lock("l.yaml"))
except stackpin.StackpinError as exc:
    print(exc.hint or exc.message, exc.exit_code + 0)
"""

BAD = """\
import stackpin

result = stackpin.validate_profiles("profiles", upgrade_to=33)
name: int = stackpin.read_lock("l.yaml").metadata.name
stackpin.render_locks("lockfiles/gb300-tuned.lock.yaml")
stackpin.lock_profile("profiles")
"""


def test_mypy_sees_the_api_typed(tmp_path: Path) -> None:
    """A user's script type-checks against the API under mypy --strict (py.typed), and its mistakes
    (wrong argument types, a wrong result type, a misspelt name) are errors, not Any."""
    (tmp_path / "good.py").write_text(GOOD, encoding="utf-8")
    (tmp_path / "bad.py").write_text(BAD, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--show-error-codes",
                           "--cache-dir", os.devnull, "good.py", "bad.py"],
                          cwd=tmp_path, env=_env(MYPYPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1, done.stdout + done.stderr
    assert [line for line in errors if not line.startswith("bad.py:")] == [], done.stdout
    assert len(errors) == 4, done.stdout
    expected = ["bad.py:3: error: Argument \"upgrade_to\"", "bad.py:4: error: Incompatible types in assignment",
                "bad.py:5: error: Argument 1 to \"render_locks\"", "bad.py:6: error: Module has no attribute"]
    for line, start in zip(sorted(errors), expected, strict=True):
        assert line.startswith(start), textwrap.indent(done.stdout, "  ")
