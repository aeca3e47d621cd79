"""GitOps mode: one revision out to a fleet by Argo CD or Flux instead of by `stackpin rollout start`.

Written under one output directory, all files or none (`yamlio.write_files`):

- `racks/<rack>/`: the deployment directory promote renders for the revision (`history.deployed.
  deployment_files`, the same bytes), one per rack; a rack in another namespace than the revision's
  gets kustomize's `namespace:` in its kustomization.yaml (every object moved, as `stackpin apply -n`);
- Argo CD: `applicationset.yaml`, one ApplicationSet whose list generator names the racks and their
  wave, its template labelling each Application `stackpin.dev/wave: "<n>"`, and a RollingSync strategy
  with one step per wave in order (the canary's first): Argo CD syncs a wave once the one before is
  Healthy;
- Argo CD: `argocd-cm-dgd-health.yaml`, the DynamoGraphDeployment health check (argocd_health.py) the
  waves wait on, as the argocd-cm key to add;
- Flux: `kustomizations.yaml`, one Kustomization per rack with `wait: true` (Ready only once every
  object it applied is healthy) and `dependsOn` every Kustomization of the wave before. They read the
  GitRepository `--source`; its header names the ignore rule that GitRepository needs (`source_keep_rule`).

What the fleet's gates say beyond "ready" (the soak, the canary's bench) neither tool can express:
the header of each file says so. The bytes depend only on the inputs (no time, no host).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from stackpin.errors import StackpinError
from stackpin.history.model import Revision
from stackpin.rollout.argocd_health import ARGOCD_CM_FILE, DGD_HEALTH_KEY, INSTALL, health_configmap_yaml
from stackpin.rollout.fleet import LoadedFleet, Rack
from stackpin.yamlio import dump_yaml, dump_yaml_all, write_files

WAVE_LABEL = "stackpin.dev/wave"
RACK_LABEL = "stackpin.dev/rack"
FLEET_LABEL = "stackpin.dev/fleet"
ARGOCD_NAMESPACE = "argocd"
FLUX_NAMESPACE = "flux-system"
IN_CLUSTER = "in-cluster"  # Argo CD's name for the cluster it runs in
APPLICATIONSET_FILE = "applicationset.yaml"
KUSTOMIZATIONS_FILE = "kustomizations.yaml"
RACKS_DIR = "racks"


class GitOpsFormat(StrEnum):
    argocd = "argocd"
    flux = "flux"


@dataclass(frozen=True)
class GitOpsOptions:
    format: GitOpsFormat
    repo_path: str  # the output directory's path inside the Git repository the tool reads
    repo_url: str = ""  # Argo CD: spec.source.repoURL
    target_revision: str = "HEAD"  # Argo CD: spec.source.targetRevision
    source: str = ""  # Flux: the GitRepository (in flux-system) the Kustomizations read


@dataclass(frozen=True)
class GitOpsResult:
    fleet: str
    revision: str  # NAMESPACE/NAME@PLATFORM@N
    format: GitOpsFormat
    directory: Path
    files: tuple[str, ...]  # relative to `directory`, sorted
    waves: tuple[tuple[str, ...], ...]

    def data(self) -> dict[str, Any]:
        return {"fleet": self.fleet, "revision": self.revision, "format": str(self.format),
                "directory": str(self.directory), "files": list(self.files),
                "waves": [list(wave) for wave in self.waves]}


def read_revision(history: Path, query: str) -> Revision:
    """`DEPLOYMENT@REV` (or `DEPLOYMENT`, its newest) from the history, its chain verified."""
    from stackpin.history.store import HistoryStore

    return HistoryStore(history).query(query)


def _checked_racks(loaded: LoadedFleet, revision: Revision) -> None:
    """The revision's objects are named after its deployment and built for its platform: a rack that
    names another cannot run it (a rack's namespace may differ: kustomize moves the objects)."""
    key = revision.deployment
    for rack in loaded.fleet.spec.racks:
        if rack.platform != key.platform:
            raise StackpinError(f"{loaded.path}: rack {rack.name} is a {rack.platform} rack; revision "
                                f"{revision.revision} of {key} is built for {key.platform}")
        if rack.deployment is not None and rack.deployment != key.name:
            raise StackpinError(f"{loaded.path}: rack {rack.name} runs deployment {rack.deployment}; revision "
                                f"{revision.revision} is of {key} (its objects are named after {key.name})")


def rack_namespace(rack: Rack, revision: Revision) -> str:
    return rack.namespace or revision.deployment.namespace


def _rack_files(rack: Rack, revision: Revision, rendered: dict[str, str]) -> dict[str, str]:
    files = dict(rendered)
    namespace = rack_namespace(rack, revision)
    if namespace != revision.deployment.namespace:
        files["kustomization.yaml"] += (f"# stackpin rollout gitops: rack {rack.name} runs it in namespace "
                                        f"{namespace}; kustomize sets it on every object.\n"
                                        + dump_yaml({"namespace": namespace}))
    return files


def _header(loaded: LoadedFleet, revision: Revision, lines: list[str]) -> str:
    key = revision.deployment
    first = [f"Generated by `stackpin rollout gitops` from fleet {loaded.fleet.metadata.name} "
             f"({loaded.path.name}) and revision {revision.revision} of {key}; do not edit."]
    return "".join(f"# {line}\n" for line in first + lines)


_NOT_EXPRESSED = ("The fleet's soak and the canary's bench gate are stackpin's own (`stackpin rollout start`):",
                  "neither tool runs them.")


def _duration(seconds: float) -> str:
    """A Go duration Flux's pattern takes (`^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$`), never an exponent."""
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{max(1, round(seconds * 1000))}ms"


def _repo_dir(options: GitOpsOptions, rack: Rack) -> str:
    return str(PurePosixPath(options.repo_path) / RACKS_DIR / rack.name)


def applicationset(loaded: LoadedFleet, revision: Revision, options: GitOpsOptions) -> str:
    fleet = loaded.fleet
    waves = fleet.spec.wave_plan()
    elements = [{"rack": rack.name, "wave": str(number), "path": _repo_dir(options, rack),
                 "namespace": rack_namespace(rack, revision),
                 "cluster": (rack.gitops.argocd_cluster if rack.gitops else None) or IN_CLUSTER}
                for number, wave in enumerate(waves, start=1) for rack in wave]  # 1: the canary, as in rollout start
    name = fleet.metadata.name
    doc = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": name, "namespace": ARGOCD_NAMESPACE, "labels": {FLEET_LABEL: name}},
        "spec": {
            "goTemplate": True,
            "goTemplateOptions": ["missingkey=error"],
            "generators": [{"list": {"elements": elements}}],
            "strategy": {"type": "RollingSync", "rollingSync": {"steps": [
                {"matchExpressions": [{"key": WAVE_LABEL, "operator": "In", "values": [str(number)]}]}
                for number in range(1, len(waves) + 1)]}},
            "template": {
                "metadata": {"name": f"{name}-{{{{.rack}}}}",
                             "labels": {FLEET_LABEL: name, RACK_LABEL: "{{.rack}}", WAVE_LABEL: "{{.wave}}"}},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": options.repo_url, "targetRevision": options.target_revision,
                               "path": "{{.path}}"},
                    "destination": {"name": "{{.cluster}}", "namespace": "{{.namespace}}"},
                    "syncPolicy": {"automated": {"prune": True},
                                   "syncOptions": ["ServerSideApply=true", "PruneLast=true"]},
                },
            },
        },
    }
    header = _header(loaded, revision, [
        "Argo CD ApplicationSet: one Application per rack, labelled with its wave; RollingSync syncs wave 1",
        "(the canary) first and each next wave once every Application of the one before is Healthy.",
        "Needs progressive syncs enabled (applicationsetcontroller.enable.progressive.syncs: \"true\" in",
        "argocd-cmd-params-cm). RollingSync turns the Applications' autosync off and triggers each sync",
        "itself, with their syncPolicy (automated.prune: what its syncs prune).",
        f"A kind Argo CD has no health check for does not hold a wave back: {ARGOCD_CM_FILE}, next to this",
        f"file, gives DynamoGraphDeployment one (argocd-cm's {DGD_HEALTH_KEY}).", *_NOT_EXPRESSED,
    ])
    return header + dump_yaml(doc)


