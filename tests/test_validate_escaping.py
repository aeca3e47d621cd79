"""A profile's values never reach a finding line unescaped (issue 37): a line break, ESC or a Unicode line
separator in a value (here an engine flag's value, which SP222 quotes) prints as repr writes it, so one
finding is one line and a value cannot forge the finding after it or colour the terminal."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.errors import InputError, Location, Problem, escape_controls
from stackpin.rules import Hit, Severity, hit_text
from tests.helpers import PROFILES_DIR

LAUNCH = PROFILES_DIR / "gb300-launch.yaml"
# Every character escape_controls writes out: C0, DEL and C1 controls, and U+2028/U+2029.
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)]


def profile_with_value(tmp: Path, value: str) -> Path:
    """gb300-launch with `--distributed-executor-backend: VALUE` in its prefill pool's engineArgs (a value
    vLLM does not know: SP222 quotes it in a warning)."""
    text = LAUNCH.read_text()
    escaped = value.encode("unicode_escape").decode("ascii").replace('"', '\\"')  # a YAML double-quoted scalar
    assert "        maxNumSeqs: 16\n" in text
    text = text.replace("        maxNumSeqs: 16\n", "        maxNumSeqs: 16\n        engineArgs:\n"
                        f'          --distributed-executor-backend: "{escaped}"\n', 1)
    path = tmp / "forged.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("value, shown", [
    ("auto\nSP999 error: forged", "auto\\nSP999 error: forged"),
    ("auto\r\nSP999 error: forged", "auto\\r\\nSP999 error: forged"),
    ("auto\x1b[31m\u2028SP999 error: forged\x85", "auto\\x1b[31m\\u2028SP999 error: forged\\x85"),
])
def test_a_value_with_a_line_break_is_one_finding_line(tmp_path: Path, value: str, shown: str) -> None:
    result = CliRunner().invoke(main, ["validate", str(profile_with_value(tmp_path, value))])
    assert "Traceback" not in result.output, result.output
    lines = result.stdout.splitlines()  # splitlines breaks at \x85 and U+2028 too, as a reader of the output may
    [finding] = [line for line in lines if "SP222" in line]
    assert f"--distributed-executor-backend {shown} is not a value vLLM" in finding
    assert not any("SP999" in line and "SP222" not in line for line in lines), lines
    assert "\x1b" not in result.stdout


def test_escape_controls_writes_what_repr_writes() -> None:
    for char in CONTROLS:
        assert escape_controls(f"a{char}b") == f"a{repr(char)[1:-1]}b"
        assert len(escape_controls(f"a{char}b").splitlines()) == 1
    assert escape_controls("plain text, tabs aside: é ✓") == "plain text, tabs aside: é ✓"


def test_every_finding_and_problem_form_is_one_line() -> None:
    value = "auto\nSP999 error: forged\u2028x\x1b[0m"
    hit = Hit(("spec", "x"), f"value {value}", f"hint {value}", Severity.warning)
    assert len(hit_text("SP222", hit).splitlines()) == 1
    problem = Problem(Location("p.yaml", 3, 5), "spec.x", f"value {value}")
    assert len(str(problem).splitlines()) == 1 and "\\u2028" in str(problem)
    assert InputError([problem, problem]).lines() == [str(problem)] * 2
