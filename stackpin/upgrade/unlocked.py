"""A profile as a lock whose references stay as written, for what must be rendered before the stack can be
locked: the candidate's autotune capture Job (the cache it captures is what the candidate's lock will pin)."""

from __future__ import annotations

from stackpin.catalog import load_catalog
from stackpin.lock.lockfile import (
    LockedImage,
    LockedModel,
    LockMetadata,
    ResolvedSection,
    StackLock,
    effective_profile,
    engines_of,
    sha256,
    stack_digest,
)
from stackpin.profile.loader import LoadedProfile

UNLOCKED = "not locked: as the profile writes it"


def unlocked_lock(loaded: LoadedProfile) -> StackLock:
    """The runtime image by its tag, the model at its requested revision, no autotune cache."""
    from stackpin.lock.oci.reference import ImageRef

    profile = loaded.profile
    image = str(ImageRef.parse(profile.spec.versions.runtime_image))
    arch = load_catalog().platforms[profile.spec.target.platform].cpu_arch
    section = ResolvedSection(
        images={"runtime": LockedImage(reference=image, digest=UNLOCKED, pinned=image, platform=f"linux/{arch}",
                                       platform_digest=UNLOCKED, resolved_via=UNLOCKED)},
        model=LockedModel(id=profile.spec.model.id, requested=profile.spec.model.revision,
                          revision=profile.spec.model.revision, resolved_via=UNLOCKED),
        engines=engines_of(profile))
    document = effective_profile(profile)
    return StackLock(metadata=LockMetadata(name=profile.name, profile=str(loaded.path),
                                           profile_digest=sha256(document)),
                     stack_digest=stack_digest(document, section), profile=document, resolved=section)
