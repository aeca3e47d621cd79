"""The fleet file (`fleet.yaml`): the racks one deployment runs on, the waves a new revision goes out in,
the gates each wave must pass, and what happens when one fails. Typed and validated like a profile: every
error names the file, line and field.

    apiVersion: stackpin.dev/v1alpha1
    kind: Fleet
    metadata:
      name: gb300-west
    spec:
      racks:
        - name: rack-a
          kubeconfig: kube/rack-a.yaml   # relative to the fleet file; default: $KUBECONFIG
          context: rack-a                # default: the kubeconfig's current context
          platform: gb300-nvl72
          namespace: dynamo              # default: the revision's
          deployment: dsv41-flash        # default: the revision's
          endpoint: http://rack-a.example:8000   # the OpenAI-compatible endpoint the gate benches
          gitops:                        # only for `stackpin rollout gitops`; default: the tool's own cluster
            argocdCluster: rack-a        # the cluster's name as registered in Argo CD (destination.name)
            kubeConfigSecret: rack-a-kubeconfig  # Flux: a Secret beside the Kustomization holding its kubeconfig
        - ...
      waves:
        canary: rack-a       # one rack first (default: the first rack)
        batchSize: 2         # then the others, this many at a time, in file order
      gates:
        ready: {timeoutSeconds: 1800}    # every wave: status in sync and ready
        soakSeconds: 600                 # every wave: then wait, watching it stay ready
        bench:                           # the canary: benched before and after, compared
          trace: traces/agents.jsonl
          runs: 2
          threshold: 5%
      onFailure: rollback    # roll the canary back and stop; or pause (for a person)
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from stackpin.errors import InputError, Problem, StackpinError
from stackpin.models import CamelModel, Invalids, load_model
from stackpin.records import Invalid
from stackpin.yamlio import load_yaml

FLEET_API = "stackpin.dev/v1alpha1"
FLEET_KIND = "Fleet"
# A Kubernetes label value (racks name files, record keys and Argo CD / Flux objects).
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]


class RackGitOps(CamelModel):
    """Where GitOps mode (`stackpin rollout gitops`) sends the rack's directory. The kubeconfig above is
    stackpin's own way in; Argo CD and Flux each keep their own, so each is named here."""

    # The destination cluster's name as registered in Argo CD (`argocd cluster add`); None: in-cluster,
    # Argo CD's name for the cluster it runs in.
    argocd_cluster: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s]+$")] | None = None
    # Flux: a Secret in the Kustomization's namespace holding the rack's kubeconfig under `value`
    # (kubeConfig.secretRef); None: the cluster Flux runs in.
    kube_config_secret: Name | None = None


class Rack(CamelModel):
    name: Name
    kubeconfig: str | None = None  # relative to the fleet file; None: $KUBECONFIG, then ~/.kube/config
    context: str | None = None
    platform: Name
    namespace: Name | None = None  # None: the revision's metadata.namespace
    deployment: Name | None = None  # None: the revision's metadata.deployment
    endpoint: str | None = None  # what the bench gate measures; required on the canary when it benches
    gitops: RackGitOps | None = None  # None: in GitOps mode, the cluster the tool itself runs in

    @field_validator("endpoint")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(f"endpoint {value!r}: give an http(s) URL")
        return value


class Waves(CamelModel):
    canary: Name | None = None  # None: the first rack
    batch_size: Annotated[int, Field(ge=1, le=1000)] = 1


class ReadyGate(CamelModel):
    timeout_seconds: Annotated[float, Field(gt=0, le=86400)] = 1800.0


class BenchGate(CamelModel):
    trace: str  # relative to the fleet file
    runs: Annotated[int, Field(ge=1, le=20)] = 2
    threshold: str = "5%"
    agents: str = "1"
    slo: str | None = None  # None: the revision's spec.service
    duration_seconds: Annotated[float, Field(gt=0)] | None = None
    sessions: Annotated[int, Field(ge=1)] | None = None
    lag_limit: str = "10ms"
    # Judge before and after although their measured draft acceptance differs past acceptance.yaml's threshold
    # (bench compare --allow-acceptance-change); otherwise such a gate stops, saying so.
    allow_acceptance_change: bool = False

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, value: str) -> str:
        from stackpin.bench.binding import parse_threshold

        try:
            parse_threshold(value, "threshold")
        except StackpinError as exc:
            raise ValueError(exc.message) from None
        return value


class Gates(CamelModel):
    ready: ReadyGate = ReadyGate()
    soak_seconds: Annotated[float, Field(ge=0, le=86400)] = 0.0
    bench: BenchGate | None = None  # None: no measurement, the canary passes on ready and soak alone


class OnFailure(StrEnum):
    rollback = "rollback"  # roll the failed rack back to what it ran, bench it again, stop
    pause = "pause"  # leave it as it is and wait for `rollout resume` or `rollout abort`


class FleetSpec(CamelModel):
    racks: Annotated[list[Rack], Field(min_length=1, max_length=1000)]
    waves: Waves = Waves()
    gates: Gates = Gates()
    on_failure: OnFailure = OnFailure.rollback

    @model_validator(mode="after")
    def _consistent(self) -> FleetSpec:
        names, problems = [r.name for r in self.racks], []
        problems += [Invalid(f"racks.{i}.name", f"rack {n!r} is named twice: rack names are unique in a fleet")
                     for i, n in enumerate(names) if n in names[:i]]
        if self.waves.canary is not None and self.waves.canary not in names:
            problems.append(Invalid("waves.canary", f"waves.canary {self.waves.canary!r} is not one of the racks "
                                    f"({', '.join(names)})"))
        elif self.gates.bench is not None and self.canary.endpoint is None:
            problems.append(Invalid(f"racks.{names.index(self.canary.name)}.endpoint", f"the bench gate measures "
                                    f"the canary: rack {self.canary.name!r} needs an endpoint"))
        if problems:
            raise Invalids(problems)
        return self

    @property
    def canary(self) -> Rack:
        return next(r for r in self.racks if r.name == self.waves.canary) if self.waves.canary else self.racks[0]

    def wave_plan(self) -> list[list[Rack]]:
        """The waves in order: the canary alone, then the other racks `batchSize` at a time, in file order."""
        canary = self.canary
        rest = [r for r in self.racks if r.name != canary.name]
        size = self.waves.batch_size
        return [[canary], *[rest[i:i + size] for i in range(0, len(rest), size)]]


class FleetMetadata(CamelModel):
    name: Name


class Fleet(CamelModel):
    api_version: Literal["stackpin.dev/v1alpha1"]
    kind: Literal["Fleet"]
    metadata: FleetMetadata
    spec: FleetSpec


class LoadedFleet:
    """A fleet and where it was read from (relative paths in it are relative to its directory)."""

    def __init__(self, fleet: Fleet, path: Path) -> None:
        self.fleet, self.path = fleet, path

    def resolve(self, relative: str) -> Path:
        given = Path(relative).expanduser()
        return given if given.is_absolute() else self.path.parent / given


def load_fleet(path: str | Path) -> LoadedFleet:
    """Read and validate a fleet file; bad input raises InputError naming every problem at its file:line:col."""
    path = Path(path)
    data, positions = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError([Problem(positions.locate(()), "", f"expected a mapping ({FLEET_KIND}), got YAML of "
                                  f"another shape")])
    return LoadedFleet(load_model(data, Fleet, positions.locate), path)
