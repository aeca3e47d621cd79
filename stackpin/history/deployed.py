"""Where a deployment's newest revision is rendered for GitOps: `<deployments>/<namespace>/<name>@<platform>/`.

The same files `stackpin render` writes for the revision's lock (objects and a kustomization.yaml),
each with one more comment line naming the revision, so a GitOps tool watches one directory per
deployment and a reviewer sees which revision a change brings. Promote and rollback write it under
the deployment's history lock right after the revision; `check_deployment` compares it with a fresh
render of the newest revision, as `render --check` does for `manifests/`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stackpin.history.model import DeploymentKey, Revision
from stackpin.render.output import KUSTOMIZATION, Drift, RenderedStack, check_stacks, render_stack, write_stacks
from stackpin.yamlio import refuse_links_below

_MARK = re.compile(r"^# Revision ([0-9]+) of deployment ", re.MULTILINE)


def deployment_dir(deployments: Path, key: DeploymentKey) -> Path:
    return Path(deployments) / key.namespace / key.dirname


def deployment_files(revision: Revision, rendered: RenderedStack | None = None) -> RenderedStack:
    """The deployment directory's files for `revision` (`rendered`: its lock, already rendered)."""
    stack = rendered if rendered is not None else render_stack(revision.lock)
    line = (f"# Revision {revision.revision} of deployment {revision.deployment} (`stackpin history "
            f"{revision.deployment}`).\n")
    # After render's first line, which marks the file as generated (write_stacks and check_stacks
    # replace, remove and report only such files).
    files = {}
    for name, text in stack.files.items():
        first, _, rest = text.partition("\n")
        files[name] = f"{first}\n{line}{rest}"
    return RenderedStack(revision.deployment.dirname, files)


def write_deployment(deployments: Path, stack: RenderedStack, key: DeploymentKey) -> list[Path]:
    """Switch the directory to `stack` (all files or none) and drop files the revision no longer has."""
    refuse_links_below(Path(deployments), Path(deployments) / key.namespace / "x")
    return write_stacks([stack], Path(deployments) / key.namespace)


@dataclass(frozen=True)
class DeploymentCheck:
    key: DeploymentKey
    directory: Path
    newest: int  # the revision the directory should hold
    holds: int | None  # the revision its kustomization.yaml names, if any
    drift: tuple[Drift, ...]

    @property
    def current(self) -> bool:
        return not self.drift


def check_deployment(deployments: Path, revision: Revision) -> DeploymentCheck:
    key = revision.deployment
    directory = deployment_dir(deployments, key)
    drift = check_stacks([deployment_files(revision)], Path(deployments) / key.namespace, whole_dir=False)
    holds = None
    try:
        found = _MARK.search((directory / KUSTOMIZATION).read_text(encoding="utf-8"))
        holds = int(found[1]) if found else None
    except (OSError, UnicodeDecodeError):
        pass
    return DeploymentCheck(key, directory, revision.revision, holds, tuple(drift))
