"""Reading two revisions of one deployment (`stackpin diff DEP@1 DEP@2`, `api.diff_stacks`) verifies its
chain once, not once per revision (issue 36), and still the whole chain (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stackpin import api
from stackpin.cli.main import main
from stackpin.history import store as store_module
from stackpin.history.model import DeploymentKey, Revision, parse_revision
from tests.test_history import TUNED, invoke, one_error, three_revisions

DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The revision numbers the store parses, in order; the verified cache off (a cold machine)."""
    monkeypatch.setenv("STACKPIN_CACHE_DIR", "")
    seen: list[int] = []

    def spy(raw: bytes, path: Path, key: DeploymentKey, number: int) -> Revision:
        seen.append(number)
        return parse_revision(raw, path, key, number)

    monkeypatch.setattr(store_module, "parse_revision", spy)
    return seen


def diff(tmp: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["diff", *args, "--history", str(tmp / "history")])


def test_a_two_revision_diff_verifies_the_chain_once(tmp_path: Path, parses: list[int]) -> None:
    three_revisions(tmp_path)
    parses.clear()
    result = diff(tmp_path, f"{DEPLOYMENT}@1", f"{DEPLOYMENT}@2")
    assert result.exit_code == 0, result.output
    assert "gb300-launch" in result.output and "gb300-tuned" in result.output
    assert sorted(parses) == [1, 2, 3]  # each revision once: the whole chain, one time


def test_the_library_diff_verifies_the_chain_once(tmp_path: Path, parses: list[int]) -> None:
    three_revisions(tmp_path)
    parses.clear()
    result = api.diff_stacks(f"{DEPLOYMENT}@1", f"{DEPLOYMENT}@2", history=tmp_path / "history")
    assert not result.equal
    assert sorted(parses) == [1, 2, 3]


def test_a_two_revision_diff_still_refuses_a_broken_chain(tmp_path: Path) -> None:
    three_revisions(tmp_path)
    assert invoke(tmp_path, "promote", str(TUNED), "-m", "Tuned again").exit_code == 0
    newest = tmp_path / "history" / "dynamo" / "dsv41-flash@gb300-nvl72" / "000004.yaml"
    newest.write_text(newest.read_text().replace("message: Tuned again", "message: Tuned again!"))
    error = one_error(diff(tmp_path, f"{DEPLOYMENT}@1", f"{DEPLOYMENT}@2"))
    assert "000004.yaml: revisionDigest does not match" in error
