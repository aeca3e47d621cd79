"""A published package file (wheel or sdist) read without installing or importing it: its metadata
(name, version, Requires-Dist), its sha256, and the text of its Python sources below one directory."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from stackpin.errors import StackpinError

MAX_SOURCE_BYTES = 8 << 20  # one .py file; anything larger is not source worth reading
# The projects stackpin catalogs, by normalized name: what `engines add` calls them and which
# directory of the package holds the source the extractor reads.
PROJECTS = {"vllm": ("vllm", "vllm/"), "ai-dynamo": ("dynamo", "dynamo/"),
            "flashinfer-python": ("flashinfer", "flashinfer/")}


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


def _wheel(data: bytes) -> tuple[str, Iterator[tuple[str, bytes]]]:
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = archive.namelist()
    metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not metadata:
        raise PackageError("no *.dist-info/METADATA")

    def members() -> Iterator[tuple[str, bytes]]:
        for info in archive.infolist():
            if info.filename.endswith(".py") and info.file_size <= MAX_SOURCE_BYTES and (name := _safe(info.filename)):
                yield name, archive.read(info)

    return archive.read(metadata[0]).decode("utf-8"), members()


def _sdist(data: bytes) -> tuple[str, Iterator[tuple[str, bytes]]]:
    archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    metadata: str | None = None
    sources: list[tuple[str, bytes]] = []
    for member in archive:  # one pass: a .tar.gz cannot be read out of order cheaply
        if not member.isfile():
            continue
        parts = PurePosixPath(member.name).parts
        rel = _safe("/".join(parts[1:])) if len(parts) > 1 else None  # drop the "vllm-0.33.0/" top directory
        if rel == "PKG-INFO":
            handle = archive.extractfile(member)
            metadata = handle.read().decode("utf-8") if handle else None
        elif rel and rel.endswith(".py") and member.size <= MAX_SOURCE_BYTES:
            handle = archive.extractfile(member)
            if handle:
                sources.append((rel, handle.read()))
    if metadata is None:
        raise PackageError("no PKG-INFO at the top of the sdist")
    return metadata, iter(sources)


@contextmanager
def _archive_errors(name: str) -> Iterator[None]:
    """Whatever a hostile or broken archive raises, as one line naming the file."""
    try:
        yield
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise PackageError(f"{name}: not a readable archive ({exc})") from None
    except UnicodeDecodeError:
        raise PackageError(f"{name}: its METADATA / PKG-INFO is not UTF-8") from None
    except PackageError as exc:
        raise PackageError(f"{name}: {exc.message}") from None


def _open(name: str, data: bytes) -> tuple[str, Iterator[tuple[str, bytes]]]:
    """The metadata text and the members of a wheel or an sdist, by its file name."""
    if name.endswith(".whl"):
        return _wheel(data)
    if name.endswith((".tar.gz", ".tgz")):
        return _sdist(data)
    raise PackageError("neither a wheel (.whl) nor an sdist (.tar.gz)")


def requires_of(path: Path) -> tuple[str, ...]:
    """The Requires-Dist of any project's wheel or sdist, read from its METADATA / PKG-INFO only."""
    with _archive_errors(path.name):
        text, _ = _open(path.name, path.read_bytes())
    return tuple(sorted(HeaderParser().parsestr(text).get_all("Requires-Dist") or ()))


def read_package(path: Path, data: bytes | None = None) -> Package:
    """Read a wheel (.whl) or sdist (.tar.gz) of vllm, ai-dynamo or flashinfer-python."""
    data = path.read_bytes() if data is None else data
    with _archive_errors(path.name):
        text, members = _open(path.name, data)
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
    return Package(project=project, version=version, filename=path.name, sha256=hashlib.sha256(data).hexdigest(),
                   files=files, requires=tuple(sorted(metadata.get_all("Requires-Dist") or ())))
