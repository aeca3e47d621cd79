"""The serving-engine seam: one module per engine behind `ServingEngine` (base.py).

`engine_of(profile)` is how every stage reaches the engine a stack runs; adding an engine is a module here,
its catalog data and an entry in ENGINES (docs/engines.md, "Adding an engine").
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from stackpin.backends.base import ServingEngine

if TYPE_CHECKING:
    from stackpin.engines.diff import Serving
    from stackpin.profile.model import EngineName, StackProfile

DEFAULT = "vllm"


@cache
def _registry() -> dict[str, ServingEngine]:
    from stackpin.backends.sglang import SGLANG
    from stackpin.backends.vllm import VLLM

    engines: tuple[ServingEngine, ...] = (VLLM, SGLANG)
    return {e.name: e for e in engines}


def names() -> tuple[str, ...]:
    return tuple(_registry())


def engine(name: str | EngineName) -> ServingEngine:
    """The engine called `name` (a profile's spec.engine value)."""
    found = _registry().get(str(name))
    if found is None:
        raise KeyError(f"no serving engine {name!r}; stackpin knows {', '.join(names())}")
    return found


def engine_of(profile: StackProfile) -> ServingEngine:
    return engine(profile.spec.engine.value)


def serving_releases() -> tuple[Serving, ...]:
    """Every engine as `stackpin engines diff` reads its releases (stackpin.engines sits above this seam)."""
    from stackpin.engines.diff import Serving

    return tuple(Serving(e.name, e.label, e.distribution, e.dynamo_worker, e.release) for e in _registry().values())
