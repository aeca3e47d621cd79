"""`stackpin upgrade propose`: the candidate stack on Dynamo X beside the current one, and the proposal.

1. Dynamo X, the release of the stack's engine it pins (vLLM, SGLang: through the engine's backend) and the
   FlashInfer that release pins go into a catalog directory (releases.py).
2. The candidate is the current profile's text with only the needed lines edited (textedit.py): the name,
   the pins (written into the file when it inherits them through `extends:`), the runtime image's tag,
   what the release renamed (translate.py), the old defaults the stack relied on, and an autotune mode
   that does not replay a cache the new FlashInfer will not read.
3. The candidate is validated as `validate --upgrade-to` would (its findings the current stack lacks),
   diffed against the current stack as `stackpin diff` does, and, when its cache must be captured again,
   its capture Job rendered as `stackpin autotune capture-job` does.
4. Everything is computed first; then the candidate and the proposal directory are written (nothing
   replaced without `force`). A blocker (a flag removed with no successor) writes the proposal only.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackpin.backends import engine, engine_of
from stackpin.catalog import load_catalog
from stackpin.catalog.flags import dynamo_catalog
from stackpin.catalog.search import ENV, profile_catalogs, site_dirs
from stackpin.catalog.version import parse_version
from stackpin.diff.inputs import Stack
from stackpin.diff.model import SourceKind, StackDiff, StackRef
from stackpin.diff.run import diff_loaded
from stackpin.errors import StackpinError
from stackpin.history.model import DeploymentKey
from stackpin.profile.loader import LoadedProfile, load_profile
from stackpin.profile.model import AutotuneMode, StackProfile
from stackpin.profile.topology import topology_of
from stackpin.upgrade.model import PROPOSAL_FILE, PROPOSAL_MARKDOWN, Finding, Proposal, Versions
from stackpin.upgrade.releases import Source, Target, add_target, newest_dynamo
from stackpin.upgrade.textedit import TextEdit
from stackpin.upgrade.translate import Engine, Translation, translate
from stackpin.validate import run_rules
from stackpin.validate.upgradecheck import BOOKKEEPING, upgrade_findings
from stackpin.yamlio import write_atomic, write_files

CAPTURE_FILE = "capture-job.yaml"
NAME_MAX = 40  # metadata.name's limit (profile/model.py Metadata)
_V = ("spec", "versions")


@dataclass(frozen=True)
class Written:
    """What a proposal run produced: the proposal, its directory, and the files it wrote there."""

    proposal: Proposal
    directory: Path
    files: tuple[Path, ...]


def candidate_name(name: str, dynamo: str) -> str:
    """`gb300-tuned` on Dynamo 1.7.0 -> `gb300-tuned-dynamo-1-7-0`: a DNS label, as metadata.name must be."""
    tail = "".join(c if c.isalnum() else "-" for c in dynamo.lower()).strip("-")
    candidate = f"{name}-dynamo-{tail}"
    if len(candidate) > NAME_MAX:
        raise StackpinError(f"the candidate's name {candidate!r} is longer than {NAME_MAX} characters",
                            "shorten metadata.name of the current profile")
    return candidate


def catalog_dir(loaded: LoadedProfile, given: Path | None) -> Path:
    """Where the new releases go: --catalog, else the profile's first catalogPath entry, else the first of
    STACKPIN_CATALOG_PATH. It must be on the profile's search path, or the candidate would not find them."""
    path = loaded.profile.spec.catalog_path
    with profile_catalogs(path, str(loaded.locate(("spec", "catalogPath")))):
        searched = site_dirs()
    if given is None:
        if not searched:
            raise StackpinError("no catalog directory to add the new releases to",
                                f"give --catalog DIR, or name one in spec.catalogPath or {ENV}")
        return searched[0]
    if not any(given.resolve() == d.resolve() for d in searched):
        raise StackpinError(f"--catalog {given}: not on the profile's spec.catalogPath or {ENV}; the candidate "
                            "would not find the releases added there", "add it to spec.catalogPath first")
    return given


