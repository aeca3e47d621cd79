"""One error dialect (issue 38): a bench result, an upgrade proposal, a trial and a fleet file with errors
report every one of them, each at file:line:col, in the words a profile's errors use; through the library
and through the CLI (one line each, exit 2, no traceback)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stackpin.bench.resultfile import read_result
from stackpin.cli.main import main
from stackpin.errors import InputError
from stackpin.jsonio import positions
from stackpin.rollout.fleet import load_fleet
from stackpin.upgrade.model import PROPOSAL_FILE, TRIAL_FILE, Proposal, Trial, Verdict, Versions
from stackpin.upgrade.propose import proposal_json
from stackpin.upgrade.trial import read_proposal, read_trial, trial_json
from tests import benchdata

VERSIONS = Versions(dynamo="1.5.0", vllm="0.31.0", flashinfer="0.6.1", nixl="0.7.1",
                    runtime_image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0")


def at(text: str, needle: str, skip: int = 0) -> str:
    """line:col of the one place `needle` is in `text`, `skip` characters into it (found by a text search,
    not by the code under test)."""
    [start] = [m.start() for m in re.finditer(re.escape(needle), text)]
    found = start + skip
    line = text.count("\n", 0, found) + 1
    return f"{line}:{found - text.rfind(chr(10), 0, found)}"


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


def problems(read: Any) -> list[str]:
    with pytest.raises(InputError) as caught:
        read()
    return caught.value.lines()


def test_json_positions_are_where_the_keys_and_items_start() -> None:
    text = '{\n  "a": [1, {"b": 2,\n "c": []}],\n  "d\\"e": {"f": null}\n}\n'
    assert positions(text) == {(): (1, 1), ("a",): (2, 3), ("a", 0): (2, 9), ("a", 1): (2, 12),
                               ("a", 1, "b"): (2, 13), ("a", 1, "c"): (3, 2), ('d"e',): (4, 3),
                               ('d"e', "f"): (4, 12)}


def broken_result(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "result.json"
    benchdata.write(benchdata.launch(), path)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["stack"]["gpus"] = "seventy-two"
    data["points"][1]["agents"] = 0
    data["client"]["workerz"] = 2
    data["simulation"]["speed"] = "fast"
    del data["endpoint"]
    text = json.dumps(data, sort_keys=True, indent=2) + "\n"
    path.write_text(text, encoding="utf-8")
    workerz, agents, speed, gpus = (at(text, n) for n in ('"workerz"', '"agents": 0,', '"speed": "fast"',
                                                          '"gpus": "seventy-two"'))
    return path, [f"{path}:1:1: endpoint: required field is missing",
                  f"{path}:{workerz}: client.workerz: unknown field (did you mean 'workers'?)",
                  f"{path}:{agents}: points.1.agents: must be an integer > 0",
                  f"{path}:{speed}: simulation.speed: must be a number, got a string",
                  f"{path}:{gpus}: stack.gpus: must be an integer, got a string"]


def test_a_bench_result_reports_every_error_at_its_line(tmp_path: Path) -> None:
    path, lines = broken_result(tmp_path)
    assert problems(lambda: read_result(path)) == lines
    good = tmp_path / "good.json"
    benchdata.write(benchdata.launch(), good)
    assert cli("bench", "compare", str(path), str(good)) == (2, "", "".join(f"error: {line}\n" for line in lines))


def test_a_bench_result_rule_is_reported_at_its_field(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    benchdata.write(benchdata.launch(), path)
    text = path.read_text(encoding="utf-8").replace('"fingerprint": "sha256:', '"fingerprint": "sha256:0')
    path.write_text(text, encoding="utf-8")
    fingerprint = at(text, '"fingerprint"')
    assert problems(lambda: read_result(path)) == [
        f"{path}:{fingerprint}: fingerprint: fingerprint is not the sha256 of the controls (edited by hand?)"]


def proposal(directory: Path) -> Proposal:
    directory.mkdir(parents=True, exist_ok=True)
    made = Proposal(deployment="dynamo/dsv41-flash@gb300-nvl72", current_profile="profiles/a.yaml",
                    candidate_profile="profiles/b.yaml", current=VERSIONS, candidate=VERSIONS, catalog=None,
                    added=[], rewrites=[], pinned=[], blockers=[], findings=[], remeasure=["bench"], capture_job=None)
    (directory / PROPOSAL_FILE).write_text(proposal_json(made), encoding="utf-8")
    return made


def test_a_proposal_reports_every_error_at_its_line(tmp_path: Path) -> None:
    directory = tmp_path / "proposal"
    proposal(directory)
    path = directory / PROPOSAL_FILE
    text = path.read_text(encoding="utf-8")
    assert read_proposal(directory)[1] == text.encode()  # the bytes written are the bytes read
    data = json.loads(text)
    data["candidate"]["vllm"] = 31
    data["kind"] = "Proposal"
    data["remeasure"] = "bench"
    data["rewrites"] = [{"path": "spec.x", "old": "a", "new": "b"}]
    del data["deployment"]
    data["extra"] = True
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")
    vllm, extra, kind, remeasure = (at(text, n) for n in ('"vllm": 31', '"extra"', '"kind"', '"remeasure"'))
    rewrite = at(text, '"rewrites": [\n    {', len('"rewrites": [\n    '))
    lines = [f"{path}:1:1: deployment: required field is missing",
             f"{path}:{vllm}: candidate.vllm: must be a string, got an integer",
             f"{path}:{extra}: extra: unknown field",
             f"{path}:{kind}: kind: must be one of 'UpgradeProposal', got 'Proposal'",
             f"{path}:{remeasure}: remeasure: must be a list, got a string",
             f"{path}:{rewrite}: rewrites.0.source: required field is missing"]
    assert problems(lambda: read_proposal(directory)) == lines
    # `upgrade promote` reads the proposal first: every line, exit 2, nothing else.
    code, out, err = cli("upgrade", "promote", str(directory), "--history", str(tmp_path / "history"),
                         "--deployments", str(tmp_path / "deployments"))
    assert (code, out, err) == (2, "", "".join(f"error: {line}\n" for line in lines))
    assert not (tmp_path / "history").exists()


def test_a_trial_reports_every_error_at_its_line(tmp_path: Path) -> None:
    directory = tmp_path / "proposal"
    proposal(directory)
    trial = Trial(proposal_sha256="0" * 64, current_lock="lockfiles/a.lock.yaml", current_digest="sha256:a",
                  candidate_lock=str(directory / "candidate.lock.yaml"), candidate_digest="sha256:b", simulated=True,
                  bed="sim", runs=2, trace="agents.jsonl", slo=None, current_results=[], candidate_results=[],
                  metrics=[], verdict=Verdict.gain)
    path = directory / TRIAL_FILE
    text = trial_json(trial)
    path.write_text(text, encoding="utf-8")
    assert trial_json(read_trial(directory)) == text  # read back, written again: the same bytes
    text = (text.replace('"runs": 2', '"runs": "two"').replace('"verdict": "gain"', '"verdict": "win"')
            .replace('"simulated": true', '"simulted": true'))
    path.write_text(text, encoding="utf-8")
    simulted, runs, verdict = (at(text, n) for n in ('"simulted"', '"runs"', '"verdict"'))
    lines = [f"{path}:1:1: simulated: required field is missing",
             f"{path}:{simulted}: simulted: unknown field (did you mean 'simulated'?)",
             f"{path}:{runs}: runs: must be an integer, got a string",
             f"{path}:{verdict}: verdict: must be one of 'gain', 'no-change', 'regression', 'inconclusive', got 'win'"]
    assert problems(lambda: read_trial(directory)) == lines
    code, out, err = cli("upgrade", "promote", str(directory), "--history", str(tmp_path / "history"),
                         "--deployments", str(tmp_path / "deployments"))
    assert (code, out, err) == (2, "", "".join(f"error: {line}\n" for line in lines))


FLEET = """\
apiVersion: stackpin.dev/v1alpha1
kind: Fleet
metadata:
  name: Gb300_West
