"""Lockfiles: a profile with every floating reference pinned, named by its stack digest.

`lock_profiles` resolves the images, model revisions and autotune caches of many profiles at once
and returns `StackLock`s; `write_locks` writes them all or none. The stack digest is a sha256 over the
canonical bytes of what defines the stack (the effective profile and the pinned references); where
a digest was resolved (registry, mirror, layout) is recorded beside it but never hashed, so the same
stack locked through a mirror or a layout has the same digest.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from stackpin.backends import DEFAULT, names
from stackpin.catalog.site import SiteView
from stackpin.errors import InputError, Problem, StackpinError
from stackpin.jsonio import canonical_json
from stackpin.profile.model import LOCK_KIND, AutotuneMode, StackProfile
from stackpin.profile.tuning import ConfigDirectory, parse_ranks_summary
from stackpin.records import CamelRecord, load, problems_of
from stackpin.yamlio import dump_yaml, load_yaml, recover_writes, write_files

if TYPE_CHECKING:
    # Locking needs these; reading a lock (render) does not, so they load inside the functions.
    from stackpin.catalog import Catalog
    from stackpin.lock.oci.media import Resolved
    from stackpin.lock.oci.reference import ImageRef
    from stackpin.lock.resolvers import ImageSource, ModelRevision, ModelSource
    from stackpin.profile.loader import LoadedProfile
AUTOTUNE_ANNOTATIONS = {
    "flashinfer": "dev.stackpin.autotune.flashinfer",
    "device": "dev.stackpin.autotune.device",
    "ranks": "dev.stackpin.autotune.ranks",
    "files": "dev.stackpin.autotune.files",  # path -> sha256 (caches packed before it was added lack it)
}


class StackMismatch(StackpinError):
    """The stack does not hold together (for example a cache captured for another engine): exit 1."""

    exit_code = 1


class LockedImage(CamelRecord, frozen=True):
    reference: Annotated[str, msgspec.Meta(description="The reference as the profile wrote it, canonicalized.")]
    digest: Annotated[str, msgspec.Meta(description="Digest of the manifest or index the tag pointed to.")]
    pinned: Annotated[str, msgspec.Meta(description="repository@digest: what manifests use.")]
    platform: str
    platform_digest: str
    resolved_via: str
    stand_in: bool = False


class LockedModel(CamelRecord, frozen=True):
    id: str
    requested: str
    revision: str
    resolved_via: str
    stand_in: bool = False


class LockedArtifact(CamelRecord, frozen=True):
    reference: str
    digest: str
    pinned: str
    annotations: dict[str, str]
    resolved_via: str
    stand_in: bool = False

    def config_directories(self) -> list[ConfigDirectory] | None:
        """The cache's config directories as its `ranks` annotation records them; None when it records
        none or not in the form `stackpin autotune pack` writes (then nothing can be compared)."""
        ranks = self.annotations.get("ranks")
        return parse_ranks_summary(ranks) if ranks is not None else None

    def file_digests(self) -> dict[str, str] | None:
        """Path (under flashinfer_autotune_cache/) -> sha256 hex of every file, as `stackpin autotune
        pack` records them; None when the cache records none or not in that form."""
        import re

        import stackpin.jsonio as jsonio

        text = self.annotations.get("files")
        try:
            files = jsonio.loads(text) if text is not None else None
        except ValueError:
            return None
        if not isinstance(files, dict):
            return None
        if not all(isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)
                   for k, v in files.items()):
            return None
        return files

    def tree(self) -> str | None:
        """`<flashinfer version>/<arch list>`: the one directory below flashinfer_autotune_cache/ that
        vLLM's VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR stands for (the override replaces the whole
        `$VLLM_CACHE_ROOT/flashinfer_autotune_cache/<fi>/<arch>` root, docs/facts.md#autotune-cache-path);
        None unless the recorded files all lie below exactly one such directory."""
        files = self.file_digests()
        trees = {"/".join(path.split("/")[:2]) for path in files or ()}
        if len(trees) != 1 or any(path.count("/") != 3 for path in files or ()):
            return None
        return trees.pop()


class LockedEngines(CamelRecord, frozen=True, kw_only=True):
    dynamo: str
    vllm: str | None = None  # the serving engine's release: exactly one of these (spec.engine's)
    flashinfer: str
    nixl: str
    sglang: str | None = None

    def engine(self, name: str) -> str | None:
        value: str | None = getattr(self, name, None)
        return value


class ResolvedSection(CamelRecord, frozen=True):
    images: dict[str, LockedImage]
    model: LockedModel
    engines: LockedEngines
    autotune_cache: LockedArtifact | None = None
    # What the site measured on this stack's platform (stackpin.catalog.site): render reads these, never a
    # site.yaml, so the lock alone decides the bytes. Absent when no site overlay was found at lock time.
    site: SiteView | None = None

    @property
    def stand_in(self) -> bool:
        return bool(self.stand_ins())

    def stand_ins(self) -> list[tuple[str, str]]:
        """(which pin, what it pins) for each pin resolved through a stand-in (the demo mirror's): not
        production digests, so never applied to a cluster unnoticed."""
        named = [*((f"image {role}", image.pinned) for role, image in sorted(self.images.items()) if image.stand_in),
                 *([("model", f"{self.model.id}@{self.model.revision}")] if self.model.stand_in else [])]
        cache = self.autotune_cache
        if cache is not None and cache.stand_in:
            named.append(("autotune cache", cache.pinned))
        return named

    def to_data(self, *, exclude_none: bool = False) -> dict[str, Any]:
        """As `Record.to_data`; `exclude_none` leaves out an absent autotune cache (as lockfiles do)."""
        data = super().to_data()
        # One serving engine's release: the others' absent keys stay out (a vLLM lock reads as it always has).
        data["engines"] = {k: v for k, v in data["engines"].items() if v is not None}
        for key in ("autotuneCache", "site"):
            if exclude_none and data[key] is None:
                del data[key]
        return data


class LockMetadata(CamelRecord, frozen=True):
    name: str
    profile: Annotated[str, msgspec.Meta(
        description="Path of the profile, relative to the lockfile's directory parent.")]
    profile_digest: Annotated[str, msgspec.Meta(
        description="sha256 of the effective profile; lock --check compares it.")]


# dict=True: an instance dict for the cached stack_profile (a Struct has none otherwise); kw_only again
# for mypy (fields without a default follow apiVersion and kind).
class StackLock(CamelRecord, frozen=True, kw_only=True, dict=True):
    api_version: str = "stackpin.dev/v1"
    kind: str = LOCK_KIND
    metadata: LockMetadata
    stack_digest: str
    profile: dict[str, Any]
    resolved: ResolvedSection

    @cached_property
    def stack_profile(self) -> StackProfile:
        """The embedded profile as a StackProfile; raises ValueError (msgspec's) when it is none."""
        return StackProfile.from_data(self.profile)

    def to_data(self, *, exclude_none: bool = False) -> dict[str, Any]:
        """As `Record.to_data`; `exclude_none` as lockfiles are written (the profile's own nulls stay)."""
        data = super().to_data()
        data["resolved"] = self.resolved.to_data(exclude_none=exclude_none)
        return data

    @property
    def short_digest(self) -> str:
        return self.stack_digest.removeprefix("sha256:")[:12]


def sha256(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(obj)).hexdigest()


def effective_profile(profile: StackProfile) -> dict[str, Any]:
    """The merged profile with every default filled in, as plain data (extends already applied). Without
    spec.acknowledge: which warnings the owners accept changes nothing that runs, so it is neither locked
    nor hashed, and acknowledging one needs no new lock."""
    data = profile.to_data()
    del data["extends"], data["spec"]["acknowledge"]
    # Unset pass-through fields leave the document (and so every lock made before they existed) as it was.
    placement = data["spec"]["placement"]
    for key in ("podOverrides", "sharedMemory"):
        if not placement[key]:
            del placement[key]
    # Likewise the engine choice: vLLM, the default, and the versions of engines the stack does not run.
    spec = data["spec"]
    if spec["engine"] == DEFAULT:
        del spec["engine"]
    spec["versions"] = {k: v for k, v in spec["versions"].items() if v is not None}
    return data


def engines_of(profile: StackProfile) -> LockedEngines:
    """The engine versions a profile pins (its runtime image is locked as an image)."""
    versions = profile.spec.versions
    serving = {name: getattr(versions, name) for name in names()}  # every engine's field; one is set
    return LockedEngines(dynamo=versions.dynamo, flashinfer=versions.flashinfer, nixl=versions.nixl, **serving)


def stack_digest(profile: dict[str, Any], resolved: ResolvedSection) -> str:
    # Where each pin came from is provenance, not identity: leave resolvedVia/standIn out of the hash.
    what = resolved.to_data(exclude_none=True)
    for section in (*what["images"].values(), what["model"], what.get("autotuneCache") or {}):
        section.pop("resolvedVia", None)
        section.pop("standIn", None)
    if resolved.site is not None:  # the measured facts, not which file held them (another platform's may change)
        what["site"] = resolved.site.identity()
    return sha256({"profile": profile, "resolved": what})


def lock_path(lockdir: Path, name: str) -> Path:
    return lockdir / f"{name}.lock.yaml"


class Sources(msgspec.Struct):
    """Where references resolve. `previous` holds pins from existing lockfiles (for --offline)."""

    images: ImageSource | None
    models: ModelSource | None
    previous: dict[str, StackLock] = msgspec.field(default_factory=dict)


def _platform_key(resolved: Resolved, arch: str) -> tuple[str, str]:
    for key, digest in sorted(resolved.platforms.items()):
        parts = key.split("/")
        if len(parts) >= 2 and parts[0] == "linux" and parts[1] == arch:
            return key, digest
    have = ", ".join(sorted(resolved.platforms)) or "none (not an image)"
    raise StackMismatch(f"{resolved.ref} has no linux/{arch} image (platforms: {have}); "
                        f"the target's nodes are {arch}")


def _previous_image(previous: StackLock | None, reference: str) -> LockedImage | None:
    if previous is None:
        return None
    return next((i for i in previous.resolved.images.values() if i.reference == reference), None)


def _offline_error(what: str) -> StackpinError:
    return StackpinError(f"--offline: {what} still floats and no existing lockfile pins it",
                         "run stackpin lock without --offline once")


def _profile_images(profile: StackProfile) -> dict[str, ImageRef]:
    from stackpin.lock.oci.reference import ImageRef

    return {"runtime": ImageRef.parse(profile.spec.versions.runtime_image)}


def lock_profiles(loaded: Sequence[LoadedProfile], sources: Sources, lockdir: Path, offline: bool = False,
                  catalog: Catalog | None = None) -> list[StackLock]:
    """Resolve every reference of every profile (concurrently, once each) and build their locks."""
    from stackpin.catalog import load_catalog
    from stackpin.lock.oci.reference import ImageRef

    catalog = catalog or load_catalog()
    wanted: dict[ImageRef, None] = {}
    per_profile = []
    for item in loaded:
        profile = item.profile
        images = _profile_images(profile)
        cache = ImageRef.parse(profile.spec.autotune.cache) if (
            profile.spec.autotune.mode == AutotuneMode.replay and profile.spec.autotune.cache) else None
        previous = sources.previous.get(profile.name)
        if not offline:
            wanted.update(dict.fromkeys([*images.values(), *([cache] if cache else [])]))
        per_profile.append((item, images, cache, previous))
    resolved_refs: dict[ImageRef, Resolved] = {}
    if wanted:
        if sources.images is None:
            raise StackpinError("no image source configured")
        refs = list(wanted)
        resolved_refs = dict(zip(refs, sources.images.resolve_many(refs), strict=True))
    return [_lock_one(item, images, cache, previous, resolved_refs, sources, offline, catalog, lockdir)
            for item, images, cache, previous in per_profile]


def _lock_one(item: LoadedProfile, images: dict[str, ImageRef], cache: ImageRef | None, previous: StackLock | None,
              resolved_refs: dict[ImageRef, Resolved], sources: Sources, offline: bool,
              catalog: Catalog, lockdir: Path) -> StackLock:
    from stackpin.lock.resolvers import is_stand_in

    profile = item.profile
    site = _site_now(item)
    catalog = catalog.for_lock(site)  # the autotune cache's device is checked against the measured GPU name
    arch = catalog.platforms[profile.spec.target.platform].cpu_arch
    locked_images = {}
    for role, ref in images.items():
        if offline:
            old = _previous_image(previous, str(ref))
            if old is None:
                raise _offline_error(f"image {ref}")
            locked_images[role] = old
            continue
        res = resolved_refs[ref]
        platform, platform_digest = _platform_key(res, arch)
        locked_images[role] = LockedImage(reference=str(ref), digest=res.digest, pinned=f"{ref.name}@{res.digest}",
                                          platform=platform, platform_digest=platform_digest,
                                          resolved_via=res.source, stand_in=is_stand_in(res))
    model = _lock_model(profile, previous, sources, offline)
    artifact = _lock_cache(profile, cache, previous, resolved_refs, offline, catalog) if cache else None
    document = effective_profile(profile)
    section = ResolvedSection(images=locked_images, model=model, autotune_cache=artifact,
                              engines=engines_of(profile), site=site)
    # The profile is named relative to the project root: the same bytes from any working directory.
    return StackLock(metadata=LockMetadata(name=profile.name, profile=profile_relpath(item.path, lockdir),
                                           profile_digest=sha256(document)),
                     stack_digest=stack_digest(document, section), profile=document, resolved=section)


def _lock_model(profile: StackProfile, previous: StackLock | None, sources: Sources, offline: bool) -> LockedModel:
    from stackpin.lock.resolvers import COMMIT

    model_id, requested = profile.spec.model.id, profile.spec.model.revision
    if COMMIT.match(requested):
        return LockedModel(id=model_id, requested=requested, revision=requested, resolved_via="profile")
    if offline:
        old = previous.resolved.model if previous else None
        if old is None or (old.id, old.requested) != (model_id, requested):
            raise _offline_error(f"model {model_id}@{requested}")
        return old
    if sources.models is None:
        raise StackpinError(f"model {model_id}@{requested} needs resolving but no model source is configured",
                            "pass --hf-endpoint or --hf-cache, or pin a 40-hex commit in spec.model.revision")
    found: ModelRevision = sources.models.resolve(model_id, requested)
    return LockedModel(id=model_id, requested=requested, revision=found.commit, resolved_via=found.source,
                       stand_in=found.stand_in)


def _lock_cache(profile: StackProfile, ref: ImageRef, previous: StackLock | None,
                resolved_refs: dict[ImageRef, Resolved], offline: bool, catalog: Catalog) -> LockedArtifact:
    from stackpin.lock.resolvers import is_stand_in

    if offline:
        old = previous.resolved.autotune_cache if previous else None
        if old is None or old.reference != str(ref):
            raise _offline_error(f"autotune cache {ref}")
        return old
    res = resolved_refs[ref]
    notes = {k: res.annotations[v] for k, v in AUTOTUNE_ANNOTATIONS.items() if v in res.annotations}
    want = {"flashinfer": profile.spec.versions.flashinfer, "device": catalog.gpu_of(profile.spec.target.platform)
            .device_name}
    for key, value in want.items():
        if key not in notes:
            raise StackMismatch(f"autotune cache {ref} does not say which {key} it was captured on",
                                "pack it with `stackpin autotune pack`")
        if notes[key] != value:
            raise StackMismatch(f"autotune cache {ref} was captured with {key} {notes[key]!r} but the stack "
                                f"{profile.name} runs {value!r}; vLLM would ignore it and retune")
    return LockedArtifact(reference=str(ref), digest=res.digest, pinned=f"{res.ref.name}@{res.digest}",
                          annotations=notes, resolved_via=res.source, stand_in=is_stand_in(res))


def render_lock(lock: StackLock) -> str:
    header = ("# Generated by `stackpin lock`; do not edit. stackDigest names this stack.\n"
              + ("# STAND-IN PINS: resolved through a demo mirror; not production digests.\n"
                 if lock.resolved.stand_in else ""))
    return header + dump_yaml(lock.to_data(exclude_none=True))


def write_locks(locks: Sequence[StackLock], lockdir: Path) -> list[Path]:
    """Write every lockfile or none (see yamlio.write_files)."""
    files = {lock_path(lockdir, lock.metadata.name): render_lock(lock) for lock in locks}
    write_files(files, root=lockdir)
    return list(files)


def read_lock(path: Path) -> StackLock:
    lock = _read_lock_fast(path)
    if lock is not None:
        return lock
    # Slow path, only for a lockfile that is not right: parse again keeping positions for the errors.
    data, positions = load_yaml(path)
    if not isinstance(data, dict) or data.get("kind") != LOCK_KIND:
        raise InputError([Problem(positions.locate(()), "kind", f"not a {LOCK_KIND}")])
    lock = load(data, StackLock, positions.locate)
    if problems := profile_problems(lock):
        raise InputError([Problem(positions.locate(at), ".".join(map(str, at)), message) for at, message in problems])
    raise InputError([Problem(positions.locate(("stackDigest",)), "stackDigest",
                              "does not match the lockfile's content (edited by hand?); run stackpin lock")])


def profile_problems(lock: StackLock) -> list[tuple[tuple[str | int, ...], str]]:
    """What makes the lock's embedded profile no valid profile, each at its path in the lock (`profile`, ...);
    empty when it is one."""
    return [(("profile", *path), message) for path, message in problems_of(lock.profile, StackProfile)]


def _read_lock_fast(path: Path) -> StackLock | None:
    """A well-formed, untampered lock through libyaml's parser (render reads many); else None."""
    import yaml

    from stackpin.yamlio import MAX_INPUT_BYTES, load_data, read_regular

    try:
        # Regular files only, bounded: a FIFO or a device goes to the slow path, whose reader refuses it.
        text = read_regular(path, MAX_INPUT_BYTES).decode("utf-8")
        data = load_data(text)
        lock = msgspec.convert(data, StackLock)
        lock.stack_profile  # noqa: B018 - validates the embedded profile
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError):  # the checks' errors are ValueErrors
        return None
    return lock if stack_digest(lock.profile, lock.resolved) == lock.stack_digest else None


def read_existing_locks(lockdir: Path, names: Sequence[str],
                        on_invalid: Callable[[Path, StackpinError], None] | None = None) -> dict[str, StackLock]:
    """The current lockfiles of these stacks. An unreadable or tampered one raises, unless
    `on_invalid` takes it (a fresh lock replaces it anyway; only --offline must trust it)."""
    recover_writes(lockdir)
    out = {}
    for name in names:
        path = lock_path(lockdir, name)
        if not path.exists():
            continue
        try:
            out[name] = read_lock(path)
        except StackpinError as exc:
            if on_invalid is None:
                raise
            on_invalid(path, exc)
    return out


def profile_relpath(profile_path: Path, lockdir: Path) -> str:
    """How a lock names its profile: relative to the project root (the lock directory's parent)."""
    return Path(os.path.relpath(profile_path.resolve(), lockdir.resolve().parent)).as_posix()


class CheckOutcome(msgspec.Struct, frozen=True):
    profile: str
    lockfile: str
    status: str  # "current", "missing", "stale", "invalid"
    detail: str = ""


def check_locks(profiles: Sequence[Path], lockdir: Path) -> list[CheckOutcome]:
    """uv-style `lock --check`: is every profile's lockfile present and made from this profile?"""
    from stackpin.profile.loader import load_profile

    recover_writes(lockdir)
    out = []
    for path in profiles:
        loaded = load_profile(path)
        lock_file = lock_path(lockdir, loaded.profile.name)
        if not lock_file.exists():
            out.append(CheckOutcome(str(path), str(lock_file), "missing"))
            continue
        try:
            lock = read_lock(lock_file)
        except StackpinError as exc:  # keep checking the others; the verdict is still "not current"
            out.append(CheckOutcome(str(path), str(lock_file), "invalid", exc.lines()[0]))
            continue
        if lock.metadata.profile_digest != sha256(effective_profile(loaded.profile)):
            out.append(CheckOutcome(str(path), str(lock_file), "stale", "the profile changed since it was locked"))
        elif (site := _site_change(loaded, lock)) is not None:
            out.append(CheckOutcome(str(path), str(lock_file), "stale", site))
        else:
            out.append(CheckOutcome(str(path), str(lock_file), "current"))
    return out


def _site_now(loaded: LoadedProfile) -> SiteView | None:
    """The site facts of the profile's platform in the first site.yaml on its search path (spec.catalogPath,
    then STACKPIN_CATALOG_PATH), as `stackpin validate` reads them."""
    from stackpin.catalog import load_catalog
    from stackpin.catalog.search import profile_catalogs

    with profile_catalogs(loaded.profile.spec.catalog_path, str(loaded.locate(("spec", "catalogPath")))):
        return load_catalog().site_for(loaded.profile.spec.target.platform)


def _site_change(loaded: LoadedProfile, lock: StackLock) -> str | None:
    """How the site facts of the lock's platform differ from the site.yaml found now; None when they agree."""
    now = _site_now(loaded)
    was = lock.resolved.site
    if (now.identity() if now else None) == (was.identity() if was else None):
        return None
    if was is None:
        return "a site overlay (site.yaml) measures its platform now; relock to render with the measured facts"
    if now is None:
        return "the site overlay it was locked with is gone; relock, or restore site.yaml"
    return f"the site's measured facts changed since it was locked ({was.overlay[:19]} -> {now.overlay[:19]})"
