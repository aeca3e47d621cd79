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
import sys
from collections.abc import Sequence
from pathlib import Path

from stackpin.checks import expand_profile_args
from stackpin.oci import ImageRef
from stackpin.ocilayout import LayoutWriter
from stackpin.profile import StackProfile, load_profile
from stackpin.resolvers import STAND_IN_ANNOTATION, STAND_IN_MARKER, write_hf_cache_ref

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
        if profile.spec.autotune.mode == "replay" and profile.spec.autotune.cache:
            from stackpin.autotune import add_stand_in_cache

            add_stand_in_cache(layout, profile, extra_annotations=STAND_IN)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m stackpin.demo DEST PROFILE_OR_DIR...", file=sys.stderr)
        return 2
    profiles = [load_profile(p).profile for p in expand_profile_args(argv[1:])]
    build_demo_mirror(Path(argv[0]), profiles)
    print(f"demo mirror with stand-ins for {len(profiles)} profiles: {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
