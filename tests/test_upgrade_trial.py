"""`stackpin upgrade trial|promote` on the simulator, and the simulator's injected slowdown (`--fault slow=F`).

The proposal is built by hand (`write_proposal`): the shipped gb300-tuned profile as the current stack and a
copy differing in a label (which the simulator does not model) as the candidate. `upgrade propose` writes
the same files; a test of the whole chain can give its output directory to `trial` instead.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from devkit.demorun import SHORT_SESSIONS
from stackpin.bench.resultfile import read_result
from stackpin.cli.main import main
from stackpin.errors import StackpinError
from stackpin.sim.faults import FaultSpec
from stackpin.sim.server import serve_in_thread
from stackpin.upgrade.model import PROPOSAL_FILE, Proposal, Trial, Verdict, Versions
from tests.helpers import PROFILES_DIR, ROOT

DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"
# Fast and small: a share of the rack, simulated time at wall speed, answers back to back, two runs a side.
SIM = ["--sim", "--share", "18", "--speed", "1", "--delay-scale", "0", "--runs", "2", "--lag-limit", "50ms"]


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Short sessions (`stackpin trace gen`, devkit.demorun.SHORT_SESSIONS): about 95 requests a run."""
    path = tmp_path_factory.mktemp("trace") / "agents.jsonl"
    params = ["first_input.median=800", "turn_input.median=200", "output.median=30", "output.min=20",
              "output.max=60", "turns.median=2", "turns.max=3"]
    subprocess.run([sys.executable, "-m", "stackpin", "trace", "gen", "--sessions", str(SHORT_SESSIONS), "--seed", "1",
                    *[x for p in params for x in ("--param", p)], "--out", str(path)], cwd=ROOT, check=True,
                   capture_output=True)
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project: the current profile (a copy of the shipped gb300-tuned) locked into lockfiles/, the
    candidate profile beside it, and the demo mirror of stand-ins both lock against."""
    from stackpin.demo.mirror import build_demo_mirror
    from stackpin.lock.run import run_lock
    from stackpin.profile.loader import load_profile

    root = tmp_path_factory.mktemp("site")
    (root / "profiles").mkdir()
    current = root / "profiles" / "gb300-tuned.yaml"
    shutil.copyfile(PROFILES_DIR / "gb300-tuned.yaml", current)
    doc = yaml.safe_load(current.read_text())
    doc["metadata"]["labels"]["stackpin.dev/upgrade"] = "candidate"  # not modelled: the same stack to the sim
    candidate = root / "profiles" / "gb300-tuned-candidate.yaml"
    candidate.write_text(yaml.safe_dump(doc, sort_keys=False))
    launch = root / "profiles" / "gb300-launch.yaml"  # the same deployment a month earlier (a gain to trial)
    shutil.copyfile(PROFILES_DIR / "gb300-launch.yaml", launch)
    build_demo_mirror(root / "mirror", [load_profile(p).profile for p in (current, launch)])
    mirror = root / "mirror"
    run_lock([current, launch], root / "lockfiles", oci_layout=str(mirror / "oci"), hf_cache=str(mirror / "hf"))
    return root


def write_proposal(directory: Path, site: Path, current: str = "gb300-tuned",
                   candidate: str = "gb300-tuned-candidate") -> Path:
    """What `upgrade propose` leaves for `trial`: proposal.json naming the current and candidate profiles."""
    directory.mkdir(parents=True)

    def versions(name: str) -> Versions:
        doc = yaml.safe_load((site / "profiles" / f"{name}.yaml").read_text())
        return Versions.model_validate(doc["spec"]["versions"])

    proposal = Proposal(deployment=DEPLOYMENT, current_profile=str(site / "profiles" / f"{current}.yaml"),
                        candidate_profile=str(site / "profiles" / f"{candidate}.yaml"), current=versions(current),
                        candidate=versions(candidate), catalog=None, added=[], rewrites=[], pinned=[], blockers=[],
                        findings=[], remeasure=["bench"], capture_job=None)
    (directory / PROPOSAL_FILE).write_text(proposal.model_dump_json(by_alias=True, indent=2) + "\n")
    return directory


def trial(site: Path, proposal: Path, trace: Path, history: Path, *extra: str) -> tuple[int, str, str]:
    return cli("upgrade", "trial", str(proposal), *SIM, "--trace", str(trace), "--lockdir", str(site / "lockfiles"),
               "--oci-layout", str(site / "mirror" / "oci"), "--hf-cache", str(site / "mirror" / "hf"),
               "--history", str(history), *extra)


def promote(proposal: Path, history: Path, *extra: str) -> tuple[int, str, str]:
    """upgrade promote at the threshold the trial was judged at (promote recomputes the verdict at its own)."""
    threshold = f"{read_trial(proposal).threshold:.0%}" if (proposal / "trial.json").is_file() else "5%"
    return cli("upgrade", "promote", str(proposal), "--history", str(history), "--deployments",
               str(history.parent / "deployments"), "--threshold", threshold, *extra)


def snapshot(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def read_trial(proposal: Path) -> Trial:
    return Trial.model_validate_json((proposal / "trial.json").read_bytes())


@pytest.fixture(scope="module")
def unchanged(tmp_path_factory: pytest.TempPathFactory, site: Path, trace: Path) -> Path:
    """A trial of the candidate that the simulator models as the current stack, with no history yet: the
    current profile's lock is benched."""
    proposal = write_proposal(tmp_path_factory.mktemp("unchanged") / "proposal", site)
    # A host busy with other work (two cores, tests in parallel, a CPU burner) can leave the evidence short of
    # a verdict: the trial then says inconclusive, never a gain or a regression of the same stack, and is run
    # again with the simulators slower (a late host weighs less in the stack's time), as the demo does.
    for speed in ("1", "0.5", "0.25"):
        code, out, err = trial(site, proposal, trace, proposal.parent / "history", "--threshold", "20%", "--speed",
                               speed)
        assert "trial: gain" not in out and "trial: regression" not in out, out + err
        if "trial: no-change" in out:
            break
    assert code == 0, out + err
    assert out.splitlines()[0] == "simulated: stackpin's simulator, not hardware"
    assert "trial: no-change" in out
    return proposal


