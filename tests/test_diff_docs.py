"""docs/diff.md shows real output: every `$ stackpin ...` block, run again from the repository root,
prints what the page says (a trailing `| head -N` keeps the first N lines)."""

from __future__ import annotations

import re
import shlex

import pytest
from click.testing import CliRunner

from stackpin.cli.main import main
from tests.helpers import ROOT

DOC = ROOT / "docs" / "diff.md"
BLOCK = re.compile(r"^```\n\$ stackpin (?P<cmd>[^\n]*)\n(?P<out>.*?)^```$", re.MULTILINE | re.DOTALL)
BLOCKS = [(m["cmd"], m["out"]) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize(("cmd", "out"), BLOCKS, ids=[c for c, _ in BLOCKS])
def test_output_on_the_page_is_what_the_command_prints(cmd: str, out: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    head = re.search(r"\s*\|\s*head -(\d+)$", cmd)
    args = shlex.split(cmd[: head.start()] if head else cmd)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    printed = result.stdout
    if head:
        printed = "".join(printed.splitlines(keepends=True)[: int(head[1])])
    assert printed == out
