"""`git:REF:PATH`: a profile or lockfile as it was at a git revision, read with git itself.

The file and every base its `extends:` chain names are copied, at the same revision, into a
temporary directory with the repository's layout, so relative `extends:` paths resolve exactly as
they did at that revision (a base edited since does not leak in). Errors name `git:REF:PATH`,
never the temporary copy.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from stackpin.errors import InputError, Location, Problem, StackpinError
from stackpin.profile.model import LOCK_KIND
from stackpin.yamlio import MAX_INPUT_BYTES, load_data

PREFIX = "git:"
_TIMEOUT_S = 60  # one local git command; a repository on a hung network filesystem must not hang us


@dataclass(frozen=True)
class GitSpec:
    ref: str
    path: str  # as written: root-relative, or ./ ../ relative to the working directory (as git reads it)

    @property
    def label(self) -> str:
        return f"{PREFIX}{self.ref}:{self.path}"


def parse_git_spec(spec: str) -> GitSpec:
    """`git:REF:PATH`. A ref cannot hold ':' (git check-ref-format), so the first ':' ends it."""
    ref, sep, path = spec.removeprefix(PREFIX).partition(":")
    if not sep or not ref or not path:
        raise StackpinError(f"{spec}: expected git:REF:PATH (for example git:HEAD~1:profiles/x.yaml)")
    if ref.startswith("-"):
        raise StackpinError(f"{spec}: a git revision cannot start with '-'")
    return GitSpec(ref, path)


def _git(args: list[str], cwd: Path, label: str) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("git")
    if exe is None:
        raise StackpinError(f"{label}: git is not installed")
    try:
        return subprocess.run([exe, *args], cwd=cwd, capture_output=True, check=False, timeout=_TIMEOUT_S,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        raise StackpinError(f"{label}: git did not answer within {_TIMEOUT_S} s") from None
    except OSError as exc:
        raise StackpinError(f"{label}: cannot run git: {exc.strerror or exc}") from None


def _out(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stdout.decode("utf-8", "replace").strip()


class _Repo:
    def __init__(self, spec: GitSpec, cwd: Path) -> None:
        self.spec, self.cwd = spec, cwd
        top = _git(["rev-parse", "--show-toplevel"], cwd, spec.label)
        if top.returncode != 0:
            raise StackpinError(f"{spec.label}: {cwd} is not inside a git repository ({clip_err(top)})")
        self.top = Path(_out(top))
        found = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{spec.ref}^{{commit}}"], cwd,
                     spec.label)
        if found.returncode != 0:
            raise StackpinError(f"{spec.label}: unknown git revision {spec.ref!r}")
        self.commit = _out(found)

    def root_relative(self) -> str:
        """PATH as a path from the repository root, the way `git show REF:PATH` reads it."""
        path = self.spec.path
        if os.path.isabs(path):
            try:
                path = Path(path).resolve().relative_to(self.top.resolve()).as_posix()
            except ValueError:
                raise StackpinError(f"{self.spec.label}: {path} is outside the repository {self.top}") from None
        elif path.startswith(("./", "../")) or path in (".", ".."):
            prefix = _out(_git(["rev-parse", "--show-prefix"], self.cwd, self.spec.label))
            path = prefix + path
        path = posixpath.normpath(path)
        if path == ".." or path.startswith("../"):
            raise StackpinError(f"{self.spec.label}: {self.spec.path} is outside the repository")
        return path

    def blob(self, path: str) -> bytes | None:
        """The file's bytes at the revision; None when there is no file there."""
        kind = _git(["cat-file", "-t", f"{self.commit}:{path}"], self.cwd, self.spec.label)
        if kind.returncode != 0 or _out(kind) != "blob":
            return None
        size = int(_out(_git(["cat-file", "-s", f"{self.commit}:{path}"], self.cwd, self.spec.label)) or 0)
        if size > MAX_INPUT_BYTES:
            raise StackpinError(f"{self.spec.label}: {path} is {size} bytes at {self.spec.ref}, more than a "
                                f"profile or lockfile can be ({MAX_INPUT_BYTES})")
        data = _git(["cat-file", "blob", f"{self.commit}:{path}"], self.cwd, self.spec.label)
        if data.returncode != 0:
            raise StackpinError(f"{self.spec.label}: git cat-file failed: {clip_err(data)}")
        return data.stdout


def clip_err(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[0][:200] if lines else f"exit {proc.returncode}"


def _extends_of(data: bytes) -> str | None:
    """The `extends:` of a profile, if it has one (a lockfile or unreadable YAML: none; the loader
    reports what is wrong with it)."""
    try:
        doc = load_data(data)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict) or doc.get("kind") == LOCK_KIND:
        return None
    parent = doc.get("extends")
    return parent if isinstance(parent, str) and parent else None


def materialize(spec: GitSpec, dest: Path, cwd: Path) -> Path:
    """Copy the file and its `extends:` chain at the revision under `dest`; the copy's path."""
    repo = _Repo(spec, cwd)
    first = repo.root_relative()
    current: str | None = first
    seen: set[str] = set()
    while current is not None and current not in seen:
        seen.add(current)
        data = repo.blob(current)
        if data is None:
            if current == first:
                raise StackpinError(f"{spec.label}: no file {first} at {spec.ref}")
            break  # a missing base: the loader names it at the `extends:` that asks for it
        target = dest / current
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        parent = _extends_of(data)
        if parent is None or posixpath.isabs(parent):
            break
        base = posixpath.normpath(posixpath.join(posixpath.dirname(current), parent))
        current = None if base == ".." or base.startswith("../") else base
    return dest / first


@contextmanager
def relabeled(tmp: Path, spec: GitSpec) -> Iterator[None]:
    """Errors raised inside name `git:REF:path` instead of the temporary copy under `tmp`."""
    prefix = str(tmp) + os.sep
    label = f"{PREFIX}{spec.ref}:"

    def fix(text: str) -> str:
        return text.replace(prefix, label)

    try:
        yield
    except InputError as exc:
        raise InputError([Problem(Location(fix(p.location.file), p.location.line, p.location.col), p.field,
                                  fix(p.message)) for p in exc.problems]) from None
    except StackpinError as exc:
        raised = StackpinError(fix(exc.message), exc.hint and fix(exc.hint))
        raised.exit_code = exc.exit_code
        raise raised from None
