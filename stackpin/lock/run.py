"""Library twin of `stackpin lock`: validate, resolve, then write every lockfile or none."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from stackpin.errors import StackpinError
from stackpin.lock.lockfile import (
    Sources,
    StackLock,
    StackMismatch,
    lock_path,
    lock_profiles,
    profile_relpath,
    read_existing_locks,
    write_locks,
)
from stackpin.lock.resolvers import HfCacheSource, HubSource, LayoutSource, ModelSource, RegistrySource, project_path
from stackpin.profile.loader import load_profiles
from stackpin.validate import Severity, run_rules
from stackpin.validate.check import duplicate_names


class Locked(NamedTuple):
    """One lockfile written: where, and the lock it holds."""

    path: Path
    lock: StackLock


def run_lock(paths: Sequence[Path], lockdir: Path, *, offline: bool = False, mirrors: Mapping[str, str] | None = None,
             oci_layout: str | None = None, hf_cache: str | None = None, hf_endpoint: str | None = None,
             docker_config: str | None = None, timeout: float | None = None,
             on_note: Callable[[str], None] | None = None) -> list[Locked]:
    locks = lock_stacks(paths, lockdir, offline=offline, mirrors=mirrors, oci_layout=oci_layout, hf_cache=hf_cache,
                        hf_endpoint=hf_endpoint, docker_config=docker_config, timeout=timeout, on_note=on_note)
    # Everything resolved: only now touch the lock directory, all files or none.
    return [Locked(path, lock) for path, lock in zip(write_locks(locks, lockdir), locks, strict=True)]


def lock_stacks(paths: Sequence[Path], lockdir: Path, *, offline: bool = False,
                mirrors: Mapping[str, str] | None = None, oci_layout: str | None = None, hf_cache: str | None = None,
                hf_endpoint: str | None = None, docker_config: str | None = None, timeout: float | None = None,
                on_note: Callable[[str], None] | None = None, reuse: bool = True) -> list[StackLock]:
    """Validate and resolve, writing nothing: the locks `run_lock` writes. They name their profiles and
    local sources relative to `lockdir`'s parent (the project root). `reuse=False` (a candidate stack
    locked beside the current one, `stackpin upgrade trial`) neither reads the lockfiles already in
    `lockdir` nor reuses their pins: the candidate usually shares the current stack's name."""
    deadline_at = None if timeout is None else time.monotonic() + timeout
    loaded = load_profiles(paths)
    names = [item.profile.name for item in loaded]
    duplicate_names(loaded)
    errors = [f for item in loaded for f in run_rules(item) if f.severity == Severity.error]
    if errors:
        raise StackMismatch("\n".join(str(f) for f in errors) + "\nnot locked: fix the errors above")
    # Profile mirrors first, command-line mirrors win: a site's mirror is a flag, not a profile edit.
    merged_mirrors = {}
    for item in loaded:
        merged_mirrors.update(item.profile.spec.mirrors)
    merged_mirrors.update(mirrors or {})
    root = lockdir.resolve().parent  # the project root: lockfiles name local sources relative to it
    images = (LayoutSource(Path(oci_layout), project_path(Path(oci_layout), root)) if oci_layout
              else RegistrySource(merged_mirrors, docker_config, deadline_at=deadline_at))
    models: ModelSource
    if hf_cache:
        models = HfCacheSource(Path(hf_cache), project_path(Path(hf_cache), root))
    elif hf_endpoint:
        models = HubSource(endpoint=hf_endpoint, deadline_at=deadline_at)
    else:  # HubSource's default endpoint: $HF_ENDPOINT or the Hub
        models = HubSource(deadline_at=deadline_at)
    def replace_invalid(path: Path, exc: StackpinError) -> None:
        if on_note is not None:
            on_note(f"{path} is not a valid lockfile ({exc.lines()[0]}); it will be replaced")

    previous = read_existing_locks(lockdir, names, on_invalid=None if offline else replace_invalid) if reuse else {}
    for item in loaded:
        old = previous.get(item.profile.name)
        mine = profile_relpath(item.path, lockdir)
        if old is not None and old.metadata.profile != mine:
            raise StackpinError(f"{lock_path(lockdir, item.profile.name)} is the lock of {old.metadata.profile}, "
                                f"not of {mine}: both name the stack {item.profile.name!r}",
                                "give the profile its own metadata.name, or delete the old lockfile if the "
                                "profile moved")
    sources = Sources(images=images, models=models, previous=previous)
    locks = lock_profiles(loaded, sources, lockdir, offline=offline)
    # Now the autotune caches' contents are known (each lock records them): the rules that compare them
    # with the stack (SP205) run before anything is written.
    for item, lock in zip(loaded, locks, strict=True):
        cache = lock.resolved.autotune_cache
        directories = cache.config_directories() if cache is not None else None
        if directories is not None:
            errors += [f for f in run_rules(item, autotune_cache=directories) if f.severity == Severity.error]
    if errors:
        raise StackMismatch("\n".join(str(f) for f in errors) + "\nnot locked: fix the errors above")
    return locks
