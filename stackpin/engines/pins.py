"""The version pins a release's metadata states, as `versions.yaml` records them: each of ai-dynamo's engine
extras pins its engine and nixl (the Dynamo entry's field named after the extra, and the NIXL field it names);
an engine release pins FlashInfer, torch and the like (its section's fields). Which field holds which
project is the catalog schema's own metadata (stackpin.catalog: `pinned_projects`, `DynamoPin.extras`), so
no engine is spelled here (docs/facts.md#version-pins).
A Dynamo release's `crd` (the DynamoGraphDeployment version its operator stores) is in no wheel: it comes
from the catalog's sourced `dgd_storage` fact, or `--crd`."""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement

from stackpin.catalog import NIXL, DynamoPin, dgd_storage, pinned_projects, release_sections
from stackpin.catalog.engine_data import DynamoRelease
from stackpin.catalog.flags import AnyRelease
from stackpin.engines.package import normalize
from stackpin.errors import StackpinError

Pin = tuple[str, dict[str, str]]  # (versions.yaml section, fields of the release's entry)


def exact(requires: tuple[str, ...], project: str, extra: str | None = None) -> str | None:
    """The version `project==X` is pinned to, among requirements that apply with `extra` (or with none)."""
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if normalize(requirement.name) != project:
            continue
        marker = requirement.marker
        if marker is not None:
            applies_bare = marker.evaluate({"extra": ""})
            if extra is None and not applies_bare:
                continue
            if extra is not None and (applies_bare or not marker.evaluate({"extra": extra})):
                continue
        elif extra is not None:
            continue
        specs = list(requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            return specs[0].version
    return None


def pin_of(release: AnyRelease, crd: str | None = None) -> Pin | None:
    """The release's entry for versions.yaml; None for one whose pins stackpin does not track (FlashInfer)."""
    if not isinstance(release, DynamoRelease):
        return engine_pin(release.engine, release.version, release.requires)
    # Not release.crd: that is the version the planner talks to, one the operator serves (v1beta1 from 1.2),
    # while v1alpha1 stayed the stored one until 1.5.0.
    found: dict[str, str | None] = {"crd": crd or dgd_storage().of(release.version)}
    projects = pinned_projects(DynamoPin)
    for extra, nixl in DynamoPin.extras().items():
        found[extra] = exact(release.requires, projects[extra][0], extra)
        found[nixl] = exact(release.requires, NIXL, extra)
    # An extra a release may lack or pin a range for (1.3.1: nixl[cu13]<1.1.0,>=1.0.0) is an optional field.
    fields = {name: found[name] for name in projects}  # in the record's order, as versions.yaml writes it
    return "dynamo", _checked(f"{release.engine} {release.version}", fields, projects)


def engine_pin(section: str, version: str, requires: tuple[str, ...]) -> Pin | None:
    """An engine release's versions.yaml entry (the section named after the extra that pins it) from its
    Requires-Dist: FlashInfer, torch and the rest of the section's fields; None for a project with no section."""
    record = release_sections().get(section)
    if record is None:
        return None
    projects = pinned_projects(record)
    fields = {name: exact(requires, project) for name, (project, _) in projects.items()}
    return section, _checked(f"{section} {version}", fields, projects)


def _checked(name: str, fields: dict[str, str | None], projects: dict[str, tuple[str, bool]]) -> dict[str, str]:
    """The pins found; a required one missing is one line of bad input."""
    missing = sorted(k for k, v in fields.items() if v is None and projects[k][1])
    if missing:
        raise StackpinError(f"{name}: no {', '.join(missing)} pin in its metadata",
                            "its metadata may be dynamic (an sdist); add the wheel with --from")
    return {k: v for k, v in fields.items() if v is not None}
