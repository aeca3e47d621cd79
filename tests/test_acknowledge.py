"""spec.acknowledge: a warning accepted on purpose, with its reason, is shown but does not fail
`--fail-on warning`; errors, unknown codes and stale acknowledgements are not let through."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.diff.engine import diff_stacks
from stackpin.diff.inputs import load_stack
from stackpin.diff.model import GroupId, Impact
from stackpin.lock.lockfile import check_locks, effective_profile, read_lock
from stackpin.profile.loader import load_profile
from stackpin.render.output import lock_for_profile
from stackpin.rules import Finding
from stackpin.validate import Severity, all_rules, run_rules
from tests.helpers import ROOT, apply, base_doc, dump, line_of, load_doc, write_profile

W = "spec.placement.pools.worker"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1@sha256:" + "a" * 64
# GB300 NVL72 as 9 x TP8 with everything else pinned and sized: SP121 (a TP group across two trays) is
# its only finding, a warning on a rack with multi-node NVLink.
TP8 = {f"{W}.tensorParallel": 8, f"{W}.replicas": 9, "spec.model.revision": "0" * 40,
       "spec.versions.runtimeImage": IMAGE, "spec.kernels.all2all": "flashinfer_nvlink_one_sided",
       "spec.service.agents": 576}
REASON = "TP8 keeps each replica's all-reduce on the rack's NVLink; measured faster than 18 x TP4 here"


def tp8(acks: list[dict[str, Any]] | None = None, **more: Any) -> dict[str, Any]:
    doc = apply(base_doc(), {**TP8, **more})
    if acks is not None:
        doc["spec"]["acknowledge"] = acks
    return doc


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def user_error(result: Result) -> str:
    """The one `error:` line of a refused input (exit 2, no traceback)."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ")
    return line


