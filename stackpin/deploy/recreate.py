"""Which changes to a live DynamoGraphDeployment cannot be made in place.

Dynamo's admission webhook (docs/facts.md#admission-and-rollouts) rejects an update that adds or
removes a component, switches a component between single-node and multi-node, changes a multi-node
component's `multinode.nodeCount`, or changes `backendFramework` (unset -> vllm included): those take
a delete and a create (the serving pods go down). A component's type is not among them: no webhook or
CEL rule refuses its change. Pure: live object and new object in, reasons out (empty: an in-place
update will do).
"""

from __future__ import annotations

from typing import Any

import msgspec

from stackpin.deploy.objects import DGD_KIND


class Component(msgspec.Struct, frozen=True):
    name: str
    type: str
    nodes: int  # nodes one replica spans; > 1 is multi-node

    @property
    def multinode(self) -> bool:
        return self.nodes > 1


def components(dgd: dict[str, Any]) -> dict[str, Component]:
    """The components of a DynamoGraphDeployment of either version (v1beta1 `spec.components`,
    v1alpha1 `spec.services`)."""
    spec = dgd.get("spec") or {}
    out = {}
    for entry in spec.get("components") or []:
        out[entry["name"]] = Component(entry["name"], str(entry.get("type") or ""), _nodes(entry))
    for name, entry in (spec.get("services") or {}).items():
        kind = entry.get("subComponentType") or entry.get("componentType") or ""
        out[name] = Component(name, str(kind), _nodes(entry))
    return out


def _nodes(entry: dict[str, Any]) -> int:
    count = (entry.get("multinode") or {}).get("nodeCount")
    return count if isinstance(count, int) else 1


def _shape(comp: Component) -> str:
    return f"multi-node ({comp.nodes} nodes)" if comp.multinode else "single-node"


def recreate_reasons(live: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why `new` cannot replace `live` in place; empty when it can."""
    if new.get("kind") != DGD_KIND:
        return []
    reasons = []
    before, after = components(live), components(new)
    if set(before) != set(after):
        reasons.append(f"components {', '.join(before)} -> {', '.join(after)}")
    for name in sorted(set(before) & set(after)):
        old, cur = before[name], after[name]
        if old.multinode != cur.multinode:
            reasons.append(f"component {name} {_shape(old)} -> {_shape(cur)}")
        elif old.multinode and old.nodes != cur.nodes:
            reasons.append(f"component {name} multinode.nodeCount {old.nodes} -> {cur.nodes} (immutable)")
    # Any change is refused, from or to unset too (the webhook compares the strings).
    old_backend = (live.get("spec") or {}).get("backendFramework") or ""
    new_backend = (new.get("spec") or {}).get("backendFramework") or ""
    if old_backend != new_backend:
        reasons.append(f"backendFramework {old_backend or 'unset'} -> {new_backend or 'unset'}")
    return reasons
