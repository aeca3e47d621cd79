"""The optional parts of stackpin and the one check that says which extra to install when one is missing.

`pip install stackpin` brings what validate, lock, render, diff and history need. The rest comes as extras
(the cluster commands, apply, status, rollback --apply, diff DEPLOYMENT@live, history --cluster, as
`stackpin[cluster]`: the official Kubernetes client)
(`pip install 'stackpin[report]'`, `stackpin[all]` for everything); their packages are imported only
inside the functions that use them, each behind `require`, so a missing one costs one line, not a traceback.
The extras' requirements are in pyproject.toml; tests/test_extras.py holds this table to them.
"""

from __future__ import annotations

import importlib.util

from stackpin.errors import StackpinError

# extra -> the import names its packages provide (all needed), and what needs it.
EXTRAS: dict[str, tuple[str, ...]] = {
    "cluster": ("kubernetes", "socks"),  # apply, status, rollback --apply, diff @live, history --cluster, rollout
    "plot": ("matplotlib",),  # bench plot, plan --chart
    "report": ("jinja2", "matplotlib"),  # report: the page's templates and its charts
    "manifests": ("kubernetes_validate",),  # built-in kinds' schemas: validate --manifests, bench job, ...
    "signing": ("cryptography", "sshsig"),  # --signing-key, --allowed-signers
    "tokenizer": ("tokenizers",),  # bench run --tokenizer
    "sim": ("aiconfigurator_core",),  # sim --model aiconfigurator
}


class MissingExtra(StackpinError):
    """An optional part is not installed. Exit 2, as for any problem with the environment: 1 means a check
    ran and found something (invalid manifests, drift), which a missing package must not be taken for."""


def _missing(extra: str) -> list[str]:
    missing = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module)  # finds without importing: the callers import lazily
        except ImportError:  # an import hook that refuses it
            found = None
        if found is None:
            missing.append(module)
    return missing


def have(extra: str) -> bool:
    """Whether every package of `extra` is installed."""
    return not _missing(extra)


def _command() -> str:
    """The running command as a user types it (`stackpin bench plot`), whatever the program was called."""
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return "this"
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["`stackpin", *reversed(names)]) + "`"


def require(extra: str, command: str | None = None) -> None:
    """Raise MissingExtra, naming the command and the extra to install, unless `extra` is installed.
    `command` overrides the running command's name (a flag that needs the extra: `stackpin validate --manifests`)."""
    missing = _missing(extra)
    if missing:
        who = f"`{command}`" if command else _command()
        raise MissingExtra(f"{who} needs the `{extra}` extra ({', '.join(missing)} not installed): "
                           f"pip install 'stackpin[{extra}]'")
