"""Stand-in pins never reach a cluster unnoticed (issue 35): a lock resolved through the demo mirror holds
digests of stand-in images, model and cache. `apply`, `rollback --apply` and `rollout start` refuse it
(exit 2, naming each pin, nothing written) unless --allow-stand-ins; render marks its objects; history,
status, diff and the report mark such revisions. A lock with production pins passes unmarked."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner
from msgspec.structs import replace

from stackpin.cli.main import main
from stackpin.lock.lockfile import StackLock, read_lock, write_locks
from stackpin.profile.k8s_names import STAND_IN_LABEL
from stackpin.render.build import build_objects
from tests.kube import Kube, lockfile

GB300 = "dynamo/dsv41-flash@gb300-nvl72"


def production(lock: StackLock) -> StackLock:
    """The same lock as if resolved from the registry: standIn is provenance, not identity (no digest changes)."""
    resolved = lock.resolved
    cache = resolved.autotune_cache
    return replace(lock, resolved=replace(
        resolved, images={k: replace(v, stand_in=False) for k, v in resolved.images.items()},
        model=replace(resolved.model, stand_in=False),
        autotune_cache=replace(cache, stand_in=False) if cache is not None else None))


def promoted(tmp_path: Path, *stacks: str) -> list[str]:
    """A history of `stacks` in tmp_path; returns the --history/--deployments flags."""
    dirs = ["--history", str(tmp_path / "history"), "--deployments", str(tmp_path / "deployments")]
    for stack in stacks:
        done = CliRunner().invoke(main, ["promote", lockfile(stack), "-m", stack, *dirs])
        assert done.exit_code == 0, done.output + done.stderr
    return dirs


def test_a_demo_lock_names_each_stand_in_pin() -> None:
    lock = read_lock(Path(lockfile("gb300-tuned")))
    assert [which for which, _ in lock.resolved.stand_ins()] == ["image runtime", "model", "autotune cache"]
    assert production(lock).resolved.stand_ins() == [] and production(lock).stack_digest == lock.stack_digest


def test_render_marks_every_object_of_a_stand_in_lock_and_none_of_a_production_one() -> None:
    lock = read_lock(Path(lockfile("gb300-tuned")))
    for obj in build_objects(lock):
        meta = obj["metadata"]
        assert meta["labels"][STAND_IN_LABEL] == "true", obj["kind"]
        assert meta["annotations"][STAND_IN_LABEL] == ("image runtime, model, autotune cache: stand-ins from a demo "
                                                       "mirror, not production digests")
    for obj in build_objects(production(lock)):
        assert STAND_IN_LABEL not in obj["metadata"]["labels"] and STAND_IN_LABEL not in obj["metadata"]["annotations"]


def test_apply_refuses_stand_ins_writing_nothing_and_applies_them_when_allowed(kube: Kube) -> None:
    lock = read_lock(Path(lockfile("gb300-tuned")))
    for extra in ((), ("--dry-run",)):  # a dry run answers as the apply would
        refused = kube.stackpin("apply", lockfile("gb300-tuned"), *extra, stand_ins=False)
        assert refused.exit_code == 2, refused.output
        [line] = refused.stderr.splitlines()
        assert line.startswith(f"error: {lockfile('gb300-tuned')}: stack gb300-tuned holds stand-in pins")
        for which, pinned in lock.resolved.stand_ins():
            assert f"{which} {pinned}" in line
        assert "--allow-stand-ins" in line
    assert kube.everything() == {} and kube.parent() is None  # not even the Lease's namespace objects

    allowed = kube.stackpin("apply", lockfile("gb300-tuned"))  # the helper adds --allow-stand-ins
    assert allowed.exit_code == 0, allowed.output
    dgd = kube.dgd()
    assert dgd is not None and dgd["metadata"]["labels"][STAND_IN_LABEL] == "true"
    status = kube.stackpin("status", "dsv41-flash")
    assert "(stand-in pins: not production digests)" in status.stdout
    data = json.loads(kube.stackpin("status", "dsv41-flash", "-o", "json").stdout)
    assert data["standIn"] is True


def test_a_production_lock_is_applied_without_the_flag(kube: Kube, tmp_path: Path) -> None:
    lockdir = tmp_path / "lockfiles"
    [path] = write_locks([production(read_lock(Path(lockfile("gb300-tuned"))))], lockdir)
    done = kube.stackpin("apply", str(path), "--dry-run", stand_ins=False)
    assert done.exit_code == 0, done.output + done.stderr
    assert "stand-in" not in done.output + done.stderr


def test_rollback_apply_refuses_stand_ins_and_records_nothing(kube: Kube, tmp_path: Path) -> None:
    dirs = promoted(tmp_path, "gb300-launch", "gb300-tuned")
    history = tmp_path / "history" / GB300
    before = sorted(p.name for p in history.iterdir())
    refused = kube.stackpin("rollback", GB300, "--to", "1", "--apply", *dirs, stand_ins=False)
    assert refused.exit_code == 2, refused.output
    assert "holds stand-in pins" in refused.stderr and "--allow-stand-ins" in refused.stderr
    assert sorted(p.name for p in history.iterdir()) == before
    assert kube.everything() == {}


def test_rollout_start_refuses_stand_ins_before_any_record(tmp_path: Path) -> None:
    dirs = promoted(tmp_path, "gb300-launch")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({
        "apiVersion": "stackpin.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "west"},
        "spec": {"racks": [{"name": "rack-a", "platform": "gb300-nvl72", "kubeconfig": str(tmp_path / "kc")}],
                 "waves": {"canary": "rack-a"}}}), encoding="utf-8")
    rollouts = tmp_path / "rollouts"
    refused = CliRunner().invoke(main, ["rollout", "start", str(fleet), f"{GB300}@1", "--rollouts", str(rollouts),
                                        "--history", dirs[1]])
    assert refused.exit_code == 2, refused.output
    [line] = refused.stderr.splitlines()
    assert "holds stand-in pins" in line and "--allow-stand-ins" in line
    assert not rollouts.exists() or not any(rollouts.rglob("*"))


def test_history_diff_and_report_mark_stand_in_revisions(tmp_path: Path) -> None:
    dirs = promoted(tmp_path, "gb300-launch", "gb300-tuned")
    listing = CliRunner().invoke(main, ["history", GB300, *dirs[:2]])
    rows = listing.stdout.splitlines()
    assert all("(stand-in)" in row for row in rows[2:4]) and rows[-1].startswith("(stand-in): its lock holds")
    data = json.loads(CliRunner().invoke(main, ["history", GB300, *dirs[:2], "-o", "json"]).stdout)
    assert [r["standIn"] for r in data["revisions"]] == [True, True]
    diff = CliRunner().invoke(main, ["diff", f"{GB300}@1", f"{GB300}@2", *dirs[:2]])
    assert diff.stdout.count("stand-in pins: not production digests") == 2
    page = tmp_path / "report.html"
    report = CliRunner().invoke(main, ["report", GB300, *dirs[:2], "--out", str(page)])
    assert report.exit_code == 0, report.output + report.stderr
    html = page.read_text(encoding="utf-8")
    assert html.count('class="stand-in"') == 2 and "refuses it without" in html
