"""spec.acknowledge: warnings a stack's owners accept on purpose, each with its reason.

An acknowledged finding is still reported, marked with its reason, and not counted by `--fail-on`.
Errors never are: an error is a stack that fails to start or does not run what it says, and `stackpin
lock` refuses it whatever the profile says. An error rule whose hits are warnings in some stacks
(`Rule.warning_when`: SP121 on multi-node NVLink) may be acknowledged for those hits only. An
acknowledgement of an unknown or error-only code, or one that meets an error, is refused (exit 2);
one that matches nothing is SP251, so that acknowledgements do not outlive their reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

from stackpin.errors import InputError, Problem
from stackpin.profile.loader import LoadedProfile
from stackpin.profile.model import POOL_NAMES, Acknowledgement
from stackpin.profile.topology import Role
from stackpin.rules import (
    RULES,
    Acknowledged,
    Context,
    Finding,
    Hit,
    Severity,
    dotted,
    pool_path,
    rule,
)

STALE = "SP251"


def _rule_path(index: int) -> tuple[str | int, ...]:
    return ("spec", "acknowledge", index, "rule")


def matches(ack: Acknowledgement, finding: Finding) -> bool:
    """The finding is of the acknowledged rule and, with `where`, in that pool or at or under that field."""
    if finding.code != ack.rule:
        return False
    if ack.where is None:
        return True
    prefix = ".".join(pool_path(cast(Role, ack.where))) if ack.where in POOL_NAMES else ack.where
    return finding.path == prefix or finding.path.startswith((f"{prefix}.", f"{prefix}["))


def _static_problem(ack: Acknowledgement, earlier: Sequence[Acknowledgement]) -> str | None:
    found = RULES.get(ack.rule)
    if found is None:
        return f"{ack.rule} is not a rule code; `stackpin rules` lists them"
    if found.refuse_ack is not None:
        return f"{ack.rule} ({found.title}) cannot be acknowledged: {found.refuse_ack}"
    if any((a.rule, a.where) == (ack.rule, ack.where) for a in earlier):
        return f"{ack.rule} is acknowledged twice" + (f" for {ack.where}" if ack.where else "")
    return None


def check_acknowledgements(loaded: LoadedProfile) -> None:
    """Refuse (InputError, exit 2) what may never be acknowledged, before any rule runs."""
    acks = loaded.profile.spec.acknowledge
    problems = [Problem(loaded.locate(_rule_path(i)), dotted(_rule_path(i)), why)
                for i, ack in enumerate(acks) if (why := _static_problem(ack, acks[:i]))]
    if problems:
        raise InputError(problems)


def acknowledged(loaded: LoadedProfile, findings: list[Finding], *, refuse_errors: bool) -> list[Finding]:
    """The findings with those an acknowledgement accepts marked. An acknowledgement that meets an error
    is refused (InputError) when `refuse_errors`; otherwise the error stays as it is."""
    acks = loaded.profile.spec.acknowledge
    out, problems = [], []
    for finding in findings:
        index = next((i for i, ack in enumerate(acks) if matches(ack, finding)), None)
        if index is None:
            out.append(finding)
        elif finding.severity == Severity.error:
            out.append(finding)
            if refuse_errors:
                problems.append(Problem(
                    loaded.locate(_rule_path(index)), dotted(_rule_path(index)),
                    f"{finding.code} is an error for this stack ({finding.location}: {finding.message}); an error "
                    "cannot be acknowledged, only fixed"))
        else:
            where = str(loaded.locate(("spec", "acknowledge", index)))
            out.append(finding.replace(acknowledged=Acknowledged(reason=acks[index].reason, location=where)))
    if problems:
        raise InputError(problems)
    return out


@rule(STALE, Severity.warning, "acknowledgement that matches no finding", reads_findings=True,
      acknowledge="it reports acknowledgements that match nothing; remove the stale one instead")
def stale_acknowledgement(ctx: Context) -> Iterator[Hit]:
    found = ctx.findings or ()
    for i, ack in enumerate(ctx.profile.spec.acknowledge):
        if not any(matches(ack, f) for f in found):
            where = f" at {ack.where}" if ack.where else ""
            yield Hit(_rule_path(i), f"{ack.rule}{where} is acknowledged ({ack.reason}) but this stack raises no "
                      "such finding", "remove the acknowledgement" + (
                          ", or correct `where`" if ack.where else ""))
