"""Is a DynamoGraphDeployment serving? Read from the fields of the bundled CRD's status, as the Dynamo
operator writes them: `status.state` (initializing | pending | successful | failed), `status.conditions`
(the `Ready` condition), `status.observedGeneration`, and per component `status.components.<name>`
(v1beta1; `status.services.<name>` in v1alpha1) with `readyReplicas` (or `availableReplicas`, which is
all a PodCliqueScalingGroup reports). Pure.
"""

from __future__ import annotations

from typing import Any

import msgspec

from stackpin.deploy.recreate import components


class ComponentReadiness(msgspec.Struct, frozen=True):
    name: str
    desired: int
    ready: int | None  # None: the operator has not reported it

    @property
    def is_ready(self) -> bool:
        return self.ready is not None and self.ready >= self.desired

    def __str__(self) -> str:
        return f"{self.name} {'-' if self.ready is None else self.ready}/{self.desired}"


class Readiness(msgspec.Struct, frozen=True):
    name: str
    state: str  # status.state, "" when the operator has written no status
    ready_condition: str  # True | False | Unknown | "" (absent)
    reason: str  # the Ready condition's reason and message
    current: bool  # the status describes this generation of the spec
    components: tuple[ComponentReadiness, ...]
    deleted: bool = False

    @property
    def ready(self) -> bool:
        return (not self.deleted and self.state == "successful" and self.ready_condition in ("True", "")
                and self.current and all(c.is_ready for c in self.components))

    def summary(self) -> str:
        """One line: `state pending; Ready=False (reason); frontend 1/1, worker 0/18 ready`."""
        if self.deleted:
            return "deleted"
        parts = [f"state {self.state or 'not reported'}"]
        if self.ready_condition:
            parts.append(f"Ready={self.ready_condition}" + (f" ({self.reason})" if self.reason else ""))
        if not self.current:
            parts.append("status is of an older generation")
        parts.append(", ".join(str(c) for c in self.components) + " ready")
        return "; ".join(parts)

    def waiting_on(self) -> list[str]:
        """What is not ready yet, for the timeout message."""
        if self.deleted:
            return ["the object was deleted"]
        out = []
        if self.state != "successful":
            out.append(f"state {self.state or 'not reported'}")
        if self.ready_condition not in ("True", ""):
            out.append(f"Ready={self.ready_condition}" + (f" ({self.reason})" if self.reason else ""))
        if not self.current:
            out.append("status not yet observed for this generation")
        out += [f"{c.name} {'-' if c.ready is None else c.ready}/{c.desired} ready" for c in self.components
                if not c.is_ready]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"ready": self.ready, "state": self.state, "readyCondition": self.ready_condition,
                "reason": self.reason, "current": self.current,
                "components": [{"name": c.name, "desired": c.desired, "ready": c.ready} for c in self.components]}


def readiness(dgd: dict[str, Any]) -> Readiness:
    spec = dgd.get("spec") or {}
    reported_status = dgd.get("status")
    status: dict[str, Any] = reported_status if isinstance(reported_status, dict) else {}  # not a Status's "Failure"
    generation = (dgd.get("metadata") or {}).get("generation")
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    ready = conditions.get("Ready") or {}
    observed = [status.get("observedGeneration"), ready.get("observedGeneration")]
    current = all(g is None or generation is None or g >= generation for g in observed)
    reason = ": ".join(str(x) for x in (ready.get("reason"), ready.get("message")) if x)
    desired = {e["name"]: e.get("replicas", 1) for e in spec.get("components") or []}
    desired.update({n: e.get("replicas", 1) for n, e in (spec.get("services") or {}).items()})
    reported = {**(status.get("services") or {}), **(status.get("components") or {})}
    comps = []
    for name in components(dgd):
        entry = reported.get(name) or {}
        count = entry.get("readyReplicas", entry.get("availableReplicas"))
        comps.append(ComponentReadiness(name, int(desired.get(name) or 0),
                                        count if isinstance(count, int) else None))
    return Readiness(name=(dgd.get("metadata") or {}).get("name", ""), state=str(status.get("state") or ""),
                     ready_condition=str(ready.get("status") or ""), reason=reason, current=current,
                     components=tuple(comps))
