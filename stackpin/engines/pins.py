"""The version pins a release's metadata states, as `versions.yaml` records them: vLLM pins
flashinfer-python and torch; ai-dynamo's `vllm` extra pins vllm and nixl, its `sglang` extra sglang and
nixl (`sglang`, `sglang_nixl`); SGLang pins flashinfer-python, torch and sglang-kernel
(docs/facts.md#version-pins).
A Dynamo release's `crd` (the DynamoGraphDeployment version its operator stores) is in no wheel: it comes
from the catalog's sourced `dgd_storage` fact, or `--crd`."""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement

from stackpin.catalog import dgd_storage
from stackpin.catalog.engine_data import DynamoRelease, FlashinferRelease, SglangRelease, VllmRelease
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


def pin_of(release: VllmRelease | DynamoRelease | FlashinferRelease | SglangRelease,
           crd: str | None = None) -> Pin | None:
    """The release's entry for versions.yaml; None for FlashInfer (it pins nothing stackpin tracks)."""
    name = f"{release.engine} {release.version}"
    if isinstance(release, SglangRelease):
        return sglang_pin(release.version, release.requires)
    if isinstance(release, VllmRelease):
        fields = {"flashinfer": exact(release.requires, "flashinfer-python"), "torch": exact(release.requires, "torch")}
        section = "vllm"
    elif isinstance(release, DynamoRelease):
        # Not release.crd: that is the version the planner talks to, one the operator serves (v1beta1
        # from 1.2), while v1alpha1 stayed the stored one until 1.5.0.
        fields = {"vllm": exact(release.requires, "vllm", "vllm"), "nixl": exact(release.requires, "nixl", "vllm"),
                  "crd": crd or dgd_storage().of(release.version)}
        section = "dynamo"
    else:
        return None
    missing = sorted(k for k, v in fields.items() if v is None)
    if missing:
        raise StackpinError(f"{name}: no {', '.join(missing)} pin in its metadata",
                            "its metadata may be dynamic (an sdist); add the wheel with --from")
    if section == "dynamo":
        # Optional: a release may lack the extra, or pin a range (1.3.1: nixl[cu13]<1.1.0,>=1.0.0).
        fields |= {"sglang": exact(release.requires, "sglang", "sglang"),
                   "sglang_nixl": exact(release.requires, "nixl", "sglang")}
    return section, {k: v for k, v in fields.items() if v is not None}


def sglang_pin(version: str, requires: tuple[str, ...]) -> Pin:
    """An SGLang release's versions.yaml entry (section `sglang`) from its Requires-Dist: the FlashInfer
    (flashinfer_python[cu13]==X) and torch it pins, and its kernel package (sglang-kernel) when pinned."""
    fields = {"flashinfer": exact(requires, "flashinfer-python"), "torch": exact(requires, "torch")}
    missing = sorted(k for k, v in fields.items() if v is None)
    if missing:
        raise StackpinError(f"sglang {version}: no {', '.join(missing)} pin in its metadata",
                            "its metadata may be dynamic (an sdist); add the wheel with --from")
    fields["sglang_kernel"] = exact(requires, "sglang-kernel")
    return "sglang", {k: v for k, v in fields.items() if v is not None}