def _runtime_image(image: str, dynamo: str) -> str:
    """Dynamo X's runtime image: the same repository, tag X (a digest would pin the old release)."""
    from stackpin.lock.oci.reference import ImageRef

    return f"{ImageRef.parse(image).name}:{dynamo}"


def _versions(profile: StackProfile) -> Versions:
    v = profile.spec.versions
    return Versions.model_validate({"dynamo": v.dynamo, engine_of(profile).name: profile.spec.engine_version,
                                    "flashinfer": v.flashinfer, "nixl": v.nixl, "runtimeImage": v.runtime_image})


def _moved(profile: StackProfile, versions: Versions) -> StackProfile:
    change = versions.model_dump(by_alias=False)
    spec = profile.spec.replace(versions=profile.spec.versions.replace(**change))
    return profile.replace(spec=spec)


def _finding(f: Any) -> Finding:
    return Finding(code=f.code, severity=str(f.severity), path=f.path, message=f.message, hint=f.hint)


def _engines(current: Versions, target: Versions) -> tuple[Engine, Engine | None]:
    """The stack's engine and Dynamo's worker for it, each at its current and target release."""
    runs = engine(current.engine)
    was, now = current.release or "", target.release or ""
    old, new = runs.flag_catalog(was), runs.flag_catalog(now)
    if old is None or new is None:
        missing = was if old is None else now
        raise StackpinError(f"no catalog of {runs.label} {missing} on the search path",
                            f"stackpin engines add {runs.distribution}=={missing} --catalog DIR")
    dynamo_old = dynamo_catalog(current.dynamo, runs.dynamo_worker)
    dynamo_new = dynamo_catalog(target.dynamo, runs.dynamo_worker)
    dynamo = Engine("Dynamo", "dynamoArgs", dynamo_old, dynamo_new) if dynamo_old and dynamo_new else None
    return Engine(runs.label, "engineArgs", old, new), dynamo


@dataclass(frozen=True)
class _Candidate:
    text: str
    stale_cache: bool


def _edit(loaded: LoadedProfile, name: str, target: Versions, plan: Translation, stale_cache: bool) -> _Candidate:
    """The current file's text with the upgrade's lines edited; blockers for what cannot be edited here."""
    edit = TextEdit(loaded.path.read_text(encoding="utf-8"), str(loaded.path))
    edit.set(("metadata", "name"), name)
    written = _versions(loaded.profile)
    for field, value in target.model_dump(by_alias=True).items():
        if value != written.model_dump(by_alias=True)[field]:
            edit.set(_V + (field,), value)
    for rewrite in plan.rewrites:
        edit.rename((*rewrite.path.split("."), rewrite.old), rewrite.new)
    for pinned in plan.pinned:
        edit.set(tuple(pinned.path.split(".")), pinned.value)
    if stale_cache:
        # `tune`: the engine tunes at start (what the capture Job records), never reads the stale cache;
        # `off` would serve untuned kernels, and `replay` needs a cache for this FlashInfer (SP201).
        edit.set(("spec", "autotune", "mode"), AutotuneMode.tune.value,
                 comment="until the cache is captured again for this FlashInfer (proposal.md)")
        if edit.has(("spec", "autotune", "cache")):
            edit.delete(("spec", "autotune", "cache"))
        else:  # inherited: the base's cache stays for the stacks that replay it
            edit.set(("spec", "autotune", "cache"), None)
    return _Candidate(edit.text, stale_cache)


def _inherited(loaded: LoadedProfile, plan: Translation) -> Translation:
    """A renamed flag set in a base profile cannot be renamed from the candidate (maps merge: the base's
    key would stay): a blocker naming the base, which other stacks may extend."""
    from stackpin.upgrade.model import Blocker

    keep, blockers = [], list(plan.blockers)
    for rewrite in plan.rewrites:
        where = loaded.locate((*rewrite.path.split("."), rewrite.old)).file
        if Path(where).resolve() == loaded.path.resolve():
            keep.append(rewrite)
        else:
            blockers.append(Blocker(path=f"{rewrite.path}.{rewrite.old}", message=(
                f"{rewrite.old} is renamed {rewrite.new}, but {where} sets it, not {loaded.path}: rename it "
                "there (other stacks extending it move with it) or override the pool's engineArgs here")))
    return Translation(tuple(keep), plan.pinned, tuple(blockers))


