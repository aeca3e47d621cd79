"""The model half of `stackpin mirror`: copy each locked model revision's snapshot from one Hugging
Face cache directory to another, so that `stackpin lock --hf-cache DEST` resolves the same commit.

A cache holds `models--org--name/refs/<revision>` (the commit), `snapshots/<commit>/<path>` (links to
`../../blobs/<etag>`) and `blobs/<etag>`, where the etag is the file's sha256 when Git LFS stores it
and its Git blob id (sha1 over `blob <size>\\0<content>`) when Git does (huggingface_hub's
file_download.py says so). Both are checked as each blob is copied. A cache marked as stand-ins (the
demo's) stays marked.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackpin.errors import ResolveError, clip
from stackpin.lock.localcopy import copy_verified, part_of, present, publish, sweep_parts, write_whole
from stackpin.lock.resolvers import COMMIT, STAND_IN_MARKER
from stackpin.profile.identifiers import model_id_problem, revision_problem

if TYPE_CHECKING:
    from stackpin.lock.lockfile import StackLock

_ETAG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class MirroredModel:
    id: str
    revision: str
    to: str
    files: int  # in the snapshot
    blobs_copied: int
    blobs_present: int
    unverified: int  # files stored in the snapshot itself (no content-named blob to check them by)
    stand_in: bool

    def to_data(self) -> dict[str, Any]:
        return {"id": self.id, "revision": self.revision, "to": self.to, "files": self.files,
                "blobsCopied": self.blobs_copied, "blobsPresent": self.blobs_present,
                "unverified": self.unverified, "standIn": self.stand_in}


def mirror_models(locks: Sequence[StackLock], source: Path, dest: Path) -> list[MirroredModel]:
    """Each distinct locked (model, requested revision, commit) copied from cache `source` to `dest`."""
    if not source.is_dir():
        raise ResolveError(f"--hf-cache {source}: not a directory")
    stand_in = (source / STAND_IN_MARKER).is_file()
    dest.mkdir(parents=True, exist_ok=True)
    if stand_in and not (dest / STAND_IN_MARKER).exists():
        write_whole(dest / STAND_IN_MARKER, (source / STAND_IN_MARKER).read_bytes()[:4096])
    wanted = sorted({(lock.resolved.model.id, lock.resolved.model.requested, lock.resolved.model.revision)
                     for lock in locks})
    return [copy_revision(source, dest, model_id, requested, commit, stand_in)
            for model_id, requested, commit in wanted]


def copy_revision(source: Path, dest: Path, model_id: str, requested: str, commit: str,
                  stand_in: bool) -> MirroredModel:
    for value, problem in ((model_id, model_id_problem(model_id)), (requested, revision_problem(requested))):
        if problem:
            raise ResolveError(f"{clip(value)!r} {problem}")
    if not COMMIT.fullmatch(commit):
        raise ResolveError(f"model {model_id}: revision {clip(commit)!r} is not a 40-hex commit")
    repo = f"models--{model_id.replace('/', '--')}"
    src, dst = source / repo, dest / repo
    snapshot = src / "snapshots" / commit
    files = blobs_copied = blobs_present = unverified = 0
    if snapshot.is_dir():
        (dst / "blobs").mkdir(parents=True, exist_ok=True)
        sweep_parts(dst / "blobs")
        for path in sorted(snapshot.rglob("*")):
            rel = path.relative_to(snapshot)
            out = dst / "snapshots" / commit / rel
            if path.is_dir() and not path.is_symlink():
                continue
            files += 1
            out.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                etag = _blob_of(path, src / "blobs", model_id)
                blob = dst / "blobs" / etag
                size = (src / "blobs" / etag).stat().st_size
                if present(blob, size):
                    blobs_present += 1
                else:
                    copy_verified(src / "blobs" / etag, blob, etag, size, f"blob {etag} of {model_id} in {source}")
                    blobs_copied += 1
                _link(out, Path(os.path.relpath(blob, out.parent)))
            elif path.is_file():
                unverified += 1
                if not present(out, path.stat().st_size):
                    _copy_plain(path, out)
    elif not stand_in:
        raise ResolveError(f"model {model_id}@{commit} has no snapshot in the Hugging Face cache {source}",
                           f"download it first (huggingface-cli download {model_id} --revision {commit})")
    if requested != commit:
        ref = dst / "refs" / requested
        if not ref.resolve().is_relative_to((dst / "refs").resolve()):
            raise ResolveError(f"model {model_id} revision {requested!r}: {ref} leads outside {dest}")
        ref.parent.mkdir(parents=True, exist_ok=True)
        write_whole(ref, commit.encode())
    return MirroredModel(id=model_id, revision=commit, to=str(dest), files=files, blobs_copied=blobs_copied,
                         blobs_present=blobs_present, unverified=unverified, stand_in=stand_in)


def _blob_of(link: Path, blobs: Path, model_id: str) -> str:
    """The etag a snapshot link points to, which must be a file in the repository's own blobs/."""
    target = link.resolve()
    if target.parent != blobs.resolve() or not target.is_file() or not _ETAG.fullmatch(target.name):
        raise ResolveError(f"{link} (model {model_id}) does not lead to a blob of its cache's blobs/ directory")
    return target.name


def _link(path: Path, target: Path) -> None:
    """`path` as a symbolic link to `target`, made under a temporary name and renamed over any old one."""
    if path.is_symlink() and Path(os.readlink(path)) == target:
        return
    part = part_of(path)
    part.unlink(missing_ok=True)
    part.symlink_to(target)
    publish(part, path)


def _copy_plain(source: Path, dest: Path) -> None:
    """A file with no content name to check it by, copied whole or not at all."""
    import shutil

    part = part_of(dest)
    try:
        shutil.copyfile(source, part)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    publish(part, dest)
