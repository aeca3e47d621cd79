"""Package code never reads stackpin's own checkout (lockfiles/, tests/data, profiles/): an installed
stackpin has none. What it needs of a project comes in explicitly (--lockdir) or is packaged data."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from stackpin.errors import StackpinError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stackpin"


def test_no_module_reaches_out_of_the_package_for_checkout_files() -> None:
    # parents[2] / parent.parent.parent of a module file is the checkout root; "tests/data" its test data.
    reaching = re.compile(r"__file__\)\.resolve\(\)\.parents\[[2-9]\]|parent\.parent\.parent|[\"']tests/data/")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if reaching.search(line)]
    assert not found, "\n".join(found)


def test_calibration_reads_the_locks_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stackpin.sim.curve import figures

    monkeypatch.chdir(tmp_path)  # no lockfiles/ here, and the checkout's must not be found instead
    with pytest.raises(StackpinError, match=f"gb300-launch: no {tmp_path.resolve()}/lockfiles/gb300-launch.lock.yaml"):
        figures()


def test_the_plan_looks_up_locks_in_the_lockdir_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stackpin.lock.lockfile import read_lock
    from stackpin.plan.aic import _lock_stack

    shipped = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
    digest = read_lock(shipped).stack_digest
    monkeypatch.chdir(tmp_path)
    assert _lock_stack(digest, Path("lockfiles")) is None  # not the checkout's lockfiles/
    (tmp_path / "site").mkdir()
    shutil.copy(shipped, tmp_path / "site" / shipped.name)
    stack = _lock_stack(digest, Path("site"))
    assert stack is not None and stack.digest == digest
