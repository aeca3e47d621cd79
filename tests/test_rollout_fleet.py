"""The fleet file: typed and validated like a profile, its errors one line each at file:line and field,
and the waves it plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackpin.errors import InputError
from stackpin.rollout.fleet import OnFailure, load_fleet

FLEET = """\
apiVersion: stackpin.dev/v1alpha1
kind: Fleet
metadata:
  name: gb300-west
spec:
  racks:
    - {name: rack-a, platform: gb300-nvl72, endpoint: "http://rack-a:8000"}
    - {name: rack-b, platform: gb300-nvl72}
    - {name: rack-c, platform: gb300-nvl72, kubeconfig: kube/rack-c.yaml}
    - {name: rack-d, platform: gb300-nvl72}
  waves:
    canary: rack-a
    batchSize: 2
  gates:
    soakSeconds: 60
    bench: {trace: traces/agents.jsonl, runs: 3, threshold: 5%}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_the_waves_are_the_canary_then_batches_in_file_order(tmp_path: Path) -> None:
    loaded = load_fleet(write(tmp_path, FLEET))
    spec = loaded.fleet.spec
    assert [[r.name for r in wave] for wave in spec.wave_plan()] == [["rack-a"], ["rack-b", "rack-c"], ["rack-d"]]
    assert spec.on_failure == OnFailure.rollback and spec.gates.ready.timeout_seconds == 1800
    # Paths in a fleet file are relative to the file, wherever stackpin runs from.
    assert loaded.resolve("kube/rack-c.yaml") == tmp_path / "kube" / "rack-c.yaml"
    canary_later = FLEET.replace("canary: rack-a", "canary: rack-c").replace("    bench: {", "    # bench: {")
    assert [[r.name for r in w] for w in load_fleet(write(tmp_path, canary_later)).fleet.spec.wave_plan()] == [
        ["rack-c"], ["rack-a", "rack-b"], ["rack-d"]]


@pytest.mark.parametrize(("edit", "line", "field", "message"), [
    (("batchSize: 2", "batchSize: 0"), 13, "spec.waves.batchSize", "must be an integer >= 1"),
    (("canary: rack-a", "canary: rack-z"), 12, "spec.waves.canary",
     "waves.canary 'rack-z' is not one of the racks (rack-a, rack-b, rack-c, rack-d)"),
    (("name: rack-b,", "name: rack-a,"), 8, "spec.racks.1.name",
     "rack 'rack-a' is named twice: rack names are unique in a fleet"),
    (("soakSeconds: 60", "soakSecs: 60"), 15, "spec.gates.soakSecs", "unknown field (did you mean 'soakSeconds'?)"),
    (("threshold: 5%", "threshold: lots"), 16, "spec.gates.bench.threshold",
     "threshold 'lots': give a fraction (0.05) or a percentage (5%)"),
    ((', endpoint: "http://rack-a:8000"', ""), 7, "spec.racks.0.endpoint",
     "the bench gate measures the canary: rack 'rack-a' needs an endpoint"),
    (('endpoint: "http://rack-a:8000"', "endpoint: rack-a"), 7, "spec.racks.0.endpoint",
     "endpoint 'rack-a': give an http(s) URL"),
    (("name: rack-b,", "name: Rack_B,"), 8, "spec.racks.1.name", "must match the pattern ^[a-z0-9]"),
    (("runs: 3", "runs: three"), 16, "spec.gates.bench.runs", "must be an integer, got a string"),
    (("kind: Fleet", "kind: Fleat"), 2, "kind", "must be one of 'Fleet', got 'Fleat'"),
])
def test_bad_input_names_the_line_and_field(tmp_path: Path, edit: tuple[str, str], line: int, field: str,
                                            message: str) -> None:
    assert FLEET.count(edit[0]) == 1
    path = write(tmp_path, FLEET.replace(*edit))
    with pytest.raises(InputError) as caught:
        load_fleet(path)
    [problem] = caught.value.problems
    assert (problem.location.file, problem.location.line, problem.field) == (str(path), line, field)
    assert problem.message.startswith(message)


# Every problem of the file, each at its line and column, in file order and a profile's words.
BROKEN = (FLEET.replace("canary: rack-a", "canary: rack-z").replace("name: rack-c,", "name: rack-b,")
          .replace("batchSize: 2", "batchSize: two").replace("soakSeconds: 60", "soakSecs: 60")
          .replace("platform: gb300-nvl72}", "platfrom: gb300-nvl72}", 1))
BROKEN_LINES = ["{path}:8:7: spec.racks.1.platform: required field is missing",
                "{path}:8:22: spec.racks.1.platfrom: unknown field (did you mean 'platform'?)",
                "{path}:13:5: spec.waves.batchSize: must be an integer, got a string",
                "{path}:15:5: spec.gates.soakSecs: unknown field (did you mean 'soakSeconds'?)"]
# The fleet's own rules (unique names, the canary one of the racks) once its fields are right.
CROSSED = FLEET.replace("canary: rack-a", "canary: rack-z").replace("name: rack-c,", "name: rack-b,")
CROSSED_LINES = ["{path}:9:8: spec.racks.2.name: rack 'rack-b' is named twice: rack names are unique in a fleet",
                 "{path}:12:5: spec.waves.canary: waves.canary 'rack-z' is not one of the racks (rack-a, rack-b, "
                 "rack-b, rack-d)"]


@pytest.mark.parametrize(("text", "lines"), [(BROKEN, BROKEN_LINES), (CROSSED, CROSSED_LINES)])
def test_every_error_of_a_fleet_at_its_line_and_column(tmp_path: Path, text: str, lines: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        load_fleet(path)
    assert caught.value.lines() == [line.format(path=path) for line in lines]


def test_a_fleet_error_is_one_line_and_exit_2_through_the_cli(tmp_path: Path) -> None:
    """A rollout command reads the fleet first: a bad one stops it before anything is read or written."""
    from click.testing import CliRunner

    from stackpin.cli.main import main

    path = write(tmp_path, FLEET.replace("batchSize: 2", "batchSize: two"))
    result = CliRunner().invoke(main, ["rollout", "gitops", str(path), "dynamo/dsv41-flash@gb300-nvl72@2",
                                       "--output-dir", str(tmp_path / "out"), "--format", "flux", "--source", "s",
                                       "--repo-path", "out"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}:13:")
    assert "spec.waves.batchSize" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()
    # All of them, one line each, no traceback.
    path = write(tmp_path, BROKEN)
    result = CliRunner().invoke(main, ["rollout", "gitops", str(path), "dynamo/dsv41-flash@gb300-nvl72@2",
                                       "--output-dir", str(tmp_path / "out"), "--format", "flux", "--source", "s",
                                       "--repo-path", "out"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [f"error: {line.format(path=path)}" for line in BROKEN_LINES]
    assert not (tmp_path / "out").exists()