def ack_line(path: Path, index: int = 0, key: str = "rule") -> str:
    """`file:line:col` of a key of the index-th spec.acknowledge entry as `dump` writes it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index("  acknowledge:")
    items = [i for i in range(start + 1, len(lines)) if lines[i].startswith("  - ")]
    item = items[index]
    for i in range(item, len(lines)):
        text = lines[i][4:] if i == item else lines[i].strip()
        if text.startswith(f"{key}:"):
            return f"{path}:{i + 1}:5"
    raise AssertionError(f"no {key} in entry {index}")


def notes_left_out(findings: list[Finding]) -> list[Finding]:
    """Warnings and errors: every GB300 stack also carries info notes (SP262: the catalog's estimates, where no
    site overlay measured them), which no acknowledgement is about."""
    return [f for f in findings if f.severity != Severity.info]


# --- the deliberate 9 x TP8 stack -----------------------------------------------------------------

def test_nine_tp8_replicas_on_gb300_raise_sp121_as_their_only_warning(tmp_path: Path) -> None:
    findings = notes_left_out(run_rules(load_doc(tmp_path, tp8())))
    assert [(f.code, f.severity, f.path) for f in findings] == [("SP121", Severity.warning, f"{W}.tensorParallel")]


def test_fail_on_warning_fails_without_the_acknowledgement_and_passes_with_it(tmp_path: Path) -> None:
    plain = write_profile(tmp_path, tp8(), "plain.yaml")
    result = invoke("validate", "--fail-on", "warning", str(plain))
    assert result.exit_code == 1, result.output
    assert "ok, 1 warning(s)" in result.stdout

    accepted = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON}]), "accepted.yaml")
    result = invoke("validate", "--fail-on", "warning", str(accepted))
    assert result.exit_code == 0, result.output
    # Still shown, with its reason, and counted apart in the summary.
    [line] = [x for x in result.stdout.splitlines() if "SP121" in x]
    assert line.strip().startswith(f"{accepted}:") and line.endswith(f"(acknowledged: {REASON})")
    assert "ok, 1 acknowledged" in result.stdout and "warning(s)" not in result.stdout


def test_an_acknowledged_warning_still_counts_as_a_finding_without_fail_on_warning(tmp_path: Path) -> None:
    """The default --fail-on error is unchanged: the stack passes with or without the acknowledgement."""
    for i, acks in enumerate((None, [{"rule": "SP121", "reason": REASON}])):
        assert invoke("validate", str(write_profile(tmp_path, tp8(acks), f"p{i}.yaml"))).exit_code == 0


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_machine_output_carries_the_acknowledgement(tmp_path: Path, fmt: str) -> None:
    import yaml

    path = write_profile(tmp_path, tp8([{"rule": "SP121", "where": "worker", "reason": REASON}]))
    result = invoke("validate", "--fail-on", "warning", "-o", fmt, str(path))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    [finding] = [f for f in data["reports"][0]["findings"] if f["severity"] != "info"]
    assert finding["code"] == "SP121" and finding["severity"] == "warning"
    # Where it is acknowledged: the entry's own line, so that a reader finds it (in a base profile too).
    entry = ack_line(path, key="rule")
    assert finding["acknowledged"] == {"reason": REASON, "location": entry.rsplit(":", 1)[0] + ":5"}


def test_a_multi_line_reason_prints_on_the_finding_s_one_line(tmp_path: Path) -> None:
    text = dump(tp8()) + "  acknowledge:\n  - rule: SP121\n    reason: |\n      TP8 on purpose.\n      Measured.\n"
    path = write_profile(tmp_path, text)
    result = invoke("validate", str(path))
    [line] = [x for x in result.stdout.splitlines() if "SP121" in x]
    assert line.endswith("(acknowledged: TP8 on purpose. Measured.)")


# --- where narrows it -----------------------------------------------------------------------------

@pytest.mark.parametrize(("where", "matches"), [
    ("worker", True), (f"{W}.tensorParallel", True), (W, True), ("spec.placement", True),
    ("prefill", False), ("spec.kernels", False), (f"{W}.tensorParallelism", False),
])
def test_where_narrows_the_acknowledgement(tmp_path: Path, where: str, matches: bool) -> None:
    findings = run_rules(load_doc(tmp_path, tp8([{"rule": "SP121", "where": where, "reason": REASON}])))
    [sp121] = [f for f in findings if f.code == "SP121"]
    assert (sp121.acknowledged is not None) == matches
    assert ("SP251" in {f.code for f in findings}) == (not matches)


# --- stale acknowledgements -----------------------------------------------------------------------

def test_an_acknowledgement_that_matches_nothing_is_sp251_at_its_rule(tmp_path: Path) -> None:
    path = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON},
                                        {"rule": "SP126", "reason": "idle GPUs kept for a canary"}]))
    result = invoke("validate", "--fail-on", "warning", str(path))
    assert result.exit_code == 1, result.output
    [line] = [x.strip() for x in result.stdout.splitlines() if "SP251" in x]
    assert line == (f"{ack_line(path, 1)}: warning SP251 spec.acknowledge[1].rule: SP126 is acknowledged (idle GPUs "
                    "kept for a canary) but this stack raises no such finding (hint: remove the acknowledgement)")
    assert "ok, 1 warning(s), 1 acknowledged" in result.stdout
    # Once the stack does leave GPUs idle (SP126, an info), the acknowledgement is in use again.
    path = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON},
                                        {"rule": "SP126", "reason": "idle GPUs kept for a canary"}],
                                       **{f"{W}.replicas": 8, "spec.service.agents": 512}))
    result = invoke("validate", "--fail-on", "warning", str(path))
    assert result.exit_code == 0 and "SP251" not in result.stdout, result.output


# --- refused --------------------------------------------------------------------------------------

R = "spec.acknowledge[0].rule"


@pytest.mark.parametrize(("ack", "key", "field", "message"), [
    ({"rule": "SP999", "reason": REASON}, "rule", R, "SP999 is not a rule code; `stackpin rules` lists them"),
    ({"rule": "SP12", "reason": REASON}, "rule", "spec.acknowledge.0.rule", "must match the pattern"),
    ({"rule": "SP131", "reason": REASON}, "rule", R,
     "SP131 (weights do not fit on the GPU) cannot be acknowledged: it is an error, a stack that fails to start"),
    ({"rule": "SP222", "reason": REASON}, "rule", R, "its warning too is a worker that fails at start"),
    ({"rule": "SP242", "reason": REASON}, "rule", R, "it reports only under `validate --upgrade-to`"),
    ({"rule": "SP251", "reason": REASON}, "rule", R, "remove the stale one instead"),
    ({"rule": "SP121", "reason": "  "}, "reason", "spec.acknowledge.0.reason", "a reason is required"),
    ({"rule": "SP121"}, "rule", "spec.acknowledge.0.reason", "required field is missing"),
    ({"rule": "SP121", "reason": REASON, "where": "everywhere"}, "where", "spec.acknowledge.0.where",
     "'everywhere' is neither a pool (worker, prefill, decode)"),
], ids=["unknown", "malformed", "error-only", "fails-at-start", "upgrade-only", "stale-rule", "blank-reason",
        "no-reason", "bad-where"])
def test_refused_acknowledgements_exit_2_with_one_line(tmp_path: Path, ack: dict[str, Any], key: str, field: str,
                                                       message: str) -> None:
    path = write_profile(tmp_path, tp8([ack]))
    line = user_error(invoke("validate", str(path)))
    assert line.startswith(f"error: {ack_line(path, key=key)}: {field}: "), line
    assert message in line, line


def test_acknowledging_a_rule_where_it_fires_as_an_error_is_refused(tmp_path: Path) -> None:
    """SP121 is a warning on an NVL72 rack and an error on B200 nodes (no NVLink between them): there
    the TP group cannot form, and no acknowledgement lets that through."""
    doc = apply(base_doc(), {"spec.target.platform": "b200", f"{W}.replicas": 1, f"{W}.tensorParallel": 16})
    doc["spec"]["acknowledge"] = [{"rule": "SP121", "reason": REASON}]
    path = write_profile(tmp_path, doc)
    line = user_error(invoke("validate", str(path)))
    assert line.startswith(f"error: {ack_line(path)}: spec.acknowledge[0].rule: SP121 is an error for this stack "
                           f"({path}:"), line
    assert line.endswith("an error cannot be acknowledged, only fixed"), line
    # lock refuses it the same way, before it resolves anything (no network here).
    line = user_error(invoke("lock", "--lockdir", str(tmp_path / "lockfiles"), str(path)))
    assert "SP121 is an error for this stack" in line
    assert not (tmp_path / "lockfiles").exists()


def test_an_error_the_upgrade_brings_is_reported_not_refused(tmp_path: Path) -> None:
    """Under --upgrade-to an acknowledgement never stops the report of what the move breaks."""
    doc = apply(base_doc(), {"spec.target.platform": "b200", f"{W}.replicas": 1, f"{W}.tensorParallel": 16})
    doc["spec"]["acknowledge"] = [{"rule": "SP121", "reason": REASON}]
    loaded = load_doc(tmp_path, doc)
    findings = run_rules(loaded, upgrade_from=loaded.profile)
    [sp121] = [f for f in findings if f.code == "SP121"]
    assert sp121.severity == Severity.error and sp121.acknowledged is None


def test_the_same_acknowledgement_twice_is_refused(tmp_path: Path) -> None:
    path = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON}, {"rule": "SP121", "reason": "again"}]))
    line = user_error(invoke("validate", str(path)))
    assert line == f"error: {ack_line(path, 1)}: spec.acknowledge[1].rule: SP121 is acknowledged twice"


def test_a_lock_refuses_an_unknown_code_before_resolving(tmp_path: Path) -> None:
    path = write_profile(tmp_path, tp8([{"rule": "SP999", "reason": REASON}]))
    line = user_error(invoke("lock", "--lockdir", str(tmp_path / "lockfiles"), str(path)))
    assert line.startswith(f"error: {ack_line(path)}: spec.acknowledge[0].rule: SP999 is not a rule code")


# --- extends ----------------------------------------------------------------------------------------

def test_extends_inherits_the_base_list_and_a_child_list_replaces_it(tmp_path: Path) -> None:
    base = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON}]), "_base.yaml")
    child = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile", "extends": "_base.yaml",
             "metadata": {"name": "child"}}
    inherited = notes_left_out(run_rules(load_profile(write_profile(tmp_path, child, "child.yaml"))))
    [finding] = inherited
    assert finding.acknowledged is not None and finding.acknowledged.location.startswith(f"{base}:")
    # A child's own list is the whole list (lists replace, as everywhere in extends): SP121 counts again.
    child["spec"] = {"acknowledge": [{"rule": "SP183", "reason": "tracks main on purpose"}]}
    findings = notes_left_out(run_rules(load_profile(write_profile(tmp_path, child, "child.yaml"))))
    assert {(f.code, f.acknowledged is None) for f in findings} == {("SP121", True), ("SP251", True)}
    # ... and `acknowledge: []` drops the base's.
    child["spec"] = {"acknowledge": []}
    findings = notes_left_out(run_rules(load_profile(write_profile(tmp_path, child, "child.yaml"))))
    assert [(f.code, f.acknowledged) for f in findings] == [("SP121", None)]


# --- what runs does not change ------------------------------------------------------------------------

def test_an_acknowledgement_changes_no_digest_and_needs_no_new_lock(tmp_path: Path) -> None:
    """The shipped gb300-tuned lock stays current (lock --check, render) when its profile acknowledges
    a warning: the effective profile, which the lock embeds and hashes, leaves spec.acknowledge out."""
    project = tmp_path / "project"
    profile = project / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"
    profile.parent.mkdir(parents=True)
    text = (ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml").read_text(encoding="utf-8")
    profile.write_text(text + "  acknowledge:\n  - rule: SP183\n    reason: the lock pins the commit\n",
                       encoding="utf-8")
    (project / "lockfiles").mkdir()
    shutil.copy(ROOT / "lockfiles" / "gb300-tuned.lock.yaml", project / "lockfiles")
    loaded = load_profile(profile)
    assert loaded.profile.spec.acknowledge[0].rule == "SP183"
    assert effective_profile(loaded.profile) == effective_profile(load_profile(ROOT / "profiles" /
                                                                               "deepseek-v4.1-flash" /
                                                                               "gb300-tuned.yaml").profile)
    [outcome] = check_locks([profile], project / "lockfiles")
    assert outcome.status == "current", outcome
    lock = lock_for_profile(profile, project / "lockfiles")
    assert lock.stack_digest == read_lock(ROOT / "lockfiles" / "gb300-tuned.lock.yaml").stack_digest
    assert "acknowledge" not in lock.profile["spec"]


def test_diff_shows_an_acknowledgement_as_metadata_with_no_rollout(tmp_path: Path) -> None:
    a = write_profile(tmp_path, tp8(), "a.yaml")
    b = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON}]), "b.yaml")
    diff = diff_stacks(load_stack(str(a)), load_stack(str(b)))
    [group] = diff.groups
    assert (group.id, group.impact, group.restarts) == (GroupId.metadata, Impact.none, ())
    [change] = group.changes
    assert (change.path, change.old, change.new) == ("spec.acknowledge", [], [{"rule": "SP121", "reason": REASON}])
    assert change.note == "validation only: not locked, hashed or rendered"
    assert diff.one_line() == "metadata (none)" and diff.invalidates == ()
    result = invoke("diff", str(a), str(b))
    assert result.exit_code == 0, result.output
    assert "spec.acknowledge: [] -> [{reason:" in result.stdout


def test_show_names_the_acknowledgements_the_effective_profile_leaves_out(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON, "where": "worker"}]), "p.yaml")
    result = invoke("show", str(profile))
    assert result.exit_code == 0, result.output
    assert f"# acknowledged: SP121 at worker: {REASON}\n" in result.stdout
    assert "acknowledge:" not in result.stdout  # not in the effective profile: it is neither locked nor rendered


def test_diff_against_a_lock_does_not_compare_acknowledgements(tmp_path: Path) -> None:
    """A lock carries no acknowledgements: a profile that has some is not 'changed' against its lock."""
    text = (ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml").read_text(encoding="utf-8")
    profile = tmp_path / "gb300-tuned.yaml"
    profile.write_text(text.replace("# yaml-language-server: $schema=../../schema/stackprofile.schema.json\n", "")
                       + "  acknowledge:\n  - rule: SP183\n    reason: the lock pins the commit\n", encoding="utf-8")
    diff = diff_stacks(load_stack(str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")), load_stack(str(profile)))
    assert diff.groups == () and diff.one_line() == "no changes"


# --- the rule table ---------------------------------------------------------------------------------

def test_rules_say_which_errors_are_warnings_somewhere_and_which_rules_can_be_acknowledged() -> None:
    rows = {r["code"]: r for r in json.loads(invoke("rules", "-o", "json").stdout)}
    assert rows["SP121"]["warningWhen"] and rows["SP121"]["acknowledgeable"] is True
    assert rows["SP131"]["warningWhen"] is None and rows["SP131"]["acknowledgeable"] is False
    assert rows["SP183"]["acknowledgeable"] is True and rows["SP251"]["acknowledgeable"] is False
    text = invoke("rules").stdout.splitlines()
    assert ("SP121  error    tensor-parallel group spans nodes (a warning when the platform has multi-node "
            "NVLink (NVL72))") in text
    # An error rule is acknowledgeable only for the warnings it says it gives.
    for r in all_rules():
        if r.acknowledgeable and r.severity == Severity.error:
            assert r.warning_when, r.code


def test_line_of_agrees_with_ack_line(tmp_path: Path) -> None:
    """ack_line (list entries, which line_of does not walk) against the loader's own positions."""
    path = write_profile(tmp_path, tp8([{"rule": "SP121", "reason": REASON}]))
    loaded = load_profile(path)
    assert str(loaded.locate(("spec", "acknowledge", 0, "rule"))) == ack_line(path)
    assert line_of(dump(tp8()), "spec.service")[0] < int(ack_line(path).split(":")[-2])


# --- the docs: docs/getting-started.md's runs are held to real output by tests/test_docs_run.py
