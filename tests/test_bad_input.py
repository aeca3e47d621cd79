"""Bad input gets one clear error and exit 2, never a traceback or a silent acceptance (issue 18, section 4).

Each case is a reproduction from issue 18: a value that used to be accepted or to crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.cli.main import main
from tests.helpers import ROOT

LOCK = str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")


@pytest.mark.parametrize("args", [
    ["sim", "serve", LOCK, "--speed", "nan"],
    ["sim", "serve", LOCK, "--speed", "inf"],
    ["plan", "--agents", "100", "--slo", "tps=80,ttft=10s", "--gain", "nan", "r.json"],
    ["plan", "--agents", "100", "--slo", "tps=80,ttft=10s", "--gain", "-inf", "r.json"],
    ["plan", "--agents", "100", "--slo", "tps=nan,ttft=10s", "r.json"],
    ["plan", "--agents", "100", "--slo", "tps=inf,ttft=10s", "r.json"],
    ["lock", LOCK, "--timeout", "nan"],
    ["sim", "curve", LOCK, "--at", "nan"],
], ids=["speed-nan", "speed-inf", "gain-nan", "gain-minus-inf", "slo-tps-nan", "slo-tps-inf", "timeout-nan",
        "curve-at-nan"])
def test_nan_and_infinity_are_refused_by_every_float_option(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "not a finite number" in result.stderr or "tps must be > 0" in result.stderr


@pytest.mark.parametrize("args", [
    ["trace", "gen", "--sessions", "2", "--out", "MISSING/t.jsonl"],
    ["autotune", "capture-job", LOCK, "--out", "MISSING/jobs.yaml"],
], ids=["trace-gen", "capture-job"])
def test_a_missing_output_directory_is_an_error_and_is_never_created(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "nonexistent"
    result = CliRunner().invoke(main, [a.replace("MISSING", str(missing)) for a in args])
    assert result.exit_code == 2, result.output
    assert f"{missing} is not a directory" in result.stderr and "Traceback" not in result.output
    assert not missing.exists()


@pytest.mark.parametrize("base", ["../../../../../../../../etc/passwd", "/etc/hostname"])
def test_extends_outside_the_profiles_tree_is_refused(tmp_path: Path, base: str) -> None:
    profile = tmp_path / "stacks" / "p.yaml"
    profile.parent.mkdir()
    profile.write_text(f"extends: {base}\n")
    result = CliRunner().invoke(main, ["validate", str(profile)])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert f"{profile}:1:1: extends: base profile {base!r} is outside the profile's directory" in line
    assert "root:" not in result.output  # nothing of the file it named was read out