spec:
  racks:
    - name: rack-a
      platform: gb300-nvl72
      endpoint: rack-a:8000
    - name: rack-b
      platfrom: gb300-nvl72
  waves:
    batchSize: 0
  onFailure: retry
"""


def test_a_fleet_reports_every_error_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET, encoding="utf-8")
    lines = [f"{path}:4:3: metadata.name: must match the pattern ^[a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?$",
             f"{path}:9:7: spec.racks.0.endpoint: endpoint 'rack-a:8000': give an http(s) URL",
             f"{path}:10:7: spec.racks.1.platform: required field is missing",
             f"{path}:11:7: spec.racks.1.platfrom: unknown field (did you mean 'platform'?)",
             f"{path}:13:5: spec.waves.batchSize: must be an integer >= 1",
             f"{path}:14:3: spec.onFailure: must be one of 'rollback', 'pause', got 'retry'"]
    assert problems(lambda: load_fleet(path)) == lines
    code, out, err = cli("rollout", "gitops", str(path), "dynamo/dsv41-flash@gb300-nvl72@2", "--output-dir",
                         str(tmp_path / "out"), "--format", "flux", "--source", "s", "--repo-path", "out")
    assert (code, out, err) == (2, "", "".join(f"error: {line}\n" for line in lines))
    assert not (tmp_path / "out").exists()
