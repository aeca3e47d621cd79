"""The command line: exit codes, one line per input problem, JSON output, rules, lazy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from tests.helpers import PROFILES_DIR, SHIPPED, apply, base_doc, dump, write_profile

STACKPIN = Path(sys.executable).parent / "stackpin"  # the console script installed next to the interpreter
W = "spec.placement.pools.worker"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def run(*args: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, *extra, str(STACKPIN), *args], capture_output=True, text=True,
                          timeout=60, env=env, check=False)


def _assert_user_error(result: Result, problems: int = 1) -> list[str]:
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert len(lines) == problems, lines
    assert all(line.startswith("error: ") for line in lines), lines
    return lines


# --- exit codes ---------------------------------------------------------------------------------


def test_validate_shipped_directory_exits_0() -> None:
    result = invoke("validate", str(PROFILES_DIR))
    assert result.exit_code == 0, result.output
    for profile in SHIPPED:
        assert profile.stem in result.stdout  # every stack in the summary table


@pytest.mark.parametrize("profile", SHIPPED, ids=lambda p: p.stem)
def test_validate_each_shipped_profile_exits_0(profile: Path) -> None:
    assert invoke("validate", str(profile)).exit_code == 0


def test_error_finding_exits_1(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {"spec.versions.nixl": "1.3.2"}))
    result = invoke("validate", str(path))
    assert result.exit_code == 1, result.output
    assert "SP163" in result.stdout
    assert f"{path}:" in result.stdout


def test_fail_on_warning_exits_1_for_shipped_profile() -> None:
    profile = str(PROFILES_DIR / "gb300-tuned.yaml")
    assert invoke("validate", profile).exit_code == 0
    result = invoke("validate", "--fail-on", "warning", profile)
    assert result.exit_code == 1
    assert "SP181" in result.stdout


def test_no_arguments_is_a_usage_error() -> None:
    result = invoke("validate")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


# --- input errors: exit 2, one line per problem, no traceback -------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    (line,) = _assert_user_error(invoke("validate", str(tmp_path / "nope.yaml")))
    assert line == f"error: {tmp_path / 'nope.yaml'}: no such file"


def test_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: stackpin.dev/v1\nspec: [1, 2\n", encoding="utf-8")
    (line,) = _assert_user_error(invoke("validate", str(path)))
    assert line.startswith(f"error: {path}:") and "invalid YAML" in line


def test_unknown_key(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {f"{W}.tensorParalel": 4}))
    (line,) = _assert_user_error(invoke("validate", str(path)))
    assert f"{W}.tensorParalel: unknown field (did you mean 'tensorParallel'?)" in line


def test_wrong_type(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {f"{W}.replicas": "two"}))
    (line,) = _assert_user_error(invoke("validate", str(path)))
    assert f"{W}.replicas:" in line


def test_extends_cycle(tmp_path: Path) -> None:
    write_profile(tmp_path, {"extends": "b.yaml"}, "a.yaml")
    write_profile(tmp_path, {"extends": "a.yaml"}, "b.yaml")
    (line,) = _assert_user_error(invoke("validate", str(tmp_path / "a.yaml")))
    assert "extends cycle" in line


def test_several_problems_one_line_each(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {f"{W}.replicas": "two", "spec.bogus": 1,
                                                      "spec.model.maxModelLen": 0}))
    lines = _assert_user_error(invoke("validate", str(path)), problems=3)
    assert all(line.startswith(f"error: {path}:") for line in lines)


def test_bad_file_does_not_hide_good_ones(tmp_path: Path) -> None:
    bad = write_profile(tmp_path, apply(base_doc(), {f"{W}.replicas": "two"}))
    result = invoke("validate", str(PROFILES_DIR / "gb300-tuned.yaml"), str(bad))
    assert result.exit_code == 2
    assert "gb300-tuned" in result.stdout  # the good profile is still reported
    assert len(result.stderr.splitlines()) == 1


def test_empty_directory(tmp_path: Path) -> None:
    _assert_user_error(invoke("validate", str(tmp_path)))


# --- output formats ------------------------------------------------------------------------------


def test_json_output(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {"spec.versions.nixl": "1.3.2"}))
    result = invoke("validate", "-o", "json", str(path))
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["input_errors"] == []
    (report,) = data["reports"]
    assert report["name"] == "gb300-tuned"
    assert report["summary"]["gpus_used"] == 72
    findings = report["findings"]
    assert findings and all({"code", "severity", "path", "location", "message"} <= f.keys() for f in findings)
    (nixl,) = [f for f in findings if f["code"] == "SP163"]
    assert nixl["severity"] == "error" and nixl["path"] == "spec.versions.nixl"
    line = next(i for i, text in enumerate(dump(apply(base_doc(), {})).splitlines(), 1) if "nixl:" in text)
    assert nixl["location"] == f"{path}:{line}:5"


def test_json_output_of_shipped_profiles() -> None:
    result = invoke("validate", "-o", "json", str(PROFILES_DIR))
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert len(data["reports"]) == len(SHIPPED)
    assert all(f["severity"] != "error" for r in data["reports"] for f in r["findings"])


def test_json_output_with_input_error(tmp_path: Path) -> None:
    result = invoke("validate", "-o", "json", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["reports"] == [] and len(data["input_errors"]) == 1


def test_yaml_output() -> None:
    import yaml

    result = invoke("validate", "-o", "yaml", str(PROFILES_DIR / "gb300-tuned.yaml"))
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout)["reports"][0]["name"] == "gb300-tuned"


def test_rules_lists_codes() -> None:
    result = invoke("rules")
    assert result.exit_code == 0
    codes = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("SP")]
    assert len(codes) >= 25 and len(codes) == len(set(codes))
    table = json.loads(invoke("rules", "-o", "json").stdout)
    assert [row["code"] for row in table] == codes
    assert {row["severity"] for row in table} <= {"error", "warning", "info"}


def test_schema_command_prints_json() -> None:
    result = invoke("schema")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["title"] == "stackpin StackProfile"


# --- a real process -------------------------------------------------------------------------------


def test_subprocess_exit_codes(tmp_path: Path) -> None:
    assert STACKPIN.is_file(), f"console script missing at {STACKPIN}; run `make setup`"
    ok = run("validate", str(PROFILES_DIR))
    assert ok.returncode == 0, ok.stderr
    assert "gb300-tuned" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec:\n\t- 1\n", encoding="utf-8")
    missing = tmp_path / "nope.yaml"
    failed = run("validate", str(bad), str(missing))
    assert failed.returncode == 2
    assert "Traceback" not in failed.stderr
    lines = failed.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), lines
    error = write_profile(tmp_path, apply(base_doc(), {"spec.versions.nixl": "1.3.2"}))
    assert run("validate", str(error)).returncode == 1


def test_help_imports_nothing_heavy() -> None:
    result = run("--help", extra=("-X", "importtime"))
    assert result.returncode == 0
    assert "validate" in result.stdout
    imported = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            imported.add(line.rsplit("|", 1)[1].strip())
    assert "click" in imported and "stackpin.cli" in imported  # the parse really ran
    heavy = {"kubernetes", "lightkube", "httpx2", "kubernetes_validate", "httpx", "matplotlib", "jsonschema",
             "pydantic", "rich", "yaml", "jinja2"}
    loaded = {name for name in imported if name.split(".")[0] in heavy}
    assert loaded == set(), f"`stackpin --help` imports {sorted(loaded)}"


def test_python_dash_m_stackpin() -> None:
    result = subprocess.run([sys.executable, "-m", "stackpin", "rules"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "SP121" in result.stdout