# --- the simulator's slowdown --------------------------------------------------------------------------

def test_a_slowed_simulator_measures_slower(tmp_path: Path, trace: Path) -> None:
    """slow=2 doubles every step: side by side, the client measures about half the single-agent speed, and
    the simulator's own account (output tokens per simulated second its engines were busy, which no host
    load moves) halves exactly."""
    lock = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
    tps, engine_tps = {}, {}
    for slow in (1.0, 2.0):
        with serve_in_thread(lock, speed=1.0, share=18, faults=FaultSpec(slow=slow)) as sim:
            code, out, err = cli("bench", "run", "--endpoint", sim.url, "--trace", str(trace), "--lock", str(lock),
                                 "--agents", "1", "--delay-scale", "0", "--slo", "none", "--lag-limit", "50ms",
                                 "--out", str(tmp_path / f"{slow}.json"))
            assert sim.server.sim is not None
            engines = [*sim.server.sim.prefillers, *sim.server.sim.decoders]
            engine_tps[slow] = sum(e.stats.output_tokens for e in engines) / sum(e.stats.busy_s for e in engines)
        assert code == 0, out + err
        result = read_result(tmp_path / f"{slow}.json")
        assert result.simulation is not None
        assert any("slow=2" in s for s in result.simulation.substitutions) == (slow == 2)  # the result says so
        tps[slow] = result.points[0].agent_tps.mean
    assert engine_tps[2.0] / engine_tps[1.0] == pytest.approx(0.5, rel=0.05), engine_tps
    assert 0.3 < tps[2.0] / tps[1.0] < 0.75, tps


