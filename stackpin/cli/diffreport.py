"""Human-readable output of a StackDiff (rich markup; every piece of user data escaped)."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.markup import escape

from stackpin.diff.model import (
    Change,
    ChangeKind,
    Group,
    Impact,
    ManifestDiff,
    ObjectStatus,
    SourceKind,
    StackDiff,
    StackRef,
)
from stackpin.yamlio import ambiguous_scalar

_IMPACT_STYLE = {Impact.none: "green", Impact.restart: "yellow", Impact.recreate: "bold red"}
_PLAIN = re.compile(r"[A-Za-z0-9_./:@+=-]+")
_ROLLOUT = {
    Impact.none: "none (no pod changes)",
    Impact.restart: "restart: a rolling update of {names}",
    Impact.recreate: "recreate: the Dynamo admission webhook refuses this in place; delete the "
                     "DynamoGraphDeployment and create it again",
}


def show_value(value: Any) -> str:
    """A value as one short line: plain words bare, anything a reader could mistake quoted as JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return value if _PLAIN.fullmatch(value) and not ambiguous_scalar(value) else json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    if isinstance(value, dict):
        # Unset (null) fields are left out of a map shown inline; JSON/YAML output keeps them.
        return "{" + ", ".join(f"{show_value(k)}: {show_value(v)}" for k, v in sorted(value.items())
                               if v is not None) + "}"
    return json.dumps(value, default=str)


def _change_line(change: Change) -> str:
    old = "(unset)" if change.kind == ChangeKind.added else show_value(change.old)
    new = "(unset)" if change.kind == ChangeKind.removed else show_value(change.new)
    line = f"  {escape(change.path)}: [red]{escape(old)}[/] -> [green]{escape(new)}[/]"
    if change.note:
        line += f"  [dim]({escape(change.impact.value)}: {escape(change.note)})[/]"
    return line


def _impact_text(impact: Impact, restarts: tuple[str, ...]) -> str:
    names = f" ({escape(', '.join(restarts))})" if restarts else ""
    return f"[{_IMPACT_STYLE[impact]}]{escape(impact.value)}[/]{names}"


def _side(label: str, ref: StackRef) -> str:
    what = f"{ref.kind.value} {ref.name}"
    if ref.stack_digest:
        what += f" {ref.stack_digest.removeprefix('sha256:')[:12]}"
    if ref.stand_in:
        what += ", stand-in pins: not production digests"
    return f"[bold]{label}[/] {escape(ref.source)}  [dim]({escape(what)})[/]"


def _group(console: Console, group: Group) -> None:
    console.print(f"[bold]{escape(group.id.value)}[/] [dim]{escape(group.title)}[/]  "
                  f"{_impact_text(group.impact, group.restarts)}")
    for reason in group.recreate_reasons:
        console.print(f"  [red]recreate:[/] {escape(reason)}")
    for change in group.changes:
        console.print(_change_line(change))
    for inv in group.invalidates:
        console.print(f"  [magenta]invalidates {escape(inv.what.value)}[/]")


def _manifests(console: Console, manifests: ManifestDiff) -> None:
    counts = {s: sum(1 for o in manifests.objects if o.status == s) for s in ObjectStatus}
    console.print(f"[bold]manifests[/] {counts[ObjectStatus.changed]} changed, {counts[ObjectStatus.added]} added, "
                  f"{counts[ObjectStatus.removed]} removed, {manifests.unchanged} unchanged")
    for obj in manifests.objects:
        name = escape(f"{obj.kind}/{obj.name}")
        if obj.status != ObjectStatus.changed:
            style = "green" if obj.status == ObjectStatus.added else "red"
            console.print(f"  [{style}]{obj.status.value}[/] {name}")
            continue
        console.print(f"  changed {name}")
        for line in obj.diff.splitlines():
            style = ("bold" if line.startswith(("---", "+++")) else "cyan" if line.startswith("@@")
                     else "green" if line.startswith("+") else "red" if line.startswith("-") else "")
            console.print(f"[{style}]{escape(line)}[/]" if style else escape(line))


def print_diff(diff: StackDiff, console: Console | None = None) -> None:
    if console is None:
        console = Console(highlight=False, soft_wrap=True)
    console.print(_side("a", diff.a))
    console.print(_side("b", diff.b))
    if not diff.pins_compared:
        profiles = [label for label, ref in (("a", diff.a), ("b", diff.b)) if ref.kind == SourceKind.profile]
        which = f"{profiles[0]} is a profile" if len(profiles) == 1 else "a and b are profiles"
        console.print(f"[dim]pins not compared: {which} (a profile's image, model and cache digests are "
                      "known once it is locked)[/]")
    console.print()
    if diff.equal:
        same = "the same stack digest" if diff.pins_compared else "the same effective profile"
        console.print(f"no changes: {same}")
    for group in diff.groups:
        _group(console, group)
        console.print()
    if diff.manifests is not None:
        _manifests(console, diff.manifests)
        console.print()
    if diff.equal:
        return
    rollout = _ROLLOUT[diff.impact].format(names=", ".join(diff.restarts))
    console.print(f"[bold]rollout[/] [{_IMPACT_STYLE[diff.impact]}]{escape(rollout)}[/]")
    for inv in diff.invalidates:
        console.print(f"[bold]invalidates[/] [magenta]{escape(inv.what.value)}[/]: {escape(inv.detail)}")
    console.print(f"[bold]summary[/] {escape(diff.one_line())}")
