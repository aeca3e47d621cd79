"""The demo mirror: stand-in artifacts under the real reference names, as a site mirror would hold.

There is no access to nvcr.io or the Hugging Face Hub here and no digest may be invented, so
`make demo` builds a small local mirror (an OCI image layout plus a Hugging Face cache) holding
stand-ins, and locks the shipped profiles against it. Every stand-in says what it is: images and
artifacts carry the `dev.stackpin.stand-in` annotation and the cache a STACKPIN_STAND_IN file; locks
made from them record `standIn: true`, and render and diff show it.

Run: python -m stackpin.demo DEST PROFILE_OR_DIR...
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from stackpin.catalog import load_catalog
from stackpin.lock.oci.reference import ImageRef
from stackpin.lock.ocilayout import LayoutWriter
from stackpin.lock.resolvers import STAND_IN_ANNOTATION, STAND_IN_MARKER, write_hf_cache_ref
from stackpin.profile.loader import load_profile
from stackpin.profile.model import AutotuneMode, StackProfile
from stackpin.profile.topology import topology_of
from stackpin.validate.check import expand_profile_args

STAND_IN = {STAND_IN_ANNOTATION: "true",
            "org.opencontainers.image.description": "stackpin demo stand-in; not a production artifact"}


def stand_in_commit(model_id: str, revision: str) -> str:
    """A stable 40-hex name for a stand-in revision (sha1, like a git commit id, of a label)."""
    return hashlib.sha1(f"stackpin demo stand-in of {model_id}@{revision}".encode()).hexdigest()


def build_demo_mirror(dest: Path, profiles: Sequence[StackProfile]) -> None:
    layout = LayoutWriter(dest / "oci")
    hf = dest / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (hf / STAND_IN_MARKER).write_text("Stand-in revisions made by `python -m stackpin.demo`; not real commits.\n")
    for profile in profiles:
        image = ImageRef.parse(profile.spec.versions.runtime_image)
        if not image.pinned:
            layout.add_image(image, [("linux", "arm64"), ("linux", "amd64")], STAND_IN)
        model = profile.spec.model
        write_hf_cache_ref(hf, model.id, model.revision, stand_in_commit(model.id, model.revision))
        if profile.spec.autotune.mode == AutotuneMode.replay and profile.spec.autotune.cache:
            add_stand_in_cache(layout, profile)


def write_stand_in_cache(root: Path, profile: StackProfile) -> Path:
    """A captured-cache tree in vLLM's real layout for every pool of `profile`, holding stand-in
    tactics (the directory and file names, metadata keys and per-rank rules are vLLM's)."""
    from stackpin.autotune.cache import CACHE_DIR_NAME
    from stackpin.autotune.verify import arch_tokens, per_rank_files
    from stackpin.profile.tuning import SHARED_FILE, expected_files

    catalog = load_catalog()
    gpu = catalog.gpu_of(profile.spec.target.platform)
    versions = profile.spec.versions
    meta = {"flashinfer_version": versions.flashinfer, "gpu": gpu.device_name, "cuda_version": "stand-in",
            "cublas_version": "stand-in", "cudnn_version": "stand-in", "cudnn_frontend_version": "stand-in",
            "cutlass_dsl_version": "stand-in"}
    base = root / CACHE_DIR_NAME / versions.flashinfer / sorted(arch_tokens(gpu.sm_arch))[0]
    for pool in topology_of(profile, catalog).pools:
        # vLLM names the directory by its config hash, which only vLLM can compute; a stand-in
        # hash per pool keeps pools apart the same way.
        config_hash = hashlib.sha256(f"stand-in {profile.name} {pool.role}".encode()).hexdigest()
        per_rank = per_rank_files(profile.spec.engine_version)
        names = [name for _, _, name in expected_files(pool.spec)] if per_rank else [SHARED_FILE]
        for name in names:
            doc = {"_metadata": meta, f"stand-in ({pool.role}, {name})": ["StandInRunner", 0]}
            path = base / config_hash / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return root


def add_stand_in_cache(layout: LayoutWriter, profile: StackProfile) -> None:
    """The profile's cache reference as a stand-in cache in the published image form (an index over
    linux/arm64 and linux/amd64 images of one layer), the stand-in notes on the index."""
    from stackpin.autotune.cache import inspect_cache
    from stackpin.autotune.image import add_cache_to_layout

    ref = profile.spec.autotune.cache
    if ref is None:
        raise ValueError(f"{profile.name}: the profile names no autotune cache to stand in for")
    with tempfile.TemporaryDirectory() as tmp:
        info = inspect_cache(write_stand_in_cache(Path(tmp), profile))
        add_cache_to_layout(layout, ref, info, STAND_IN)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m stackpin.demo DEST PROFILE_OR_DIR...", file=sys.stderr)
        return 2
    profiles = [load_profile(p).profile for p in expand_profile_args(argv[1:])]
    build_demo_mirror(Path(argv[0]), profiles)
    print(f"demo mirror with stand-ins for {len(profiles)} profiles: {argv[0]}")
    return 0
