"""The pluggable step-time model: one name -> the object the engine and the curve ask for step times."""

from __future__ import annotations

from typing import Any, Protocol

from stackpin.errors import StackpinError
from stackpin.sim.stack import SimPool, SimStack

MODELS = ("roofline", "aiconfigurator")


class StepTimes(Protocol):
    """What the engine and the curve read from a step model."""

    @property
    def alpha(self) -> tuple[float, ...]: ...  # per-position draft acceptance (roofline.accepted_tokens reads it)

    def step_time(self, decode: int, k: int, kv_tokens: int, prefill: int = 0) -> float: ...

    def best_k(self, decode: int, kv_tokens: int, prefill: int = 0) -> int: ...

    def kv_transfer_time(self, tokens: int) -> float: ...


def check_model(name: str, stack: SimStack | None = None) -> None:
    """Refuse an unknown model name, or a stack the named model cannot stand for (exit 2, one line)."""
    if name not in MODELS:
        raise StackpinError(f"--model {name}: expected one of {', '.join(MODELS)}")
    if name == "aiconfigurator" and stack is not None:
        from stackpin.sim.aic import check

        check(stack)


def step_model(name: str, stack: SimStack, pool: SimPool, params: dict[str, Any] | None = None,
               acceptance: tuple[float, ...] | None = None) -> StepTimes:
    """The named step model for one pool; `acceptance`: measured per-position draft acceptance that replaces
    the model's."""
    if name == "aiconfigurator":
        from stackpin.sim.aic import AicStepModel

        return AicStepModel.of(stack, pool, params, acceptance)
    check_model(name)
    from stackpin.sim.roofline import StepModel

    return StepModel.of(stack, pool, params, acceptance)


def substitutions(name: str, stack: SimStack) -> list[str]:
    """What the named model stands in with for this stack (roofline reads the stack itself), and what of
    the stack neither models (stack.unmodelled)."""
    if name == "aiconfigurator":
        from stackpin.sim.aic import substitutions as aic_substitutions

        return [*aic_substitutions(stack), *stack.unmodelled]
    return list(stack.unmodelled)