@contextmanager
def loaded_text(path: Path, text: str) -> Iterator[LoadedProfile]:
    """`text` loaded as the profile at `path` would be (beside it, so `extends:` resolves the same), from a
    temp file that never outlives the block; the candidate is checked before anything is written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".stackpin-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        loaded = load_profile(tmp)
        yield LoadedProfile(loaded.profile, path, (path, *loaded.sources[1:]), loaded.positions, loaded.document)
    finally:
        Path(tmp).unlink(missing_ok=True)


def stack_side(loaded: LoadedProfile, source: str) -> Stack:
    return Stack(ref=StackRef(source=source, kind=SourceKind.profile, name=loaded.profile.name),
                 profile=loaded.profile, path=loaded.path, sources=tuple(str(p) for p in loaded.sources))


def _candidate_findings(current: LoadedProfile, candidate: LoadedProfile, target: Versions) -> list[Finding]:
    """The candidate's findings under the upgrade rules that the current stack does not have. SP241 and
    SP243 judge the current stack's pins and cache, which the candidate has already replaced."""
    handled = set(BOOKKEEPING)
    if candidate.profile.spec.versions.dynamo == target.dynamo:
        handled.add("SP241")
    if candidate.profile.spec.autotune.mode != AutotuneMode.replay:
        handled.add("SP243")
    before = {(f.code, f.path) for f in run_rules(current)}
    after = run_rules(candidate, upgrade_from=current.profile)
    return [_finding(f) for f in after if (f.code, f.path) not in before and f.code not in handled]


def _capture_job(candidate: LoadedProfile) -> str:
    """The candidate's capture Job, as `stackpin autotune capture-job` renders it, from the candidate as
    written (runtime image by tag, model at its requested revision): it is not locked yet."""
    from stackpin.render.capture import capture_objects
    from stackpin.upgrade.unlocked import unlocked_lock
    from stackpin.yamlio import dump_yaml_all

    lock = unlocked_lock(candidate)
    header = (f"# stackpin upgrade propose: the autotune capture Job of {lock.metadata.name}, rendered before it "
              "is locked\n# (image by tag, model at its requested revision); after `stackpin lock`, "
              f"`stackpin autotune capture-job {candidate.path}` renders it pinned.\n")
    return header + dump_yaml_all(capture_objects(lock))


def _remeasure(diff: StackDiff | None, stale: bool, current: StackProfile, target: Versions) -> list[str]:
    """The stale cache first, then what the stack diff says the change invalidates."""
    out = [f"{i.what.value}: {i.detail}" for i in diff.invalidates] if diff is not None else []
    if stale:
        job = CAPTURE_FILE if diff is not None else "stackpin autotune capture-job"
        out.insert(0, f"spec.autotune.cache: {current.spec.autotune.cache} was captured with FlashInfer "
                   f"{current.spec.versions.flashinfer}; capture it again on the candidate (FlashInfer "
                   f"{target.flashinfer}; its capture Job: {job}), pack it, pin it and set mode: replay")
    return out


def _check_free(paths: list[Path], force: bool) -> None:
    taken = [p for p in paths if p.exists()]
    if taken and not force:
        raise StackpinError(f"{taken[0]} exists; a proposal never replaces one", "give --force to replace it")


