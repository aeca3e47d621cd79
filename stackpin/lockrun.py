"""Library twin of `stackpin lock`: validate, resolve, then write every lockfile or none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from stackpin.errors import StackpinError
from stackpin.lock import Sources, StackLock, StackMismatch, lock_profiles, read_existing_locks, write_lock
from stackpin.profile import load_profile
from stackpin.resolvers import HfCacheSource, HubSource, LayoutSource, ModelSource, RegistrySource
from stackpin.validate import Severity, run_rules


def run_lock(paths: Sequence[Path], lockdir: Path, *, offline: bool = False, mirrors: Mapping[str, str] | None = None,
             oci_layout: str | None = None, hf_cache: str | None = None, hf_endpoint: str | None = None,
             docker_config: str | None = None) -> list[tuple[Path, StackLock]]:
    loaded = [load_profile(p) for p in paths]
    names = [item.profile.name for item in loaded]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise StackpinError(f"several profiles are named {', '.join(duplicates)}; lockfiles are named after "
                            "metadata.name")
    errors = [f for item in loaded for f in run_rules(item) if f.severity == Severity.error]
    if errors:
        raise StackMismatch("\n".join(str(f) for f in errors) + "\nnot locked: fix the errors above")
    # Profile mirrors first, command-line mirrors win: a site's mirror is a flag, not a profile edit.
    merged_mirrors = {}
    for item in loaded:
        merged_mirrors.update(item.profile.spec.mirrors)
    merged_mirrors.update(mirrors or {})
    images = LayoutSource(Path(oci_layout)) if oci_layout else RegistrySource(merged_mirrors, docker_config)
    models: ModelSource = HfCacheSource(Path(hf_cache)) if hf_cache else HubSource(
        **({"endpoint": hf_endpoint} if hf_endpoint else {}))
    sources = Sources(images=images, models=models, previous=read_existing_locks(lockdir, names))
    locks = lock_profiles(loaded, sources, lockdir, offline=offline)
    # Everything resolved: only now touch the lock directory, one atomic rename per file.
    return [(write_lock(lock, lockdir), lock) for lock in locks]
