"""Locks for the shipped profiles (and variants) without a registry or the Hub.

An OCI layout holds stand-in runtime images (arm64 + amd64) and autotune-cache artifacts annotated
with the FlashInfer version and GPU device each stack runs; a Hugging Face cache directory holds a
stable stand-in commit for every model revision. Both are built deterministically, so the locks
(and everything rendered from them) have the same digests on every machine.

    from tests.lockkit import shipped_locks, lock_paths
    locks = shipped_locks()                  # {name: StackLock}, built once per process
    lock_paths(tmp_path / "lockfiles")       # writes the lockfiles for CLI tests
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from stackpin.catalog import load_catalog
from stackpin.lock import AUTOTUNE_ANNOTATIONS, Sources, StackLock, lock_profiles, write_locks
from stackpin.ocilayout import LayoutWriter
from stackpin.profile import LoadedProfile, load_profile
from stackpin.resolvers import STAND_IN_ANNOTATION, STAND_IN_MARKER, HfCacheSource, LayoutSource, write_hf_cache_ref

ROOT = Path(__file__).resolve().parent.parent
PROFILES_DIR = ROOT / "profiles" / "deepseek-v4.1-flash"
SHIPPED = sorted(PROFILES_DIR.glob("*.yaml"))
STAND_IN = {STAND_IN_ANNOTATION: "true"}
CACHE_ARTIFACT_TYPE = "application/vnd.stackpin.autotune-cache.v1"


def fake_commit(model_id: str, revision: str) -> str:
    return hashlib.sha1(f"lockkit {model_id}@{revision}".encode()).hexdigest()


def fill_mirror(dest: Path, loaded: Sequence[LoadedProfile]) -> tuple[LayoutSource, HfCacheSource]:
    """Stand-ins for every reference `loaded` profiles make, in an OCI layout and an HF cache."""
    catalog = load_catalog()
    layout = LayoutWriter(dest / "oci")
    hf = dest / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (hf / STAND_IN_MARKER).write_text("lockkit stand-ins\n")
    for item in loaded:
        spec = item.profile.spec
        layout.add_image(spec.versions.runtime_image, [("linux", "arm64"), ("linux", "amd64")], STAND_IN)
        write_hf_cache_ref(hf, spec.model.id, spec.model.revision, fake_commit(spec.model.id, spec.model.revision))
        if spec.autotune.mode == "replay" and spec.autotune.cache:
            notes = {AUTOTUNE_ANNOTATIONS["flashinfer"]: spec.versions.flashinfer,
                     AUTOTUNE_ANNOTATIONS["device"]: catalog.gpu_of(spec.target.platform).device_name,
                     **STAND_IN}
            layer = f"lockkit autotune cache {spec.autotune.cache}".encode()
            layout.add_artifact(spec.autotune.cache, [(layer, "application/vnd.oci.image.layer.v1.tar", None)],
                                CACHE_ARTIFACT_TYPE, notes)
    return LayoutSource(dest / "oci"), HfCacheSource(hf)


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