def argocd_health(loaded: LoadedFleet, revision: Revision) -> str:
    header = _header(loaded, revision, [
        "The DynamoGraphDeployment health check the ApplicationSet's waves wait on (Argo CD has none of its",
        "own): Healthy once the Dynamo operator reports state successful, Degraded on failed, Progressing",
        "before (stackpin/rollout/argocd_health.py). Apply it where Argo CD runs, not in a rack.", *INSTALL,
    ])
    return health_configmap_yaml(header, ARGOCD_NAMESPACE)


# kstatus, which `wait` uses, counts a custom resource Current once its status.observedGeneration (if any)
# is the generation: it does not know a DynamoGraphDeployment's `state`. These say what stackpin's own
# readiness check says (deploy/readiness.py: state successful, the Ready condition not other than True).
# Flux evaluates them on the object (fluxcd/pkg runtime/cel StatusEvaluator: failed before current);
# an object with no status yet fails to evaluate, which keeps the Kustomization waiting.
DGD_CURRENT = ("has(status.state) && status.state == 'successful' && (!has(status.conditions) || "
               "status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'True'))")
DGD_FAILED = "has(status.state) && status.state == 'failed'"


def _dgd_api_versions(rendered: dict[str, str]) -> list[str]:
    from stackpin.yamlio import load_data

    found = {doc.get("apiVersion") for name, text in rendered.items() if name != "kustomization.yaml"
             for doc in [load_data(text)] if isinstance(doc, dict) and doc.get("kind") == "DynamoGraphDeployment"}
    return sorted(str(v) for v in found)


