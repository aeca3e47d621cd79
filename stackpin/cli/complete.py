"""Shell completion of what is on disk: deployment names, their revisions where an argument takes
DEPLOYMENT@N, and the packaged example profiles `init --from` takes (click's completion:
`eval "$(_STACKPIN_COMPLETE=bash_source stackpin)"`, docs/getting-started.md#command-line-conventions).

A completion reads directory and file names only, never a revision's or a profile's contents: it runs on
every Tab.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.shell_completion import CompletionItem

if TYPE_CHECKING:  # the models load only when a completion runs
    from stackpin.history.model import DeploymentKey


def _found(ctx: click.Context, numbers: bool) -> list[tuple[DeploymentKey, list[int]]]:
    """The deployments of the --history directory (default history/), with their revision numbers when
    asked; nothing where it cannot be read."""
    from stackpin.history.store import HistoryStore

    store = HistoryStore(Path(ctx.params.get("history_dir") or "history"))
    try:
        return [(key, store.numbers(key) if numbers else []) for key in store.keys()]
    except OSError:
        return []


def deployments(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Every deployment with a history (NAMESPACE/NAME@PLATFORM), and its short NAME form."""
    names = {text for key, _ in _found(ctx, numbers=False) for text in (str(key), key.name)}
    return [CompletionItem(n) for n in sorted(names) if n.startswith(incomplete)]


def revisions(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """DEPLOYMENT@N for every revision on disk (NAMESPACE/NAME@PLATFORM@N, as `rpartition("@")` reads it)."""
    found = [f"{key}@{n}" for key, numbers in _found(ctx, numbers=True) for n in numbers]
    return [CompletionItem(text) for text in found if text.startswith(incomplete)]


def examples(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The packaged example profiles `stackpin init --from` takes (file names only, nothing parsed)."""
    from stackpin.examples.packaged import example_names

    return [CompletionItem(name) for name in example_names() if name.startswith(incomplete)]
