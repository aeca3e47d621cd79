"""The example upgrade workflow (gitops/github-actions/stack-upgrade.yml) against real linters: zizmor,
the GitHub Actions static analyser, and check-jsonschema with its vendored copy of SchemaStore's
github-workflow schema. Both run offline; they are in the `test` extra."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "gitops" / "github-actions" / "stack-upgrade.yml"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it is in the `test` extra (pip install -e '.[test]')")
    return found


def test_the_workflow_passes_zizmor_with_no_finding() -> None:
    done = subprocess.run([_tool("zizmor"), "--offline", "--persona=pedantic", "--no-progress", str(WORKFLOW)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings" in done.stdout, done.stdout


def test_the_workflow_matches_the_github_workflow_schema() -> None:
    done = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_workflow_runs_check_propose_trial_and_never_promotes() -> None:
    """Promote records a revision: a person's decision after a trial on a rack, not a schedule's."""
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    runs = "\n".join(step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"])
    order = [runs.index(f"stackpin upgrade {step}") for step in ("check", "propose", "trial")]
    assert order == sorted(order)
    assert "upgrade promote" not in runs
    assert "gh pr create" in runs


def test_the_docs_show_the_workflow_as_it_is() -> None:
    doc = (ROOT / "docs" / "upgrades.md").read_text(encoding="utf-8")
    assert WORKFLOW.read_text(encoding="utf-8").strip() in doc
