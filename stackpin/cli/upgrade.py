"""`stackpin upgrade check|propose|trial|promote` (see stackpin.upgrade).

Registered in stackpin/cli/main.py; the subcommands live in their own modules (SUBCOMMANDS there), so
`upgrade check` does not import what `trial` needs.
"""

from __future__ import annotations

import click


@click.group()
def upgrade() -> None:
    """Stack upgrades as dependency updates: check an index for newer releases, propose the candidate
    stack, trial it against the current one, promote it only on a measured gain."""
