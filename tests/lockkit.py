"""Locks for the shipped profiles (and variants) without a registry or the Hub.

The demo mirror (stackpin.demo) supplies stand-in runtime images, autotune caches in vLLM's layout
and model revisions, built deterministically, so the locks (and everything rendered from them) have
the same digests on every machine.

    from tests.lockkit import shipped_locks, lock_paths
    locks = shipped_locks()                  # {name: StackLock}, built once per process
    lock_paths(tmp_path / "lockfiles")       # writes the lockfiles for CLI tests
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import msgspec

from stackpin.demo.mirror import build_demo_mirror
from stackpin.lock.lockfile import Sources, StackLock, lock_profiles, write_locks
from stackpin.lock.resolvers import HfCacheSource, LayoutSource
from stackpin.profile.loader import LoadedProfile, load_profile

ROOT = Path(__file__).resolve().parent.parent
PROFILES_DIR = ROOT / "profiles" / "deepseek-v4.1-flash"
SHIPPED = sorted(PROFILES_DIR.glob("*.yaml"))


def fill_mirror(dest: Path, loaded: Sequence[LoadedProfile]) -> tuple[LayoutSource, HfCacheSource]:
    """The demo mirror's stand-ins (stackpin.demo) for every reference `loaded` profiles make."""
    build_demo_mirror(dest, [item.profile for item in loaded])
    return LayoutSource(dest / "oci"), HfCacheSource(dest / "hf")


def lock_loaded(loaded: Sequence[LoadedProfile], lockdir: Path | None = None) -> list[StackLock]:
    """Locks for already-loaded profiles, resolved against a fresh stand-in mirror."""
    with tempfile.TemporaryDirectory(prefix="lockkit-") as tmp:
        images, models = fill_mirror(Path(tmp), loaded)
        return lock_profiles(loaded, Sources(images=images, models=models), lockdir or ROOT / "lockfiles")


def lock_files(paths: Sequence[Path], lockdir: Path | None = None) -> list[StackLock]:
    return lock_loaded([load_profile(p) for p in paths], lockdir)


@cache
def shipped_locks() -> dict[str, StackLock]:
    """{name: lock} for every shipped profile (recorded as if locked into <repo>/lockfiles)."""
    return {lock.metadata.name: lock for lock in lock_files(SHIPPED)}


def lock_paths(lockdir: Path, paths: Sequence[Path] = tuple(SHIPPED)) -> list[Path]:
    """Write lockfiles for `paths` into `lockdir`; returns their paths."""
    return write_locks(lock_files(paths, lockdir), lockdir)


def with_profile_value(lock: StackLock, path: tuple[str, ...], value: object) -> StackLock:
    """The lock with one field of its effective profile set (render's input edited in place; the
    digest is left as it was, as a hand-edited lock would)."""
    data = lock.to_data()
    node = data["profile"]
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return msgspec.convert(data, StackLock)


def dynamo_142_variant(directory: Path) -> Path:
    """The launch profile moved to Dynamo 1.4.2 (vLLM 0.26.0): a stack rendered as v1alpha1."""
    variant = directory / "launch-142.yaml"
    variant.write_text(f"""apiVersion: stackpin.dev/v1
kind: StackProfile
extends: {PROFILES_DIR / 'gb300-launch.yaml'}
metadata:
  name: launch-142
spec:
  versions:
    dynamo: 1.4.2
    vllm: 0.26.0
    flashinfer: 0.6.14
    nixl: 1.3.2
    runtimeImage: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.2
""")
    return variant
