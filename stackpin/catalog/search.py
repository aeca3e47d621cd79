"""Where catalogs are found: site directories first, then the one bundled with stackpin.

`STACKPIN_CATALOG_PATH` names directories (separated as PATH is: `:` on POSIX) that hold
`engines/<engine>-<version>.json` and optionally `versions.yaml`, as `stackpin engines add --catalog DIR`
writes them. A site can so carry releases newer than its stackpin; the first directory that has a
release's file wins, the bundled catalog is searched last. A profile may name directories too
(`spec.catalogPath`): while one stack is checked, locked or rendered (`profile_catalogs`), they are
searched first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from stackpin.errors import StackpinError

ENV = "STACKPIN_CATALOG_PATH"
# The catalog directories of the stack being worked on (spec.catalogPath), set by profile_catalogs.
_PROFILE_DIRS: ContextVar[tuple[Path, ...]] = ContextVar("stackpin_profile_catalogs", default=())


def bundled() -> Path:
    """The catalog shipped in the package: its own directory. What importlib.resources.files would give
    for an installed package, without importing importlib.resources (tempfile, shutil, random: a few ms
    of every cold command; the validate path deliberately never imports tempfile). Made once: every rule's
    catalog lookup asks (`stackpin search` validates thousands of candidates)."""
    return _BUNDLED


_BUNDLED = Path(__file__).parent


def site_dirs() -> tuple[Path, ...]:
    """The site catalog directories, in search order: the current stack's `spec.catalogPath`, then the
    ones STACKPIN_CATALOG_PATH names (empty entries skipped)."""
    value = os.environ.get(ENV, "")
    return (*_PROFILE_DIRS.get(), *(Path(part) for part in value.split(os.pathsep) if part))


@contextmanager
def profile_catalogs(dirs: Sequence[str], where: str = "") -> Iterator[None]:
    """Search a profile's `spec.catalogPath` directories first while the block runs. Relative ones are
    taken from the working directory, as STACKPIN_CATALOG_PATH's are (stackpin runs from the repository
    root, where a lock records its profile); one that is not a directory is bad input: the stack would
    otherwise be checked against other catalogs than its author meant. `where` (file:line:col, a lock)
    starts the error line."""
    paths = tuple(Path(d) for d in dirs)
    missing = [str(p) for p in paths if not p.is_dir()]
    if missing:
        prefix = f"{where}: " if where else ""
        where_from = " (relative to the working directory)" if any(not Path(m).is_absolute() for m in missing) else ""
        raise StackpinError(f"{prefix}spec.catalogPath: {', '.join(missing)}: not a directory{where_from}",
                            "a catalog directory as `stackpin engines add --catalog DIR` writes one")
    token = _PROFILE_DIRS.set(paths)
    try:
        yield
    finally:
        _PROFILE_DIRS.reset(token)


SearchPath = tuple[Path, ...]


def search_path() -> SearchPath:
    """Every catalog directory, searched in this order: the site's, then the bundled one."""
    return (*site_dirs(), bundled())


def engine_file_name(engine: str, version: str) -> str:
    return f"{engine}-{version}.json"


# A release's engine catalog is 100-200 KB and versions.yaml a few KB; a site directory is another team's, and a
# file there far beyond that is a mistake, not a catalog.
MAX_CATALOG_FILE_BYTES = 16 * 1024 * 1024


def read_catalog_file(path: Path) -> str:
    """The text of a catalog directory's file: a regular file of at most MAX_CATALOG_FILE_BYTES, in UTF-8; else
    StackpinError, one line naming it."""
    from stackpin.yamlio import read_regular

    try:
        return read_regular(path, MAX_CATALOG_FILE_BYTES).decode("utf-8")
    except OSError as exc:
        raise StackpinError(f"{path}: cannot read the catalog file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise StackpinError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def find_engine_file(engine: str, version: str, path: SearchPath | None = None) -> Path | None:
    """The first `engines/<engine>-<version>.json` on the search path, or None."""
    for directory in search_path() if path is None else path:
        candidate = directory.joinpath("engines", engine_file_name(engine, version))
        if candidate.is_file():
            return candidate
    return None


def where(directory: Path) -> str:
    """How a catalog directory is named to users: its path, or "bundled"."""
    return "bundled" if directory == bundled() else str(directory)