@pytest.mark.parametrize(("text", "message"), [
    ("slow=0.5", "--fault slow=0.5: a slowdown is a factor of 1 or more"),
    ("slow=inf", "--fault slow=inf: a slowdown is a factor of 1 or more"),
    ("slow=fast", "--fault slow=fast: 'fast' is not a number"),
])
def test_a_bad_slowdown_is_one_line(text: str, message: str) -> None:
    with pytest.raises(StackpinError) as caught:
        FaultSpec.parse(text)
    assert caught.value.lines() == [message]
    assert FaultSpec.parse("slow=2,error=0.1") == FaultSpec(slow=2.0, error=0.1)
    code, _, err = cli("sim", "serve", str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml"), "--fault", text)
    assert (code, err) == (2, f"error: {message}\n")


# --- trial and promote ---------------------------------------------------------------------------------

def test_a_slowed_candidate_is_a_regression_and_is_not_promoted(tmp_path: Path, site: Path, trace: Path) -> None:
    history = tmp_path / "history"
    code, out, err = cli("promote", str(site / "lockfiles" / "gb300-tuned.lock.yaml"), "-m", "current",
                         "--history", str(history), "--deployments", str(tmp_path / "deployments"))
    assert code == 0, err
    proposal = write_proposal(tmp_path / "proposal", site)
    code, out, err = trial(site, proposal, trace, history, "--fault-candidate", "slow=2")
    assert code == 1, out + err
    assert "trial: regression" in out and "simulated: stackpin's simulator, not hardware" in out
    record = read_trial(proposal)
    assert record.verdict == Verdict.regression and record.simulated and record.bed == "sim"
    assert (record.current_lock, record.current_revision, record.runs) == (f"{DEPLOYMENT}@1", 1, 2)
    # one agent measured (the trial's default): no SLO, whose edge one agent cannot locate; summed up by the
    # headline that regressed
    assert record.main_metric == "single-agent tok/s" and record.slo is None
    main = next(m for m in record.metrics if m.name == record.main_metric)
    assert main.change is not None and main.change < -0.3 and main.verdict == Verdict.regression
    assert len(record.current_results) == len(record.candidate_results) == 2
    assert all(Path(p).is_file() for p in [*record.current_results, *record.candidate_results])
    before = snapshot(history, tmp_path / "deployments")
    code, out, err = promote(proposal, history)
    assert (code, out) == (1, "")
    assert err == f"error: {proposal}: the trial's results give regression: not promoted\n"
    assert snapshot(history, tmp_path / "deployments") == before  # nothing written
    # trial.json's word decides nothing: a one-word edit to "gain" is caught by the verdict recomputed from
    # the results it names (main promoted it, its message reading "trial gain ... -48.8%")
    record_path = proposal / "trial.json"
    edited = json.loads(record_path.read_text())
    edited["verdict"] = "gain"
    record_path.write_text(json.dumps(edited, indent=2))
    assert read_trial(proposal).verdict == Verdict.gain
    code, out, err = promote(proposal, history)
    assert (code, out) == (1, "")
    assert err == (f"error: {record_path} says gain, but its results give regression at the 5% threshold: not "
                   "promoted; trial it again\n")
    assert snapshot(history, tmp_path / "deployments") == before


def test_a_gain_is_promoted(tmp_path: Path, site: Path, trace: Path) -> None:
    """The launch stack deployed, the tuned one proposed (Dynamo 1.6.0 -> 1.6.1 and the tuning): a gain,
    promoted without a flag on top of the revision benched, its message naming the upgrade."""
    history, deployments = tmp_path / "history", tmp_path / "deployments"
    code, _, err = cli("promote", str(site / "lockfiles" / "gb300-launch.lock.yaml"), "-m", "launch", "--history",
                       str(history), "--deployments", str(deployments))
    assert code == 0, err
    proposal = write_proposal(tmp_path / "proposal", site, current="gb300-launch", candidate="gb300-tuned")
    # A host busy with other work can leave the evidence short of a verdict (see `unchanged`): inconclusive,
    # never no-change or a regression; then again with the simulators slower.
    for speed in ("1", "0.5", "0.25"):  # --share 2 divides both stacks' replicas
        code, out, err = trial(site, proposal, trace, history, "--share", "2", "--speed", speed)
        assert "trial: no-change" not in out and "trial: regression" not in out, out + err
        if "trial: gain" in out:
            break
    assert code == 0 and "trial: gain" in out, out + err
    code, out, err = promote(proposal, history)
    assert code == 0, err
    assert f"revision 2 of {DEPLOYMENT}: promote gb300-tuned" in out
    assert "message: Upgrade Dynamo 1.6.0 -> 1.6.1: trial gain, single-agent tok/s +" in out
    assert (history / DEPLOYMENT / "000002.bench.json").is_file()
    code, out, err = cli("history", "--check", "--history", str(history), "--deployments", str(deployments))
    assert code == 0, out + err


def test_a_trial_that_changes_nothing_is_promoted_only_when_allowed(tmp_path: Path, unchanged: Path) -> None:
    proposal = tmp_path / "proposal"
    shutil.copytree(unchanged, proposal)
    record = read_trial(proposal)
    assert record.verdict == Verdict.no_change and record.current_revision is None
    assert record.current_lock.endswith("lockfiles/gb300-tuned.lock.yaml")  # no history: the profile's lock
    history = tmp_path / "history"
    code, out, err = promote(proposal, history)
    assert code == 1 and "no-change" in err and "--allow-no-change" in err
    assert not history.exists()
    code, out, err = promote(proposal, history, "--allow-no-change")
    assert code == 0, err
    assert out.startswith(f"recorded {history}/{DEPLOYMENT}/000001.yaml  revision 1 of {DEPLOYMENT}")
    assert "message: Upgrade the candidate stack (same engine releases): trial no-change" in out
    directory = history / DEPLOYMENT
    kinds = sorted(p.name for p in directory.glob("000001.*.json"))
    assert kinds == ["000001.bench.json", "000001.trial-candidate-1.json", "000001.trial-candidate-2.json",
                     "000001.trial-current-1.json", "000001.trial-current-2.json", "000001.upgrade-trial.json"]
    bench = read_result(directory / "000001.bench.json")
    assert bench.stack.digest == record.candidate_digest
    assert json.loads((directory / "000001.upgrade-trial.json").read_text())["verdict"] == "no-change"
    code, out, err = cli("history", "--check", "--history", str(history), "--deployments",
                         str(tmp_path / "deployments"))
    assert code == 0, out + err
    code, out, err = cli("history", DEPLOYMENT, "--history", str(history))
    assert code == 0 and "simulated" in out, out + err  # the bench attachment's headline


def test_an_edited_proposal_is_not_promoted(tmp_path: Path, unchanged: Path) -> None:
    proposal = tmp_path / "proposal"
    shutil.copytree(unchanged, proposal)
    (proposal / PROPOSAL_FILE).write_text((proposal / PROPOSAL_FILE).read_text() + " ")
    code, out, err = promote(proposal, tmp_path / "history", "--allow-no-change")
    assert code == 1 and err.startswith(f"error: {proposal}/proposal.json changed since the trial"), err
    assert not (tmp_path / "history").exists()


def test_a_promote_since_the_trial_is_not_overtaken(tmp_path: Path, site: Path, unchanged: Path) -> None:
    """Someone promoted meanwhile: the stack benched as current is no longer what is deployed."""
    proposal = tmp_path / "proposal"
    shutil.copytree(unchanged, proposal)
    history, deployments = tmp_path / "history", tmp_path / "deployments"
    code, _, err = cli("promote", str(site / "lockfiles" / "gb300-tuned.lock.yaml"), "-m", "meanwhile",
                       "--history", str(history), "--deployments", str(deployments))
    assert code == 0, err
    before = snapshot(history, deployments)
    code, out, err = promote(proposal, history, "--allow-no-change")
    assert code == 1, out + err
    assert f"deployment {DEPLOYMENT} is at revision 1, but the trial benched" in err
    assert snapshot(history, deployments) == before


def test_a_failed_attachment_takes_the_revision_back(tmp_path: Path, unchanged: Path) -> None:
    """A record already where an attachment goes (left by a killed writer): the attachment is refused, so
    the revision is taken back with what was attached to it, and the deployment directory with it."""
    proposal = tmp_path / "proposal"
    shutil.copytree(unchanged, proposal)
    history, deployments = tmp_path / "history", tmp_path / "deployments"
    directory = history / DEPLOYMENT
    directory.mkdir(parents=True)
    (directory / "000001.trial-current-1.json").write_text("{}\n")
    before = snapshot(history)
    code, out, err = promote(proposal, history, "--allow-no-change")
    assert code == 2 and "already has a trial-current-1 record" in err, out + err
    assert snapshot(history) == before
    assert not (deployments / DEPLOYMENT).exists()


def test_an_edited_candidate_lock_is_not_promoted(tmp_path: Path, site: Path, unchanged: Path) -> None:
    proposal = tmp_path / "proposal"
    shutil.copytree(unchanged, proposal)
    shutil.copyfile(site / "lockfiles" / "gb300-tuned.lock.yaml", proposal / "candidate.lock.yaml")
    code, _, err = promote(proposal, tmp_path / "history", "--allow-no-change")
    assert code == 1 and "but the trial benched" in err, err
    assert not (tmp_path / "history").exists()


def test_a_blocked_proposal_is_not_trialled(tmp_path: Path, site: Path) -> None:
    proposal = write_proposal(tmp_path / "proposal", site)
    data = json.loads((proposal / PROPOSAL_FILE).read_text())
    data["blockers"] = [{"path": "spec.kernels.moe", "message": "the backend is gone in the new release"}]
    (proposal / PROPOSAL_FILE).write_text(json.dumps(data))
    code, out, err = cli("upgrade", "trial", str(proposal), "--sim")  # no --trace: none generated either
    assert code == 1 and out == ""
    assert err == (f"error: {proposal}/proposal.json: the proposal is blocked (spec.kernels.moe: the backend is "
                   "gone in the new release); nothing to trial\n")
    assert sorted(p.name for p in proposal.iterdir()) == [PROPOSAL_FILE]
    code, out, err = promote(proposal, tmp_path / "history")
    assert (code, out) == (1, "") and err.endswith("the backend is gone in the new release); nothing to promote\n")
    assert not (tmp_path / "history").exists()


def test_fault_candidate_is_for_the_simulator_only(tmp_path: Path) -> None:
    code, _, err = cli("upgrade", "trial", str(tmp_path), "--endpoint", "http://127.0.0.1:1", "--current-endpoint",
                       "http://127.0.0.1:2", "--fault-candidate", "slow=2")
    assert code == 2 and "--fault-candidate, --speed and --share are for --sim" in err


def test_a_trial_against_endpoints_names_them(tmp_path: Path, site: Path, trace: Path) -> None:
    """--endpoint/--current-endpoint: stacks already served (here two simulators, each of its lock); the
    proposal given by its proposal.json; -o json carries the trial and the comparison."""
    from stackpin.lock.lockfile import read_lock
    from stackpin.lock.run import lock_stacks
    from stackpin.sim.stack import sim_stack

    proposal = write_proposal(tmp_path / "proposal", site)
    current = sim_stack(read_lock(site / "lockfiles" / "gb300-tuned.lock.yaml"))
    mirror = site / "mirror"
    [candidate] = lock_stacks([site / "profiles" / "gb300-tuned-candidate.yaml"], site / "lockfiles",
                              oci_layout=str(mirror / "oci"), hf_cache=str(mirror / "hf"), reuse=False)
    with serve_in_thread(current, share=18) as cur, serve_in_thread(sim_stack(candidate), share=18) as cand:
        code, out, err = cli("upgrade", "trial", str(proposal / PROPOSAL_FILE), "--endpoint", cand.url,
                             "--current-endpoint", cur.url, "--trace", str(trace), "--runs", "2", "--delay-scale", "0",
                             "--lag-limit", "50ms", "--slo", "none", "--threshold", "20%", "--lockdir",
                             str(site / "lockfiles"), "--oci-layout", str(mirror / "oci"), "--hf-cache",
                             str(mirror / "hf"), "--history", str(tmp_path / "history"), "-o", "json")
    data = json.loads(out)
    # the same stack on both sides: no change, or inconclusive when the host was busy (see `unchanged`)
    assert data["trial"]["verdict"] in ("no-change", "inconclusive"), out + err
    assert code == (0 if data["trial"]["verdict"] == "no-change" else 3)
    assert data["trial"]["bed"] == f"current {cur.url}, candidate {cand.url}"
    assert data["trial"]["simulated"] is True and data["trial"]["slo"] is None
    assert data["trial"]["candidateDigest"] == candidate.stack_digest
    assert data["trial"]["mainMetric"] == "single-agent tok/s" and data["comparison"]["runs"] == [2, 2]
    assert data["file"] == str(proposal / "trial.json")


def test_promote_without_a_trial_is_refused_and_a_trial_record_that_is_no_file_is_bad_input(
        tmp_path: Path, site: Path) -> None:
    import os

    proposal = write_proposal(tmp_path / "proposal", site)
    code, out, err = promote(proposal, tmp_path / "history")
    assert (code, out) == (1, "")
    assert err == f"error: {proposal}/trial.json: no such file (hint: run stackpin upgrade trial first)\n"
    os.mkfifo(proposal / "trial.json")  # a FIFO would block a plain read: refused unread, exit 2
    code, out, err = promote(proposal, tmp_path / "history")
    assert (code, out) == (2, "") and err.startswith(f"error: {proposal}/trial.json: cannot read: ")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "history").exists()
