"""Whether a Dynamo release's pins can be installed from the site's index: the vLLM its `vllm` extra pins
and the FlashInfer that vLLM pins, the packages `upgrade propose` reads from the index, each looked up among
the versions the index has files of. A release whose pin the index lacks (vLLM 0.34.0 on PyPI pinning a
FlashInfer the mirror never got) would fail there and at `pip install`, so `upgrade check` reports it with
the pin instead of offering it. NIXL's pin is not looked up: stackpin reads no NIXL package (it comes in
the runtime image), and a site's index often lacks it.

An exact pin matches a yanked file too, as PEP 592 has installers do; the comparison is PEP 440's
(`packaging.specifiers`), so `==0.7.3` matches a file of `0.7.3.0`.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from stackpin.engines.index import PackageIndex
from stackpin.engines.simple import release_of
from stackpin.models import CamelModel  # the records' shape: frozen, camelCase keys


class MissingPin(CamelModel):
    requirement: str  # as pinned: flashinfer-python==0.7.3
    pinned_by: str  # the release that pins it: vllm 0.34.0


def _versions(index: PackageIndex, project: str) -> list[Version]:
    found = []
    for entry in index.files(project):
        try:
            found.append(Version(release_of(project, entry["filename"]) or ""))
        except InvalidVersion:
            continue
    return found


def has(index: PackageIndex, project: str, version: str) -> bool:
    """Whether the index has a file `project==version` installs."""
    try:
        wanted = SpecifierSet(f"=={version}")
    except InvalidSpecifier:
        return False
    return any(wanted.contains(v, prereleases=True) for v in _versions(index, project))


def missing_pins(index: PackageIndex, pins: list[tuple[str, str | None, str]]) -> list[MissingPin]:
    """Of (project, pinned version, pinned by), those the index has no file of; a None pin (the release's
    metadata pins nothing) is not checked."""
    return [MissingPin(requirement=f"{project}=={version}", pinned_by=by)
            for project, version, by in pins if version is not None and not has(index, project, version)]
