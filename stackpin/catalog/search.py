"""Where catalogs are found: site directories first, then the one bundled with stackpin.

`STACKPIN_CATALOG_PATH` names directories (separated as PATH is: `:` on POSIX) that hold
`engines/<engine>-<version>.json` and optionally `versions.yaml`, as `stackpin engines add --catalog DIR`
writes them. A site can so carry releases newer than its stackpin; the first directory that has a
release's file wins, the bundled catalog is searched last.
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

ENV = "STACKPIN_CATALOG_PATH"


def bundled() -> Traversable:
    return resources.files(__package__)


def site_dirs() -> tuple[Path, ...]:
    """The directories STACKPIN_CATALOG_PATH names, in order (empty entries skipped)."""
    value = os.environ.get(ENV, "")
    return tuple(Path(part) for part in value.split(os.pathsep) if part)


def search_path() -> tuple[Path | Traversable, ...]:
    """Every catalog directory, searched in this order: the site's, then the bundled one."""
    return (*site_dirs(), bundled())


def engine_file_name(engine: str, version: str) -> str:
    return f"{engine}-{version}.json"


def find_engine_file(engine: str, version: str,
                     path: tuple[Path | Traversable, ...] | None = None) -> Path | Traversable | None:
    """The first `engines/<engine>-<version>.json` on the search path, or None."""
    for directory in search_path() if path is None else path:
        candidate = directory.joinpath("engines", engine_file_name(engine, version))
        if candidate.is_file():
            return candidate
    return None


def where(directory: Path | Traversable) -> str:
    """How a catalog directory is named to users: its path, or "bundled"."""
    return "bundled" if directory == bundled() else str(directory)
