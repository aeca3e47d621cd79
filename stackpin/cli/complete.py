"""Shell completion of what is on disk: deployment names, and their revisions where an argument takes
DEPLOYMENT@N (click's completion: `eval "$(_STACKPIN_COMPLETE=bash_source stackpin)"`,
docs/getting-started.md#command-line-conventions).

A completion reads directory names only, never a revision's contents: it runs on every Tab.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.shell_completion import CompletionItem


def _keys(ctx: click.Context) -> list[str]:
    from stackpin.history.store import HistoryStore

    root = Path(ctx.params.get("history_dir") or "history")
    try:
        return [str(key) for key in HistoryStore(root).keys()]
    except OSError:
        return []


def deployments(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Every deployment with a history (NAMESPACE/NAME@PLATFORM), and its short NAME form."""
    names = set()
    for key in _keys(ctx):
        names.add(key)
        names.add(key.split("/", 1)[1].split("@", 1)[0])
    return [CompletionItem(n) for n in sorted(names) if n.startswith(incomplete)]


def revisions(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """DEPLOYMENT@N for every revision on disk (NAMESPACE/NAME@PLATFORM@N, as `rpartition("@")` reads it)."""
    from stackpin.history.store import HistoryStore

    store = HistoryStore(Path(ctx.params.get("history_dir") or "history"))
    try:
        found = [f"{key}@{n}" for key in store.keys() for n in store.numbers(key)]
    except OSError:
        return []
    return [CompletionItem(text) for text in found if text.startswith(incomplete)]
