"""Fetch one published package file from a Python package index, as pip finds it, without pip.

`pip download` cannot fetch vLLM's sdist without building its metadata (torch, cmake), so the PEP 691
JSON simple index pip reads is read directly, and the file is checked against the sha256 the index
publishes. Which file: a pure-Python wheel when there is one (ai-dynamo, flashinfer-python; its
METADATA is the built one), else the sdist (vLLM's wheels are 330 MB of compiled code, its sdist 47 MB
of the same Python), else a manylinux x86_64 wheel.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackpin.engines.package import normalize
from stackpin.errors import ResolveError

DEFAULT_INDEX = "https://pypi.org/simple"
JSON_INDEX = "application/vnd.pypi.simple.v1+json"


def default_index() -> str:
    """PIP_INDEX_URL when set (a site's mirror), else PyPI."""
    return os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str


def _rank(filename: str) -> tuple[int, int]:
    if filename.endswith("-none-any.whl"):
        return 0, 0
    if filename.endswith((".tar.gz", ".zip")):
        return 1, 0
    return 2, 0 if "x86_64" in filename else 1


def choose(project: str, version: str, files: list[dict[str, Any]]) -> IndexFile:
    """The file of `project==version` stackpin reads, from an index page's file list."""
    stem = normalize(project).replace("-", "_")

    def release_of(filename: str) -> str | None:
        name = filename.lower()
        for suffix in (".tar.gz", ".zip"):
            if name.endswith(suffix):
                base = name.removesuffix(suffix)
                head, _, tail = base.rpartition("-")
                return tail if normalize(head).replace("-", "_") == stem else None
        if name.endswith(".whl"):
            parts = name.split("-")
            return parts[1] if normalize(parts[0]).replace("-", "_") == stem else None
        return None

    matching = [f for f in files if release_of(f.get("filename", "")) == version.lower() and not f.get("yanked")]
    matching = [f for f in matching if f.get("hashes", {}).get("sha256")]
    if not matching:
        raise ResolveError(f"{project}=={version}: no wheel or sdist with a sha256 on the index")
    best = min(matching, key=lambda f: _rank(f["filename"]))
    return IndexFile(best["filename"], best["url"], best["hashes"]["sha256"])


def fetch(project: str, version: str, index_url: str, directory: Path, timeout: float = 600.0) -> Path:
    """Download `project==version` into `directory` (kept there: a second call reads it again, after
    checking its sha256) and return its path."""
    import httpx  # only `engines add` reaches the network; validation never imports it

    page = f"{index_url.rstrip('/')}/{normalize(project)}/"
    partial: Path | None = None
    try:
        with httpx.Client(timeout=timeout, follow_redirects=True) as client:
            response = client.get(page, headers={"Accept": JSON_INDEX})
            response.raise_for_status()
            chosen = choose(project, version, response.json().get("files", []))
            target = directory / chosen.filename
            if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == chosen.sha256:
                return target
            url = httpx.URL(page).join(chosen.url)
            digest = hashlib.sha256()
            partial = target.with_name(target.name + ".part")
            with client.stream("GET", url) as stream, partial.open("wb") as out:
                stream.raise_for_status()
                for chunk in stream.iter_bytes():
                    digest.update(chunk)
                    out.write(chunk)
    except httpx.HTTPError as exc:
        if partial is not None:
            partial.unlink(missing_ok=True)
        raise ResolveError(f"{project}=={version}: {page}: {exc}") from None
    except ValueError:
        raise ResolveError(f"{project}=={version}: {page} is not a PEP 691 JSON index") from None
    assert partial is not None
    if digest.hexdigest() != chosen.sha256:
        partial.unlink(missing_ok=True)
        raise ResolveError(f"{chosen.filename}: sha256 {digest.hexdigest()} is not the index's {chosen.sha256}")
    partial.replace(target)
    return target