def propose(profile: Path, *, to: str | None, source: Source, catalog: Path | None = None,
            out: Path | None = None, force: bool = False) -> Written:
    from stackpin.upgrade.releases import parse_target

    current = load_profile(profile)
    written = _versions(current.profile)
    dynamo = parse_target(to) if to is not None else newest_dynamo(current, from_dir=source.from_dir,
                                                                   index_url=source.index_url)
    if parse_version(dynamo) <= parse_version(written.dynamo):
        raise StackpinError(f"Dynamo {dynamo} is not newer than the stack's Dynamo {written.dynamo}")
    name = candidate_name(current.profile.name, dynamo)
    candidate_path = profile.parent / f"{profile.stem}.dynamo-{dynamo}{profile.suffix or '.yaml'}"
    directory = out if out is not None else Path("proposals") / name
    _check_free([candidate_path, directory / PROPOSAL_FILE, directory / PROPOSAL_MARKDOWN], force)
    where = catalog_dir(current, catalog)
    with profile_catalogs(current.profile.spec.catalog_path, str(current.locate(("spec", "catalogPath")))):
        found: Target = add_target(dynamo, where, source, written.engine)
        target = Versions.model_validate({
            "dynamo": found.dynamo, found.engine: found.release, "flashinfer": found.flashinfer, "nixl": found.nixl,
            "runtimeImage": _runtime_image(written.runtime_image, dynamo)})
        moved = _moved(current.profile, target)
        active = [(p.role, p.spec) for p in topology_of(moved, load_catalog()).pools]
        runs, dynamo_engine = _engines(written, target)
        plan = _inherited(current, translate(moved, active, runs, dynamo_engine))
        upgrade = upgrade_findings(current, found.release) if found.release != written.release else []
        stale = (current.profile.spec.autotune.mode == AutotuneMode.replay and bool(current.profile.spec.autotune.cache)
                 and (target.flashinfer != written.flashinfer or any(f.code == "SP243" for f in upgrade)))
    files: dict[Path, str] = {}
    diff, candidate_text = None, None
    if plan.blockers:
        findings = [_finding(f) for f in upgrade]
    else:
        candidate_text = _edit(current, name, target, plan, stale).text
        with (loaded_text(candidate_path, candidate_text) as candidate,
              profile_catalogs(current.profile.spec.catalog_path)):
            findings = _candidate_findings(current, candidate, target)
            diff = diff_loaded(stack_side(current, str(profile)), stack_side(candidate, str(candidate_path)))
            if stale:
                files[directory / CAPTURE_FILE] = _capture_job(candidate)
    key = DeploymentKey(namespace=current.profile.metadata.namespace, name=current.profile.metadata.deployment,
                        platform=str(current.profile.spec.target.platform))
    proposal = Proposal(
        deployment=str(key), current_profile=str(profile),
        candidate_profile=str(candidate_path) if candidate_text is not None else None,
        current=written, candidate=target, catalog=str(where), added=list(found.added),
        rewrites=list(plan.rewrites), pinned=list(plan.pinned), blockers=list(plan.blockers), findings=findings,
        remeasure=_remeasure(diff, stale, current.profile, target),
        capture_job=str(directory / CAPTURE_FILE) if directory / CAPTURE_FILE in files else None)
    from stackpin.upgrade.markdown import proposal_markdown

    files[directory / PROPOSAL_FILE] = proposal_json(proposal)
    files[directory / PROPOSAL_MARKDOWN] = proposal_markdown(proposal, diff, directory)
    _write(candidate_path, candidate_text, files, directory, force)
    return Written(proposal, directory, tuple([*([candidate_path] if candidate_text else []), *files]))


def proposal_json(proposal: Proposal) -> str:
    """proposal.json: canonical (sorted keys), the bytes `upgrade trial` names by sha256."""
    return json.dumps(proposal.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True) + "\n"


def _write(candidate_path: Path, candidate_text: str | None, files: dict[Path, str], directory: Path,
           force: bool) -> None:
    """The candidate, then the proposal directory as one set; a candidate this run created is taken back
    when the proposal cannot be written."""
    _check_free([candidate_path, *files], force)  # again: another run may have written them meanwhile
    created = candidate_text is not None and not candidate_path.exists()
    if candidate_text is not None:
        write_atomic(candidate_path, candidate_text)
    try:
        write_files(files, root=directory)
    except BaseException:
        if created:
            candidate_path.unlink(missing_ok=True)
        raise
