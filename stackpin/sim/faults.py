"""Injected failures, so the replay client's tests can see each kind against a real server, and an
injected slowdown (`slow`), so an upgrade trial or a regression gate can be drilled against a stack
that is measurably worse than its twin."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Literal

from stackpin.errors import StackpinError

Fault = Literal["error", "stall", "drop", "malformed"]
KINDS: tuple[Fault, ...] = ("error", "stall", "drop", "malformed")


@dataclass(frozen=True)
class FaultSpec:
    """Rates (fractions of requests) of each fault, token events before it, and the seed of the draw."""

    error: float = 0.0
    stall: float = 0.0
    drop: float = 0.0
    malformed: float = 0.0
    after: int = 1
    seed: int = 0
    slow: float = 1.0  # every engine step takes this many times as long (>= 1): not a per-request draw


    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """`error=0.1,stall=0.05,after=8,seed=1,slow=2`; a bad item is one line naming it."""
        values: dict[str, float | int] = {}
        known = {f.name for f in fields(cls)}
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, raw = item.partition("=")
            if not sep or key not in known:
                raise StackpinError(f"--fault {item}: expected one of {', '.join(sorted(known))} as key=value")
            try:
                number = float(raw)
            except ValueError:
                raise StackpinError(f"--fault {item}: {raw!r} is not a number") from None
            if key in ("after", "seed"):
                if not number.is_integer() or number < 0:
                    raise StackpinError(f"--fault {item}: must be a non-negative integer")
                values[key] = int(number)
            elif key == "slow":
                if not 1 <= number < float("inf"):  # NaN fails it too
                    raise StackpinError(f"--fault {item}: a slowdown is a factor of 1 or more")
                values[key] = number
            elif not 0 <= number <= 1:
                raise StackpinError(f"--fault {item}: a rate is between 0 and 1")
            else:
                values[key] = number
        spec = cls(**values)  # type: ignore[arg-type]
        if sum(spec.rate(k) for k in KINDS) > 1 + 1e-9:
            raise StackpinError(f"--fault {text}: the rates add up to more than 1")
        return spec

    def rate(self, kind: Fault) -> float:
        value: float = getattr(self, kind)
        return value

    @property
    def active(self) -> bool:
        return any(self.rate(k) for k in KINDS)

    def draw(self, request_number: int) -> Fault | None:
        """The fault of the `request_number`th request (0-based): the same for the same seed, always."""
        if not self.active:
            return None
        digest = hashlib.sha256(f"{self.seed}:{request_number}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        edge = 0.0
        for kind in KINDS:
            edge += self.rate(kind)
            if u < edge:
                return kind
        return None