def kustomizations(loaded: LoadedFleet, revision: Revision, options: GitOpsOptions, rendered: dict[str, str]) -> str:
    fleet = loaded.fleet
    health = [{"apiVersion": api, "kind": "DynamoGraphDeployment", "current": DGD_CURRENT, "failed": DGD_FAILED}
              for api in _dgd_api_versions(rendered)]
    name = fleet.metadata.name
    docs: list[dict[str, Any]] = []
    previous: list[str] = []
    for number, wave in enumerate(fleet.spec.wave_plan(), start=1):
        names = []
        for rack in wave:
            spec: dict[str, Any] = {
                "interval": "10m",
                "sourceRef": {"kind": "GitRepository", "name": options.source},
                "path": f"./{_repo_dir(options, rack)}",
                "prune": True,
                # Ready only once every object applied is healthy, so a dependsOn on it waits for that.
                "wait": True,
                "timeout": _duration(fleet.spec.gates.ready.timeout_seconds),
            }
            if health:
                spec["healthCheckExprs"] = health
            if previous:
                spec["dependsOn"] = [{"name": dep} for dep in previous]
            secret = rack.gitops.kube_config_secret if rack.gitops else None
            if secret:
                spec["kubeConfig"] = {"secretRef": {"name": secret}}
            own = f"{name}-{rack.name}"
            names.append(own)
            docs.append({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                         "metadata": {"name": own, "namespace": FLUX_NAMESPACE,
                                      "labels": {FLEET_LABEL: name, RACK_LABEL: rack.name, WAVE_LABEL: str(number)}},
                         "spec": spec})
        previous = names
    header = _header(loaded, revision, [
        "Flux Kustomizations, one per rack: each waits for its objects to be healthy (wait: true; the",
        "DynamoGraphDeployment by its status.state, healthCheckExprs) and",
        "depends on every Kustomization of the wave before, so wave 1 (the canary) goes first. All read one",
        "GitRepository, so a dependency counts only once Ready at the same commit (kustomize-controller's",
        "checkDependencies). The timeout is the fleet's ready gate.", *_NOT_EXPRESSED,
        *_source_lines(options),
    ])
    return header + dump_yaml_all(docs)


def source_keep_rule(repo_path: str) -> str | None:
    """The `.spec.ignore` line that keeps the output directory in a GitRepository's artifact, whatever rules
    come before it; None when the output is the repository's root (no rule can leave it out and keep it).

    source-controller (v1.9.1, fluxcd/pkg artifact/storage `Archive` and `SourceIgnoreFilter`, sourceignore's
    go-git matcher) walks every file, directories excluded or not, and keeps or drops each by the last rule
    that matches it or a directory above it: a final `!/DIR/` keeps DIR/ even after a `/*`."""
    path = str(PurePosixPath(repo_path))
    if path == ".":
        return None
    # Glob characters escaped (Go's filepath.Match takes `\\`), so the rule names this directory alone; the
    # path holds no backslash (checked_options) and the closing `/` keeps a trailing space from being trimmed.
    return "!/" + "".join(f"\\{c}" if c in "*?[" else c for c in path) + "/"


def _source_lines(options: GitOpsOptions) -> list[str]:
    rule = source_keep_rule(options.repo_path)
    if rule is None:
        return []
    return [f"GitRepository {FLUX_NAMESPACE}/{options.source} must put {options.repo_path}/ in its artifact: if its",
            f"spec.ignore leaves anything out, end the rules with `{rule}` (docs/gitops.md#flux)."]


