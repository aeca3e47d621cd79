"""The records an upgrade leaves in its proposal directory, read back by the next step.

`upgrade propose` writes `proposal.json` (a `Proposal`), `upgrade trial` writes `trial.json` (a
`Trial`) beside it, and `upgrade promote` reads both. Each step checks that what it reads is what the
step before wrote (the trial names the proposal's sha256; promote re-checks it and the candidate lock's
digest), so an edited proposal or a trial of another candidate cannot be promoted. Keys are camelCase,
as in lockfiles; paths are as the user gave them, relative to the working directory (the repository
root), never absolute machine paths when the user gave relative ones.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal

from pydantic import ConfigDict, Field, JsonValue, model_validator

from stackpin.models import CamelModel

PROPOSAL_FILE = "proposal.json"
PROPOSAL_MARKDOWN = "proposal.md"
TRIAL_FILE = "trial.json"
PROPOSAL_API: Final = "stackpin.dev/v1alpha1"


class EngineRelease(CamelModel):
    """A record that keeps the release of the stack's serving engine under the engine's name, as spec.versions
    does (`vllm: 0.31.0`, `sglang: 0.5.21`): one key beside the record's own fields, whichever the engine."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _one_engine(self) -> EngineRelease:
        from stackpin.backends import names

        keys = list(self.model_extra or {})
        if len(keys) != 1 or keys[0] not in names():
            own = ", ".join(f.alias or n for n, f in type(self).model_fields.items())
            raise ValueError(f"expected the release of one serving engine ({' or '.join(names())}) besides {own}; "
                             f"got {', '.join(keys) or 'none'}")
        return self

    @property
    def engine(self) -> str:
        """The engine whose release the record carries (a stackpin.backends name)."""
        return next(iter(self.model_extra or {}))

    @property
    def release(self) -> str | None:
        """The engine's release."""
        found: str | None = (self.model_extra or {})[self.engine]
        return found


class Versions(EngineRelease):
    """The engine pins of one stack (spec.versions): the engine's release under its name, and these."""

    __pydantic_extra__: dict[str, str] = Field(init=False)  # the engine's release: a version

    dynamo: str
    flashinfer: str
    nixl: str
    runtime_image: str


class Rewrite(CamelModel):
    """A flag the release renamed, rewritten in the candidate (engineArgs key or env var)."""

    path: str  # the candidate's field, dotted: spec.placement.pools.worker.engineArgs
    old: str
    new: str
    source: str  # how stackpin knows: the release's deprecation message, from its catalog


class PinnedDefault(CamelModel):
    """A default the release changes that the stack relied on, written out in the candidate."""

    path: str
    flag: str
    value: JsonValue  # the old default, now explicit
    old_default: JsonValue
    new_default: JsonValue


class Blocker(CamelModel):
    """Something the proposal cannot translate: a person has to decide."""

    path: str
    message: str
    code: str | None = None  # the validation rule, when one found it


class Finding(CamelModel):
    """A `validate --upgrade-to` finding of the candidate that the current stack does not have."""

    code: str
    severity: str
    path: str
    message: str
    hint: str | None = None


class Proposal(CamelModel):
    api_version: Literal["stackpin.dev/v1alpha1"] = PROPOSAL_API
    kind: Literal["UpgradeProposal"] = "UpgradeProposal"
    deployment: str  # the history key, NAMESPACE/NAME@PLATFORM
    current_profile: str
    candidate_profile: str | None  # None when a blocker stopped the proposal before writing it
    current: Versions
    candidate: Versions
    catalog: str | None  # the catalog directory the new releases were added to
    added: list[str]  # releases added to it, NAME==VERSION
    rewrites: list[Rewrite]
    pinned: list[PinnedDefault]
    blockers: list[Blocker]
    findings: list[Finding]
    remeasure: list[str]  # what must be measured again before the candidate can be trusted
    capture_job: str | None  # the autotune capture Job rendered for the candidate, when its cache is stale

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)


class Verdict(StrEnum):
    gain = "gain"  # the candidate is significantly better on the trial's main metric
    no_change = "no-change"  # no significant difference either way
    regression = "regression"  # significantly worse
    inconclusive = "inconclusive"  # the runs disagree too much to say


class MetricVerdict(CamelModel):
    name: str
    unit: str
    current: float | None
    candidate: float | None
    change: float | None  # relative, candidate vs current
    low: float | None  # confidence interval of the change
    high: float | None
    verdict: Verdict
    why: str = ""  # what decided it, or what evidence it lacks (bench compare's words)


class Trial(CamelModel):
    api_version: Literal["stackpin.dev/v1alpha1"] = PROPOSAL_API
    kind: Literal["UpgradeTrial"] = "UpgradeTrial"
    proposal_sha256: str  # of proposal.json's bytes when the trial ran (hex, as sha256sum prints it)
    current_lock: str  # what was benched as the current stack: a lockfile path or DEPLOYMENT@REV
    current_digest: str
    # The deployment's newest revision when it was benched (None: the history had none, the current
    # profile's lock was benched): promote refuses once the history has moved past it.
    current_revision: int | None = None
    candidate_lock: str  # the candidate's lockfile (in the proposal directory)
    candidate_digest: str
    simulated: bool  # measured on stackpin's simulator or the Dynamo bed, not on hardware
    bed: str  # "sim", "dynamo" or the endpoint URLs measured
    runs: int
    trace: str
    slo: str | None
    current_results: list[str]
    candidate_results: list[str]
    metrics: list[MetricVerdict]
    # bench compare's verdict over every headline (a regression of any one is a regression), made
    # inconclusive where a headline's interval reaches past the threshold without a verdict
    verdict: Verdict
    main_metric: str | None = None  # the headline the message and the summary quote
    threshold: float = 0.05  # the smallest relative change counted as a gain or a regression
    # compared although the sides' measured draft acceptance differed past acceptance.yaml's threshold (upgrade
    # trial --allow-acceptance-change): a record of what the trial did; promote is told again on its own command
    allow_acceptance_change: bool = False
