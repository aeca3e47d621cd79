"""A published package file (wheel or sdist) read without installing or importing it: its metadata
(name, version, Requires-Dist), its sha256, and the text of its Python sources below one directory."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath
from typing import IO

from stackpin.catalog.engine_kinds import KINDS
from stackpin.errors import StackpinError

MAX_SOURCE_BYTES = 8 << 20  # one .py file; anything larger is not source worth reading
# One archive, however small it is packed (a 3 MB .tar.gz of zeros unpacks to GBs). vLLM 0.11's sdist (47 MB)
# has ~4,000 members, ~200 MB unpacked, ~25 MB of Python under vllm/; its PKG-INFO (with the README) ~40 KB.
MAX_MEMBERS = 100_000
MAX_UNPACKED = 1 << 30  # every member, read or skipped
MAX_SOURCES = 128 << 20  # the .py members kept in memory (vllm/, tests/, ... alike)
MAX_METADATA = 4 << 20  # METADATA / PKG-INFO
# The projects stackpin catalogs, by normalized name: what `engines add` calls them and which
# directory of the package holds the source the extractor reads (stackpin.catalog.engine_kinds).
PROJECTS = {k.distribution: (k.name, k.sources) for k in KINDS}


class PackageError(StackpinError):
    """A file that is not a readable wheel or sdist of a package stackpin catalogs."""


def normalize(name: str) -> str:
    """A project name as PEP 503 compares them (`Flashinfer_Python` -> `flashinfer-python`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Package:
    project: str  # normalized project name: vllm, ai-dynamo, flashinfer-python
    version: str
    filename: str
    sha256: str
    files: Mapping[str, str]  # "vllm/envs.py" -> source text
    requires: tuple[str, ...]  # Requires-Dist, as published

    @property
    def engine(self) -> str:
        return PROJECTS[self.project][0]


def _safe(name: str) -> str | None:
    """A member name as a relative POSIX path, or None for absolute or escaping ones."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return None
    return str(path)


class _Budget:
    """What one archive may make stackpin unpack: members, bytes of all of them (skipping a tar member still
    decompresses it), bytes of the sources kept. Checked on the sizes an archive declares before a member is
    read: zipfile and tarfile never give more than the declared size of a member."""

    def __init__(self) -> None:
        self.members = self.unpacked = self.kept = 0

    def member(self, size: int) -> None:
        self.members += 1
        self.unpacked += size
        if self.members > MAX_MEMBERS:
            raise PackageError(f"more than {MAX_MEMBERS} members: not read")
        if self.unpacked > MAX_UNPACKED:
            raise PackageError(f"unpacks to more than {MAX_UNPACKED} bytes: not read")

    def keep(self, size: int) -> None:
        self.kept += size
        if self.kept > MAX_SOURCES:
            raise PackageError(f"more than {MAX_SOURCES} bytes of Python sources: not read")


def _metadata_text(handle: IO[bytes] | None, size: int) -> str | None:
    if handle is None:
        return None
    if size > MAX_METADATA:
        raise PackageError(f"its METADATA / PKG-INFO is {size} bytes, more than the {MAX_METADATA} read")
    return handle.read(MAX_METADATA + 1).decode("utf-8")


def _wheel(source: Path | IO[bytes], sources: bool) -> tuple[str, Iterator[tuple[str, bytes]]]:
    archive = zipfile.ZipFile(source)
    budget = _Budget()
    for info in archive.infolist():  # the central directory's sizes, before anything is unpacked
        budget.member(info.file_size)
    metadata = [i for i in archive.infolist()
                if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")]
    if not metadata:
        raise PackageError("no *.dist-info/METADATA")
    text = _metadata_text(archive.open(metadata[0]), metadata[0].file_size)
    assert text is not None

    def members() -> Iterator[tuple[str, bytes]]:
        for info in archive.infolist():
            if info.filename.endswith(".py") and info.file_size <= MAX_SOURCE_BYTES and (name := _safe(info.filename)):
                budget.keep(info.file_size)
                yield name, archive.read(info)

    return text, members() if sources else iter(())


def _sdist(source: Path | IO[bytes], sources: bool) -> tuple[str, Iterator[tuple[str, bytes]]]:
    """One pass in the archive's order (a .tar.gz cannot be read out of order cheaply); without `sources`, it
    stops at PKG-INFO."""
    opened = tarfile.open(source, mode="r:*") if isinstance(source, Path) else tarfile.open(fileobj=source, mode="r:*")
    metadata: str | None = None
    kept: list[tuple[str, bytes]] = []
    budget = _Budget()
    with opened as archive:
        for member in archive:
            budget.member(member.size if member.isfile() else 0)
            if not member.isfile():
                continue
            parts = PurePosixPath(member.name).parts
            rel = _safe("/".join(parts[1:])) if len(parts) > 1 else None  # drop the "vllm-0.33.0/" top directory
            if rel == "PKG-INFO":
                metadata = _metadata_text(archive.extractfile(member), member.size)
                if not sources:
                    break
            elif sources and rel and rel.endswith(".py") and member.size <= MAX_SOURCE_BYTES:
                budget.keep(member.size)
                handle = archive.extractfile(member)
                if handle:
                    kept.append((rel, handle.read(member.size)))
    if metadata is None:
        raise PackageError("no PKG-INFO at the top of the sdist")
    return metadata, iter(kept)


@contextmanager
def _archive_errors(name: str) -> Iterator[None]:
    """Whatever a hostile or broken archive raises, as one line naming the file."""
    try:
        yield
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise PackageError(f"{name}: not a readable archive ({exc})") from None
    except UnicodeDecodeError:
        raise PackageError(f"{name}: its METADATA / PKG-INFO is not UTF-8") from None
    except PackageError as exc:
        raise PackageError(f"{name}: {exc.message}") from None


def _open(name: str, source: Path | IO[bytes], sources: bool = True) -> tuple[str, Iterator[tuple[str, bytes]]]:
    """The metadata text and (with `sources`) the members of a wheel or an sdist, by its file name."""
    if name.endswith(".whl"):
        return _wheel(source, sources)
    if name.endswith((".tar.gz", ".tgz")):
        return _sdist(source, sources)
    raise PackageError("neither a wheel (.whl) nor an sdist (.tar.gz)")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def requires_of(path: Path) -> tuple[str, ...]:
    """The Requires-Dist of any project's wheel or sdist, read from its METADATA / PKG-INFO alone (an sdist is read
    up to its PKG-INFO, never whole)."""
    with _archive_errors(path.name):
        text, _ = _open(path.name, path, sources=False)
    return tuple(sorted(HeaderParser().parsestr(text).get_all("Requires-Dist") or ()))


def read_package(path: Path, data: bytes | None = None) -> Package:
    """Read a wheel (.whl) or sdist (.tar.gz) of vllm, ai-dynamo or flashinfer-python."""
    with _archive_errors(path.name):
        digest = hashlib.sha256(data).hexdigest() if data is not None else _sha256(path)
        text, members = _open(path.name, path if data is None else io.BytesIO(data))
        metadata = HeaderParser().parsestr(text)
        project, version = normalize(metadata.get("Name", "")), (metadata.get("Version") or "").strip()
        if project not in PROJECTS:
            raise PackageError(f"package {metadata.get('Name')!r} is not one stackpin catalogs "
                               f"({', '.join(PROJECTS)})")
        if not version:
            raise PackageError("its metadata has no Version")
        # The version becomes a file name (engines/<engine>-<version>.json): only a PEP 440 version may.
        from packaging.version import InvalidVersion, Version

        try:
            if str(Version(version)) != version:
                raise InvalidVersion(version)
        except InvalidVersion:
            raise PackageError(f"its metadata Version {version[:80]!r} is not a PEP 440 version") from None
        prefix = PROJECTS[project][1]
        files = {name: raw.decode("utf-8", errors="replace") for name, raw in members if name.startswith(prefix)}
    if not files:
        raise PackageError(f"{path.name}: no Python sources under {prefix}")
    return Package(project=project, version=version, filename=path.name, sha256=digest,
                   files=files, requires=tuple(sorted(metadata.get_all("Requires-Dist") or ())))
