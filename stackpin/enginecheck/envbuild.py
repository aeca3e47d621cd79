"""Build the engine check's environment: the pinned engine release from its published wheel, CPU-capable torch,
and only what the check imports (`stackpin engines setup-check`, scripts/install-engine-check.sh).

Steps, per pinned engine release (environments.json beside this module, which also names the engines, their
labels and the default one): a venv; `first` (torch as vLLM's METADATA pins
it) with its dependencies; then the requirements file shipped beside this module with --no-deps; then an
import smoke test. pip prints its own progress: the build is a download of about 2 GB the first time.
Idempotent: the venv keeps a stamp holding the sha256 of `first` and the requirements file; a current venv is
left alone, a stale or half-built one is rebuilt from scratch, and a failed or interrupted build leaves no
venv that looks usable. Only PyPI (or the mirrors pip's config names) is contacted.

Standard library only: scripts/install-engine-check.sh runs it with the system Python
(`python3 -m stackpin.enginecheck.envbuild DIR`) before stackpin's own environment exists, so the engines'
facts come from environments.json, not from stackpin.backends.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from stackpin.children import die_with_parent
from stackpin.errors import StackpinError

ENV_ROOT = ".enginecheck"  # under the directory `stackpin engines check` runs in, as the setup builds it
STAMP = ".pinned-venv-stamp"  # the name scripts/pinned-venv.sh uses, so an environment built by either is current
STEP_TIMEOUT_S = 3 * 3600  # one pip step: a slow mirror takes long for torch's wheels, never forever


class EngineEnvError(StackpinError):
    """The engine environment is missing or could not be built (exit 2)."""


@cache
def _data() -> dict[str, dict[str, object]]:
    data: dict[str, dict[str, object]] = json.loads(
        resources.files(__package__).joinpath("environments.json").read_text("utf-8"))
    return data


def default_engine() -> str:
    """The engine `stackpin engines setup-check` builds the environment of (environments.json `_engines`)."""
    return str(_data()["_engines"]["default"])


def _label(engine: str) -> str:
    labels = _data()["_engines"]["labels"]
    assert isinstance(labels, dict)
    return str(labels.get(engine, engine))


def engines() -> tuple[str, ...]:
    """The engines environments.json names, the default first."""
    labels = _data()["_engines"]["labels"]
    assert isinstance(labels, dict)
    return (default_engine(), *sorted(set(labels) - {default_engine()}))


@dataclass(frozen=True)
class Recipe:
    version: str  # the engine release
    first: tuple[str, ...]  # installed with their dependencies, before the requirements
    requirements: str  # the shipped requirements file's name (package data)
    requirements_text: str
    smoke: tuple[str, ...]  # modules the finished environment must import
    engine: str = field(default_factory=default_engine)  # an entry's "engine"; the default engine when absent

    @property
    def stamp(self) -> str:
        """sha256 of `first` (one a line) and the requirements file, as scripts/pinned-venv.sh computed it."""
        return hashlib.sha256(("".join(f"{spec}\n" for spec in self.first) + self.requirements_text)
                              .encode("utf-8")).hexdigest()


def _environments() -> dict[str, dict[str, object]]:
    return {k: v for k, v in _data().items() if not k.startswith("_")}


def _key(engine: str, version: str) -> str:
    """An environment's key in environments.json: the default engine's releases bare (as shipped first), others
    `engine-version`."""
    return version if engine == default_engine() else f"{engine}-{version}"


def recipe(version: str, engine: str | None = None) -> Recipe:
    """How the environment for release `version` of `engine` (the default engine when None) is built;
    EngineEnvError naming the shipped ones otherwise."""
    engine = engine or default_engine()
    environments = {k: v for k, v in _environments().items() if v.get("engine", default_engine()) == engine}
    if _key(engine, version) not in environments:
        shipped = sorted(str(v.get("version", k)) for k, v in environments.items())
        raise EngineEnvError(f"no engine check environment for {_label(engine)} {version} in "
                             f"stackpin/enginecheck/environments.json (shipped: {', '.join(shipped)})")
    entry = environments[_key(engine, version)]
    name = str(entry["requirements"])
    text = resources.files(__package__).joinpath(name).read_text("utf-8")
    first, smoke = entry["first"], entry["smoke"]
    assert isinstance(first, list) and isinstance(smoke, list)
    return Recipe(version, tuple(map(str, first)), name, text, tuple(map(str, smoke)), engine)


def default_venv(version: str, base: Path | None = None, engine: str | None = None) -> Path:
    """Where the setup builds, and the check looks for, the environment of release `version` of `engine` (the
    default engine when None): .enginecheck/ENGINE-VERSION, absolute, under `base` (the current directory)."""
    return (base or Path.cwd()).absolute() / ENV_ROOT / f"{engine or default_engine()}-{version}"


def venv_python(venv: Path) -> Path:
    # Not resolved: the venv's python is a link to the base interpreter, which would lose the venv.
    return venv.absolute() / "bin" / "python"


def engine_python(version: str, given: Path | None = None, base: Path | None = None) -> Path:
    """The engine environment's Python for release `version` of the default engine (the one `stackpin engines
    setup-check` builds), absolute (the check runs it from a scratch directory): `given` (--python or
    $STACKPIN_ENGINE_PYTHON) against `base`, else where the setup builds it under `base` (the current directory).
    EngineEnvError, naming the path tried and how to build it, when it is missing."""
    base = (base or Path.cwd()).absolute()
    python = (base / given if given is not None else venv_python(default_venv(version, base))).absolute()
    if python.is_file():
        return python
    engine = default_engine()
    build = (f"build it with `stackpin engines setup-check --{engine} {version}` in {base}" if given is None
             else f"build one with `stackpin engines setup-check --{engine} {version} {python.parent.parent}`")
    raise EngineEnvError(f"{python}: no engine check environment for {_label(engine)} {version} (no such Python); "
                         f"{build}, or name its Python with --python")


def check_python(engine: str, version: str, given: Path | None = None, base: Path | None = None) -> Path:
    """The engine check environment's Python for release `version` of `engine` (`engines()`), absolute:
    `given` against `base`, else where the setup builds it under `base` (the current directory); EngineEnvError
    naming the path tried and how to build it, when it is missing."""
    if _key(engine, version) == version:  # keyed bare: the engine `stackpin engines setup-check` builds, its hint
        return engine_python(version, given, base)
    base = (base or Path.cwd()).absolute()
    python = (base / given if given is not None else venv_python(default_venv(version, base, engine))).absolute()
    if not python.is_file():
        raise EngineEnvError(f"{python}: no engine check environment for {engine} {version} (no such Python); "
                             f"build it with `python3 -m stackpin.enginecheck.envbuild --{engine} {version}`, or "
                             "name its Python with --python")
    return python


def is_current(venv: Path, plan: Recipe) -> bool:
    try:
        stamp = (venv / STAMP).read_text("utf-8").strip()
    except OSError:
        return False
    return venv_python(venv).is_file() and stamp == plan.stamp


def _run(argv: list[str], what: str) -> None:
    """One build step, its output straight to the terminal (pip's progress bars); never outlives stackpin."""
    try:
        run = subprocess.run(argv, check=False, timeout=STEP_TIMEOUT_S, preexec_fn=die_with_parent(),
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise EngineEnvError(f"{what}: {argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise EngineEnvError(f"{what}: still running after {STEP_TIMEOUT_S} s") from None
    if run.returncode != 0:
        raise EngineEnvError(f"{what} failed (exit {run.returncode}); pip's output above says why")


def build(venv: Path, plan: Recipe, echo: Callable[[str], None], python: str = sys.executable) -> bool:
    """Build the environment `plan` describes at `venv`; False when it is already current (nothing done)."""
    venv = venv.absolute()
    if is_current(venv, plan):
        echo(f"engine check environment current: {venv} (requirements sha256 {plan.stamp[:12]})")
        return False
    try:
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        echo(f"creating the venv {venv} with {python}")
        _run([python, "-m", "venv", str(venv)], f"{python} -m venv {venv}")
        pip = [str(venv_python(venv)), "-m", "pip", "--disable-pip-version-check", "install"]
        if plan.first:
            echo(f"downloading {' '.join(plan.first)} with its dependencies into {venv} (about 2 GB the first time: "
                 "pip's progress follows)")
            _run(pip + list(plan.first), f"pip install {' '.join(plan.first)}")
        count = sum(1 for line in plan.requirements_text.splitlines() if line.strip() and not line.startswith("#"))
        echo(f"downloading the {count} packages the check imports, {plan.engine}=={plan.version} among them "
             f"(stackpin/enginecheck/{plan.requirements}, --no-deps) into {venv}")
        reqs = venv / "requirements.txt"  # kept: what this environment was built from
        reqs.write_text(plan.requirements_text, "utf-8")
        _run(pip + ["--no-deps", "-r", str(reqs)], f"pip install --no-deps -r {plan.requirements}")
        echo(f"checking that the environment imports {', '.join(plan.smoke)}")
        _run([str(venv_python(venv)), "-c", f"import {', '.join(plan.smoke)}"], "the import smoke test")
        (venv / STAMP).write_text(plan.stamp + "\n", "utf-8")
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)  # nothing half-built that looks usable
        raise
    echo(f"engine check environment ready: {venv}")
    return True


def main(argv: list[str]) -> int:
    """`python3 -m stackpin.enginecheck.envbuild [DIR] [--ENGINE VERSION]` (one option per engine
    environments.json names: the default engine's release by default), for scripts/install-engine-check.sh."""
    import argparse

    parser = argparse.ArgumentParser(prog="install-engine-check")
    parser.add_argument("venv", nargs="?", type=Path)
    default, *others = engines()
    parser.add_argument(f"--{default}", default=str(_data()["_engines"]["default_version"]))
    for other in others:
        parser.add_argument(f"--{other}", help=f"build the {_label(other)} engine check's environment of this "
                                               "release instead")
    chosen = vars(parser.parse_args(argv))
    engine = next((other for other in others if chosen[other]), default)
    version = str(chosen[engine])
    try:
        build(chosen["venv"] or default_venv(version, engine=engine), recipe(version, engine),
              lambda line: print(line, flush=True), python=sys.executable)
    except StackpinError as exc:
        for line in exc.lines():
            print(f"install-engine-check: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("install-engine-check: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
