"""`stackpin engines list`: every release catalog on the search path, and which one is in force."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stackpin import jsonio
from stackpin.catalog.engine_kinds import KINDS
from stackpin.catalog.search import read_catalog_file, search_path, where
from stackpin.catalog.version import parse_version
from stackpin.errors import StackpinError

_FILE = re.compile(rf"^({'|'.join(re.escape(k.name) for k in KINDS)})-(.+)\.json$")


@dataclass(frozen=True)
class CatalogEntry:
    engine: str
    version: str
    where: str  # "bundled" or the site directory
    package: str  # the file it was extracted from
    sha256: str
    shadowed: bool  # a directory earlier on the search path has the same release


def list_catalogs() -> list[CatalogEntry]:
    """Releases by engine and PEP 440 version; for each, every directory that carries it, first wins."""
    entries: list[CatalogEntry] = []
    seen: set[tuple[str, str]] = set()
    for directory in search_path():
        engines = directory.joinpath("engines")
        if not engines.is_dir():
            continue
        for path in sorted(engines.iterdir(), key=lambda p: p.name):
            match = _FILE.match(path.name)
            if not match or not path.is_file():
                continue
            try:  # listed whatever it holds: `engines list` names the release, reading it names the problem
                doc = jsonio.loads(read_catalog_file(path))
            except (ValueError, StackpinError):
                doc = None
            source = doc.get("source") if isinstance(doc, dict) else None
            source = source if isinstance(source, dict) else {}
            key = (match.group(1), match.group(2))
            entries.append(CatalogEntry(key[0], key[1], where(directory), str(source.get("package", "?")),
                                        str(source.get("sha256", "?")), key in seen))
            seen.add(key)

    def order(entry: CatalogEntry) -> tuple[str, object, bool]:
        try:
            version: object = parse_version(entry.version)
        except ValueError:
            version = parse_version("0")
        return entry.engine, version, entry.shadowed

    return sorted(entries, key=order)
