"""The history store as the other commands see it: `diff` and `show` read DEPLOYMENT@REV from it,
`history` lists what changed between revisions (the semantic diff's one line), and `apply` takes a
revision (DEPLOYMENT@REV, or DEPLOYMENT for its newest). Uses the committed demo history."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.diff.run import summarize_locks
from stackpin.history.store import HistoryStore
from tests.helpers import ROOT
from tests.kube import Kube, garbage_collector

HISTORY = ROOT / "history"
GB300 = "dsv41-flash@gb300-nvl72"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--history", str(HISTORY)])


def test_diff_reads_revisions_from_the_history() -> None:
    result = invoke("diff", f"{GB300}@1", f"{GB300}@2", "-o", "json", "--exit-code")
    assert result.exit_code == 1, result.output  # launch -> tuned differ
    data = json.loads(result.stdout)
    assert {g["id"] for g in data["groups"]} >= {"kernels", "autotune", "cuda-graphs", "speculative", "placement"}
    same = invoke("diff", f"{GB300}@1", f"{GB300}@3", "--exit-code")  # revision 3 rolled back to 1
    assert same.exit_code == 0, same.output
    lockfile = str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")
    assert invoke("diff", f"{GB300}@2", lockfile, "--exit-code").exit_code == 0


def test_a_revision_out_of_range_or_an_unknown_deployment_is_one_line() -> None:
    for args, says in (((f"{GB300}@9", f"{GB300}@1"), "revision 9 of dynamo/dsv41-flash@gb300-nvl72 is out of range"),
                       (("nope@1", f"{GB300}@1"), "nope")):
        result = invoke("diff", *args)
        assert result.exit_code == 2, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and says in line, line


def test_history_lists_what_each_revision_changed() -> None:
    result = invoke("history", GB300, "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    entries = data["revisions"] if isinstance(data, dict) else data
    changes = [e["change"] for e in entries]
    store = HistoryStore(HISTORY)
    key = store.resolve(GB300)
    launch, tuned = store.read(key, 1).lock, store.read(key, 2).lock
    assert changes == [None, summarize_locks(launch, tuned), summarize_locks(tuned, launch)]
    assert changes[1].endswith("(recreate)") and "placement" in changes[1]


def test_apply_takes_a_revision_of_the_history(kube: Kube) -> None:
    first = kube.stackpin("apply", f"{GB300}@2", "--history", str(HISTORY))
    assert first.exit_code == 0, first.output
    assert "applied gb300-tuned" in first.stdout and "revision 2" in first.stdout
    with garbage_collector(kube):  # stands in for the controller that finishes a foreground deletion
        newest = kube.stackpin("apply", GB300, "--history", str(HISTORY), "--allow-recreate")  # rev 3: launch
    assert newest.exit_code == 0, newest.output
    assert "applied gb300-launch" in newest.stdout and "revision 3" in newest.stdout
