"""`stackpin rollout start|status|pause|resume|abort|gitops` (see stackpin.rollout).

Registered in stackpin/cli/main.py; the subcommands live in their own modules (SUBCOMMANDS there).
"""

from __future__ import annotations

import click


@click.group()
def rollout() -> None:
    """Staged rollout across racks: a revision to a canary rack first, gated on its measurement against
    the stack it ran before, then to the rest of the fleet in waves; or the Argo CD / Flux files that do
    the same (gitops)."""
