"""Local files written whole or not at all, and copies checked against the hash that names them
(shared by `stackpin mirror`'s OCI layout and Hugging Face cache destinations).

A file appears under its final name only by a rename after its bytes were written, flushed and
checked: a run killed at any point leaves either the old state or the new one, plus at most a
`.part` file that the next run truncates and writes again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from stackpin.errors import IntegrityError, ResolveError

CHUNK = 8 << 20  # bytes read and hashed at a time: what one copy holds in memory
PART = ".part"


def part_of(path: Path) -> Path:
    """The file a copy to `path` writes first: hidden, beside it (the same file system, so the rename is atomic)."""
    return path.with_name(f".{path.name}{PART}")


def publish(part: Path, path: Path) -> None:
    """Move a finished `part` to its name, and make the rename durable."""
    os.replace(part, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_whole(path: Path, data: bytes) -> None:
    """`data` at `path` through a `.part` file and a rename."""
    part = part_of(path)
    with part.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    publish(part, path)


def hasher_for(name: str) -> tuple[Callable[[bytes], None], Callable[[], str]]:
    """(update, digest) for a content name: `sha256:<hex>` (OCI), a bare sha256 hex (a Hugging Face
    cache's blob of a Git LFS file) or a 40-hex Git blob id (its blob of a file stored in Git, hashed
    as `blob <size>\\0<content>`; the caller feeds that header first)."""
    algorithm = "sha1" if len(name) == 40 else "sha256"
    state = hashlib.new(algorithm)
    return state.update, state.hexdigest


def copy_verified(source: Path, dest: Path, name: str, size: int, what: str,
                  on_bytes: Callable[[int], None] | None = None) -> None:
    """Copy `source` (exactly `size` bytes) to `dest` through its `.part` file, checking the bytes against
    `name`, which `hasher_for` reads; IntegrityError, and `dest` untouched, when they differ."""
    expected = name.removeprefix("sha256:")
    update, hexdigest = hasher_for(expected)
    if len(expected) == 40:
        update(b"blob %d\0" % size)
    part, copied = part_of(dest), 0
    try:
        with _open_regular(source, what) as src, part.open("wb") as out:
            while chunk := src.read(min(CHUNK, size + 1 - copied)):
                copied += len(chunk)
                if copied > size:
                    raise IntegrityError(f"{what}: more than the {size} bytes expected")
                update(chunk)
                out.write(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        if copied != size:
            raise IntegrityError(f"{what}: {copied} bytes, expected {size}")
        if hexdigest() != expected:
            raise IntegrityError(f"{what}: content has digest {hexdigest()}, expected {expected}")
    except FileNotFoundError:
        part.unlink(missing_ok=True)
        raise ResolveError(f"{what} is missing") from None
    except BaseException:
        part.unlink(missing_ok=True)
        if on_bytes is not None and copied:
            on_bytes(-copied)
        raise
    publish(part, dest)


def _open_regular(path: Path, what: str) -> BinaryIO:
    """`path` open for reading if it is a regular file: a FIFO or device in a source layout or cache is refused
    (opening a FIFO blocks until a writer comes; O_NONBLOCK opens it at once, and fstat tells)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ResolveError(f"{what}: {path} is not a regular file")
    return os.fdopen(fd, "rb")


def present(path: Path, size: int) -> bool:
    """A file already at `path` with the expected size: written by a rename, so complete."""
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False


def sweep_parts(directory: Path) -> int:
    """Remove the `.part` files an interrupted run left in `directory`; how many."""
    removed = 0
    for part in directory.glob(f".*{PART}"):
        part.unlink(missing_ok=True)
        removed += 1
    return removed


@contextmanager
def only_writer(directory: Path, what: str) -> Iterator[None]:
    """An exclusive flock on `directory` while the block runs; a second writer is refused at once."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResolveError(f"{what}: another stackpin mirror is writing it") from None
        yield
    finally:
        os.close(fd)
