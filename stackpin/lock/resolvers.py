"""Where floating references become immutable ones: images and artifacts (OCI registry, mirror or
OCI layout) and model revisions (Hugging Face Hub API or a local Hugging Face cache).

Each source answers in bulk so that a lock of many stacks resolves everything concurrently once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import stackpin.jsonio as jsonio
from stackpin.errors import ResolveError, clip
from stackpin.lock.deadline import call_with_deadline, remaining
from stackpin.lock.oci.media import Resolved
from stackpin.lock.oci.reference import ImageRef
from stackpin.profile.identifiers import model_id_problem, revision_problem

COMMIT = re.compile(r"^[0-9a-f]{40}$")
STAND_IN_ANNOTATION = "dev.stackpin.stand-in"
# A Hugging Face cache that holds stand-in revisions (the demo mirror) carries this file at its root.
STAND_IN_MARKER = "STACKPIN_STAND_IN"


class ImageSource(Protocol):
    def resolve_many(self, refs: Sequence[ImageRef]) -> list[Resolved]: ...


@dataclass
class RegistrySource:
    """Images from their registries, or from the mirror configured for a registry."""

    mirrors: Mapping[str, str] = field(default_factory=dict)
    docker_config: str | None = None
    timeout: float = 10.0
    max_workers: int = 16
    deadline_at: float | None = None  # time.monotonic() instant the whole run gives up at

    def resolve_many(self, refs: Sequence[ImageRef]) -> list[Resolved]:
        from stackpin.lock.oci.client import RegistryClient  # httpx loads only when a registry is used
        from stackpin.lock.progress import progress

        with RegistryClient(timeout=self.timeout, docker_config=self.docker_config,
                            deadline_at=self.deadline_at) as client, \
                progress("resolving references", len(refs)) as advance:
            return client.resolve_many(refs, mirrors=self.mirrors, max_workers=self.max_workers, on_done=advance)


@dataclass
class LayoutSource:
    """Images from an OCI image layout directory: locking with no registry at all."""

    path: Path
    display: str | None = None  # how lockfiles name the layout (see project_path)

    def resolve_many(self, refs: Sequence[ImageRef]) -> list[Resolved]:
        from stackpin.lock.ocilayout import LayoutResolver

        resolver = LayoutResolver(self.path)
        resolver.source = f"oci-layout {self.display or self.path}"
        return [resolver.resolve(ref) for ref in refs]


@dataclass(frozen=True)
class ModelRevision:
    commit: str
    source: str
    stand_in: bool = False


class ModelSource(Protocol):
    def resolve(self, model_id: str, revision: str) -> ModelRevision: ...


@dataclass
class HubSource:
    """The Hub API: GET {endpoint}/api/models/{id}/revision/{revision} answers {"sha": ...}."""

    endpoint: str = field(default_factory=lambda: os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    token: str | None = field(default_factory=lambda: os.environ.get("HF_TOKEN"))
    timeout: float = 10.0
    request_deadline: float = 60.0
    deadline_at: float | None = None

    def resolve(self, model_id: str, revision: str) -> ModelRevision:
        from urllib.parse import quote

        import httpx

        _check_model_ref(model_id, revision)
        # The revision is one path segment for the Hub ("refs/pr/1" -> "refs%2Fpr%2F1"), as huggingface_hub sends it.
        url = f"{self.endpoint.rstrip('/')}/api/models/{model_id}/revision/{quote(revision, safe='')}"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            resp = call_with_deadline(
                lambda: httpx.get(url, headers=headers, timeout=self.timeout, follow_redirects=True),
                remaining(self.request_deadline, self.deadline_at), f"{self.endpoint}: {model_id}@{revision}")
        except httpx.HTTPError as exc:
            raise ResolveError(f"cannot reach {self.endpoint} to resolve {model_id}@{revision}: "
                               f"{type(exc).__name__}") from None
        if resp.status_code in (401, 403):
            raise ResolveError(f"not authorized to read {model_id} at {self.endpoint}", "set HF_TOKEN")
        if resp.status_code == 404:
            raise ResolveError(f"model {model_id} has no revision {revision!r} at {self.endpoint}")
        if resp.status_code != 200:
            raise ResolveError(f"{self.endpoint} answered {resp.status_code} for {model_id}@{revision}")
        try:
            sha = jsonio.loads(resp.content)["sha"]
        except (ValueError, KeyError, TypeError):
            raise ResolveError(f"{self.endpoint} gave no commit for {model_id}@{revision}") from None
        if not isinstance(sha, str) or not COMMIT.match(sha):
            raise ResolveError(f"{self.endpoint} gave {sha!r} for {model_id}@{revision}, not a commit hash")
        return ModelRevision(sha, f"hub {self.endpoint}")


@dataclass
class HfCacheSource:
    """A Hugging Face cache directory (`models--org--name/refs/<revision>` holds the commit)."""

    path: Path
    display: str | None = None  # how lockfiles name the cache (see project_path)

    def resolve(self, model_id: str, revision: str) -> ModelRevision:
        _check_model_ref(model_id, revision)
        refs = self.path / f"models--{model_id.replace('/', '--')}" / "refs"
        ref_file = refs / revision
        if not ref_file.resolve().is_relative_to(refs.resolve()):  # a link may not lead out of the cache
            raise ResolveError(f"model {model_id} revision {revision!r}: {ref_file} leads outside {self.path}")
        try:
            sha = ref_file.read_text(encoding="utf-8").strip()
        except OSError:
            raise ResolveError(f"model {model_id} revision {revision!r} not found in Hugging Face cache "
                               f"{self.path}") from None
        if not COMMIT.match(sha):
            raise ResolveError(f"{ref_file} does not hold a 40-hex commit hash")  # never echo what a file holds
        return ModelRevision(sha, f"hf-cache {self.display or self.path}",
                             stand_in=(self.path / STAND_IN_MARKER).exists())


def _check_model_ref(model_id: str, revision: str) -> None:
    """Profiles check these when they load; a resolver checks again, since it builds paths and URLs."""
    for value, problem in ((model_id, model_id_problem(model_id)), (revision, revision_problem(revision))):
        if problem:
            raise ResolveError(f"{clip(value)!r} {problem}")


def project_path(path: Path, root: Path) -> str:
    """A local source as lockfiles record it: relative to the project root when inside it, so the
    same lock comes out whatever the working directory or spelling of the path; else absolute."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def write_hf_cache_ref(cache: Path, model_id: str, revision: str, commit: str) -> None:
    """Record a revision in a Hugging Face cache directory (used to build mirrors and test data)."""
    refs = cache / f"models--{model_id.replace('/', '--')}" / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / revision).write_text(commit)


def is_stand_in(resolved: Resolved) -> bool:
    return resolved.annotations.get(STAND_IN_ANNOTATION) == "true"

