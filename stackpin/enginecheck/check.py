"""The engine check, its engine-neutral part: a rendered stack through its pinned engine's own code, on CPU.

Each engine's check of a lock lives in a module of its own (`vllm_check.py`, `sglang_check.py`), named by its
backend (`ServingEngine.lock_check`); `lock_check(engine)` resolves it and `check_lock` runs the one a lock's
engine names. What they share is here: the verdict per pool (`PoolCheck`), the error for an environment that
cannot run (`EngineCheckError`), the worker containers of the objects render writes, the model's config.json
from the catalog (`catalog/model_configs.yaml`: no Hub access) in a scratch Hugging Face cache read offline,
and running a check's runtime script with the engine environment's Python (`run_script`).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import stackpin.jsonio as jsonio
from stackpin.catalog.flags import FlagCatalog
from stackpin.catalog.model_configs import model_config as catalog_model_config
from stackpin.children import end_groups, spawn
from stackpin.errors import StackpinError

if TYPE_CHECKING:
    from stackpin.catalog import Catalog
    from stackpin.lock.lockfile import StackLock

TIMEOUT_S = 600  # one pool: an engine's imports and config construction take some seconds on two cores
MAX_OUTPUT = 4 * 1024 * 1024
MAX_STDERR = 64 * 1024  # the tail kept to name why the script itself failed


class EngineCheckError(StackpinError):
    """The engine environment could not run the check at all (exit 2): not a finding about the stack."""


@dataclass(frozen=True)
class PoolCheck:
    stack: str
    role: str
    result: dict[str, Any]
    problems: tuple[str, ...] = field(default=())
    resolved: str = ""  # what the engine resolved, in one line, as its own check words it; "" with problems

    @property
    def ok(self) -> bool:
        return not self.problems


def model_config(catalog_key: str) -> dict[str, Any]:
    config = catalog_model_config(catalog_key)
    if config is None:
        raise EngineCheckError(f"no config.json for model {catalog_key} in stackpin/catalog/model_configs.yaml")
    return config


def _takes_value(catalog: FlagCatalog, option: str) -> bool:
    found = catalog.option(option)
    return not (found is None or found.type == "bool" or found.store_true or option in found.negatives)


def _workers(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    [dgd] = [o for o in objects if o["kind"] == "DynamoGraphDeployment"]
    if "components" in dgd["spec"]:
        return [(c["name"], c["podTemplate"]["spec"]["containers"][0]) for c in dgd["spec"]["components"]
                if c["name"] != "frontend"]
    return [(name, s["extraPodSpec"]["mainContainer"]) for name, s in dgd["spec"]["services"].items()
            if name != "frontend"]


def _hub_snapshot(hf_home: Path, model_id: str, revision: str | None, config: dict[str, Any]) -> None:
    """config.json where huggingface_hub finds `model_id` at `revision` offline under HF_HOME, as the pod's
    model volume holds it (hub/models--ORG--NAME/snapshots/COMMIT/; a branch name through refs/)."""
    repo = hf_home / "hub" / f"models--{model_id.replace('/', '--')}"
    commit = revision if revision and re.fullmatch(r"[0-9a-f]{40}", revision) else "0" * 40
    if commit != revision:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / (revision or "main")).write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def run_script(script: str, python: Path, spec: dict[str, Any], workdir: Path, env: dict[str, str], *,
               timeout_s: float, what: str, build: str) -> dict[str, Any]:
    """Run one engine check's runtime `script` (package data) with the engine environment's Python on a spec;
    its JSON answer. `what` names the check in errors, `build` says how to make the environment."""
    spec_file = workdir / "spec.json"
    spec_file.write_text(json.dumps(spec))
    with resources.as_file(resources.files(__package__).joinpath(script)) as path:
        try:
            # In a group of its own that dies with stackpin (kill -9 too) and is ended on a timeout or Ctrl-C:
            # the engine may start processes of its own.
            process = spawn([str(python), str(path), str(spec_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=workdir, env=env)
        except FileNotFoundError:
            raise EngineCheckError(f"{python}: no such Python; build the {build}") from None
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise EngineCheckError(f"the {what} ran past {timeout_s:g} s") from None
        finally:
            end_groups([process])
    if process.returncode != 0 or len(stdout) > MAX_OUTPUT:
        tail = stderr[-MAX_STDERR:].decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise EngineCheckError(f"the {what} exited {process.returncode}: {tail[0][:400]}")
    try:
        result: dict[str, Any] = jsonio.loads(stdout)
    except jsonio.NestingError as exc:
        raise EngineCheckError(f"the {what}'s answer: {exc}") from None
    except ValueError:
        raise EngineCheckError(f"the {what} printed no JSON answer") from None
    return result


def lock_check(engine: str) -> Callable[..., list[PoolCheck]]:
    """The check of a lock by engine `engine`'s pinned release (`check_lock`'s signature), as its backend names
    it (ServingEngine.lock_check)."""
    from importlib import import_module

    from stackpin.backends import engine as serving_engine

    module, _, function = serving_engine(engine).lock_check.partition(":")
    check: Callable[..., list[PoolCheck]] = getattr(import_module(module), function)
    return check


def check_lock(lock: StackLock, python: Path, catalog: Catalog | None = None,
               timeout_s: float = TIMEOUT_S) -> list[PoolCheck]:
    """Every worker pool of `lock` through its engine's pinned release at `python` (the check its backend names)."""
    return lock_check(lock.stack_profile.spec.engine.value)(lock, python, catalog, timeout_s=timeout_s)
