"""Engine flag catalogs: what one entry point of one pinned vLLM or Dynamo release accepts.

Read from `engines/<engine>-<version>.json` (extracted from the published packages by
scripts/extract_engine_flags.py). One type, `FlagCatalog`, serves validation (backends, speculative
methods, env vars, model architectures of the pinned vLLM) and render (every emitted flag checked).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

DynamoEntry = Literal["worker_vllm", "frontend"]


class FlagCatalog(BaseModel):
    """The options one entry point of one pinned package accepts, with its value lists."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # e.g. "vLLM 0.31.0" or "Dynamo 1.6.1 worker_vllm"
    version: str
    options: frozenset[str]  # every option string, with the --no-x argparse adds for boolean-optional --x
    enforced: dict[str, tuple[str, ...]] = {}  # option -> choices argparse rejects anything outside of
    known: dict[str, tuple[str, ...]] = {}  # option -> values the package knows but checks later (or never)
    # vLLM only: allowed values by kind (attention_backends, speculative_methods, kv_cache_dtypes, ...),
    # the env vars vllm/envs.py reads and the model registry's architectures.
    choices: dict[str, tuple[str, ...]] = {}
    env_vars: frozenset[str] = frozenset()
    model_architectures: dict[str, tuple[str, ...]] = {}

    def accepts(self, option: str) -> bool:
        return option in self.options


def catalog_file(engine: Literal["vllm", "dynamo"], version: str) -> str:
    return f"{engine}-{version}.json"


@cache
def engine_catalog(engine: Literal["vllm", "dynamo"], version: str) -> dict[str, Any] | None:
    """The extracted JSON `engines/<engine>-<version>.json`, or None when there is none. Parsed once."""
    path = resources.files(__package__).joinpath("engines", catalog_file(engine, version))
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _options(section: dict[str, Any]) -> tuple[frozenset[str], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(option strings, enforced choices, known values) of one entry point's section."""
    options = set(section["option_strings"])
    # argparse.BooleanOptionalAction registers --no-x beside --x at runtime (engines/README.md).
    options.update("--no-" + o.removeprefix("--") for o in section.get("boolean_optional_options", ()))
    enforced: dict[str, tuple[str, ...]] = {}
    known: dict[str, tuple[str, ...]] = {}
    for option, info in section.get("options", {}).items():
        choices = info.get("choices")
        if not choices:
            continue
        # vLLM marks whether argparse enforces its choices; Dynamo's options pass choices= to argparse.
        target = enforced if info.get("choices_enforced_by_argparse", True) else known
        for string in info.get("strings", [option]):
            target[string] = tuple(choices)
    return frozenset(options), enforced, known


@cache
def vllm_catalog(version: str) -> FlagCatalog | None:
    """The flag catalog of a vLLM release, or None when stackpin has not extracted it."""
    data = engine_catalog("vllm", version)
    if data is None:
        return None
    options, enforced, known = _options(data)
    choices = {kind: tuple(values) for kind, values in data.get("choices", {}).items()}
    # --attention-backend takes any string at parse time and is checked against the backend
    # registry when the engine starts: a known value list, not an argparse one.
    known["--attention-backend"] = choices.get("attention_backends", ())
    return FlagCatalog(name=f"vLLM {version}", version=data["version"], options=options, enforced=enforced,
                       known=known, choices=choices, env_vars=frozenset(data.get("env_vars", ())),
                       model_architectures={k: tuple(v) for k, v in data.get("model_architectures", {}).items()})


@cache
def dynamo_catalog(version: str, entry: DynamoEntry) -> FlagCatalog | None:
    """The flag catalog of one Dynamo entry point (`python -m dynamo.vllm` or `dynamo.frontend`)."""
    data = engine_catalog("dynamo", version)
    if data is None:
        return None
    options, enforced, known = _options(data[entry])
    return FlagCatalog(name=f"Dynamo {version} {entry}", version=data["version"], options=options,
                       enforced=enforced, known=known)
