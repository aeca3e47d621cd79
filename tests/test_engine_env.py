"""Building the engine check's environment (`stackpin engines setup-check`, stackpin/enginecheck/envbuild.py).

The real build downloads about 2 GB, so it is not run here: the shipped recipe is checked against what the
existing environment was built from (its stamp), and the build's own steps (venv, pip, smoke test, stamp, the
cleanup of a failed build) run for real on a recipe with no packages, which pip installs from nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stackpin.enginecheck.envbuild import (
    EngineEnvError,
    Recipe,
    build,
    default_engine,
    default_venv,
    engine_python,
    engines,
    is_current,
    recipe,
    venv_python,
)
from tests.lockkit import ROOT
from tests.ownenv import own_env

ENV = ROOT / ".enginecheck" / "vllm-0.31.0"


def test_the_shipped_recipe_is_package_data() -> None:
    """The requirements list and environments.json travel in the wheel (pyproject's package-data)."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["stackpin"]
    plan = recipe("0.31.0")
    assert plan.requirements.endswith(".txt") and "enginecheck/*.txt" in patterns
    assert "enginecheck/*.json" in patterns
    assert plan.first == ("torch==2.13.0",) and "vllm==0.31.0" in plan.requirements_text.splitlines()
    with pytest.raises(EngineEnvError, match=r"no engine check environment for vLLM 9\.9 .*\(shipped: 0\.31\.0\)"):
        recipe("9.9")


def test_the_engines_environments_json_names_are_the_backends() -> None:
    """envbuild runs before stackpin's own environment exists (standard library only), so environments.json
    repeats what the backends know: the engines, their labels, the default; held equal here."""
    from stackpin.backends import DEFAULT, engine, names
    from stackpin.enginecheck.envbuild import _environments, _label

    assert default_engine() == DEFAULT and set(engines()) == set(names()) and engines()[0] == DEFAULT
    assert all(_label(name) == engine(name).label for name in names())
    # Every shipped environment installs its engine's own distribution at the release it is keyed by.
    for entry in _environments().values():
        name = str(entry.get("engine", DEFAULT))
        plan = recipe(str(entry.get("version", "")) or str(entry["requirements"]).removesuffix(".txt").split("-")[-1],
                      name)
        assert plan.engine == name and f"{engine(name).distribution}=={plan.version}" in plan.requirements_text


def test_the_existing_environment_is_current_for_the_shipped_recipe() -> None:
    """The stamp the build writes is the one scripts/pinned-venv.sh wrote: an environment built before is
    current, and `setup-check` (as `make engine-env` runs it through the script) leaves it alone."""
    own_env(ENV / "bin" / "python", ROOT / ".enginecheck" / "UNAVAILABLE", "engine check", "engine-env",
            "STACKPIN_REQUIRE_ENGINE_CHECK")
    assert is_current(ENV, recipe("0.31.0"))
    run = subprocess.run([sys.executable, "-m", "stackpin", "engines", "setup-check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0 and run.stdout == "", run.stderr
    assert run.stderr.startswith(f"engine check environment current: {ENV} (requirements sha256 ")
    script = subprocess.run(["bash", "scripts/install-engine-check.sh", str(ENV.relative_to(ROOT))], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert script.returncode == 0 and script.stdout.startswith("engine check environment current: "), script.stderr


def _empty(smoke: tuple[str, ...]) -> Recipe:
    return Recipe("0.0.0", (), "empty.txt", "# nothing to install\n", smoke)


def test_a_build_makes_a_venv_shows_its_steps_and_stamps_it(tmp_path: Path) -> None:
    lines: list[str] = []
    venv = tmp_path / "env"
    assert build(venv, _empty(("json",)), lines.append) is True
    assert venv_python(venv).is_file() and is_current(venv, _empty(("json",)))
    assert (venv / "requirements.txt").read_text() == "# nothing to install\n"
    assert lines[0] == f"creating the venv {venv} with {sys.executable}"
    assert any(line.startswith("downloading the 0 packages the check imports") and str(venv) in line
               for line in lines)
    assert lines[-1] == f"engine check environment ready: {venv}"
    # Current: nothing done. Another list: stale, so rebuilt.
    assert build(venv, _empty(("json",)), lines.append) is False
    other = Recipe("0.0.0", (), "empty.txt", "# nothing to install either\n", ("json",))
    assert not is_current(venv, other)


def test_a_failed_build_leaves_nothing_that_looks_usable(tmp_path: Path) -> None:
    venv = tmp_path / "env"
    with pytest.raises(EngineEnvError, match="the import smoke test failed"):
        build(venv, _empty(("no_such_module_anywhere",)), lambda _: None)
    assert not venv.exists()


def test_the_python_is_resolved_where_the_command_runs(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    assert engine_python("0.31.0", Path("bin/python"), tmp_path) == tmp_path / "bin" / "python"
    assert default_venv("0.31.0", tmp_path) == tmp_path / ".enginecheck" / "vllm-0.31.0"
    with pytest.raises(EngineEnvError) as missing:
        engine_python("0.31.0", None, tmp_path)
    assert str(missing.value).startswith(f"{tmp_path}/.enginecheck/vllm-0.31.0/bin/python: no engine check ")
    assert os.path.isabs(str(missing.value).split(":")[0])
