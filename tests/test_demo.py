"""stackpin.demo: the stand-in autotune cache is published in the same mountable image form as
`stackpin autotune pack`, with the stand-in notes on its index."""

from __future__ import annotations

from pathlib import Path

from stackpin.autotune.cache import ARTIFACT_TYPE, TYPE_ANNOTATION
from stackpin.autotune.fetch import fetch_cache
from stackpin.autotune.verify import verify_cache
from stackpin.catalog import load_catalog
from stackpin.demo.mirror import STAND_IN, add_stand_in_cache
from stackpin.lock.lockfile import AUTOTUNE_ANNOTATIONS
from stackpin.lock.oci.media import OCI_INDEX
from stackpin.lock.ocilayout import LayoutResolver, LayoutWriter
from stackpin.lock.resolvers import is_stand_in
from stackpin.profile.loader import load_profile

PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "deepseek-v4.1-flash" / "gb300-disagg-wide-ep.yaml"


def test_stand_in_cache_is_a_mountable_image(tmp_path: Path) -> None:
    profile = load_profile(PROFILE).profile
    add_stand_in_cache(LayoutWriter(tmp_path / "oci"), profile)
    ref = profile.spec.autotune.cache
    resolved = LayoutResolver(tmp_path / "oci").resolve(ref)
    assert resolved.media_type == OCI_INDEX
    assert sorted(resolved.platforms) == ["linux/amd64", "linux/arm64"]
    assert is_stand_in(resolved) and STAND_IN.items() <= resolved.annotations.items()
    assert resolved.annotations[TYPE_ANNOTATION] == ARTIFACT_TYPE
    assert resolved.annotations[AUTOTUNE_ANNOTATIONS["flashinfer"]] == profile.spec.versions.flashinfer
    assert resolved.annotations[AUTOTUNE_ANNOTATIONS["device"]] == (
        load_catalog().gpu_of(profile.spec.target.platform).device_name)
    fetched = fetch_cache(ref, tmp_path / "got", layout=tmp_path / "oci")
    assert fetched.mountable and fetched.digest == resolved.digest
    # Everything but the runtime image's library versions, which only the pinned image can report.
    assert [m for m in verify_cache(fetched.info, profile, load_catalog()) if m.blocking] == []
    # Same profile, same digest: the shipped lockfiles stay byte for byte.
    add_stand_in_cache(LayoutWriter(tmp_path / "oci2"), profile)
    assert LayoutResolver(tmp_path / "oci2").resolve(ref).digest == resolved.digest