def gitops_files(loaded: LoadedFleet, revision: Revision, options: GitOpsOptions) -> dict[str, str]:
    """Every file, by its path relative to the output directory (POSIX, sorted)."""
    from stackpin.history.deployed import deployment_files

    _checked_racks(loaded, revision)
    rendered = deployment_files(revision).files  # rendered once: the same stack on every rack
    files: dict[str, str] = {}
    for rack in loaded.fleet.spec.racks:
        for file, text in _rack_files(rack, revision, rendered).items():
            files[f"{RACKS_DIR}/{rack.name}/{file}"] = text
    if options.format is GitOpsFormat.argocd:
        files[APPLICATIONSET_FILE] = applicationset(loaded, revision, options)
        files[ARGOCD_CM_FILE] = argocd_health(loaded, revision)
    else:
        files[KUSTOMIZATIONS_FILE] = kustomizations(loaded, revision, options, rendered)
    return dict(sorted(files.items()))


def checked_options(options: GitOpsOptions) -> GitOpsOptions:
    path = PurePosixPath(options.repo_path)
    if path.is_absolute() or ".." in path.parts or "\\" in options.repo_path:
        raise StackpinError(f"repository path {options.repo_path!r}: give the output directory's path relative "
                            "to the repository's root (Argo CD refuses an absolute one)")
    if options.format is GitOpsFormat.argocd and not options.repo_url:
        raise StackpinError("--format argocd needs --repo-url (the Git repository Argo CD reads)")
    if options.format is GitOpsFormat.flux and not options.source:
        raise StackpinError("--format flux needs --source NAME (the GitRepository in flux-system)")
    return GitOpsOptions(options.format, str(path), options.repo_url, options.target_revision, options.source)


def _generated(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.readline().startswith(b"# Generated by `stackpin ")
    except OSError:
        return False


def _remove_stale(out: Path, written: set[Path]) -> None:
    """Files stackpin wrote here before that this run no longer has (a rack left the fleet, the attestation
    ConfigMap of another revision, the other format's file): a GitOps tool must not apply them. Files of
    anyone else stay; nothing is followed through a link."""
    racks = out / RACKS_DIR
    directories = [out] + ([d for d in sorted(racks.iterdir()) if d.is_dir() and not d.is_symlink()]
                           if racks.is_dir() and not racks.is_symlink() else [])
    for directory in directories:
        for old in sorted(directory.glob("*.yaml")):
            if old not in written and not old.is_symlink() and old.is_file() and _generated(old):
                old.unlink()
        if directory != out and not any(directory.iterdir()):
            directory.rmdir()


def default_repo_path(out: Path) -> str:
    """`out`'s path relative to the Git work tree holding it (where Argo CD and Flux read it from)."""
    absolute = Path(out).resolve()
    for top in (absolute, *absolute.parents):
        if (top / ".git").exists():
            return absolute.relative_to(top).as_posix()
    raise StackpinError(f"{out} is not inside a Git work tree", "name its path in the repository with --repo-path")


def write_gitops(loaded: LoadedFleet, revision: Revision, out: Path, options: GitOpsOptions) -> GitOpsResult:
    """Write the files under `out` (created if missing), all or none; nothing outside it."""
    options = checked_options(options)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise StackpinError(f"{out}: is not a directory; nothing written")
    if not out.parent.is_dir():  # a mistyped path is an error, never a tree created somewhere else
        raise StackpinError(f"{out}: {out.parent} is not a directory; nothing written")
    files = gitops_files(loaded, revision, options)
    paths: dict[Path, str] = {}
    for relative, text in files.items():
        path = out / relative
        # Rack names are DNS labels and render's names plain files; checked anyway, as the contract says.
        if ".." in PurePosixPath(relative).parts or PurePosixPath(relative).is_absolute():
            raise StackpinError(f"{relative}: outside {out}; nothing written")
        paths[path] = text
    changed = {p: t for p, t in paths.items() if not p.is_file() or p.read_bytes() != t.encode("utf-8")}
    write_files(changed, root=out)  # all or none: a failure leaves every file there as it was
    _remove_stale(out, set(paths))
    waves = tuple(tuple(r.name for r in wave) for wave in loaded.fleet.spec.wave_plan())
    return GitOpsResult(loaded.fleet.metadata.name, f"{revision.deployment}@{revision.revision}", options.format,
                        out, tuple(files), waves)
