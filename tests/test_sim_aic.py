"""The `aiconfigurator` step model (optional `sim` extra: aiconfigurator-core). Runs where the extra is
installed (CI installs it); skipped with the reason elsewhere, except the tests of what a machine
without it is told."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from stackpin.sim.aic import installed_version, mapping, refusal
from stackpin.sim.stack import load_stack

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "lockfiles"
TUNED = LOCKS / "gb300-tuned.lock.yaml"
LAUNCH = LOCKS / "gb300-launch.lock.yaml"
RUBIN = LOCKS / "vera-rubin-tuned.lock.yaml"
CLI = [sys.executable, "-m", "stackpin"]

HAVE = installed_version() == mapping()["version"]
needs_extra = pytest.mark.skipif(
    not HAVE, reason=f"the `sim` extra ({mapping()['package']}=={mapping()['version']}) is not installed: "
                     f"pip install -e '.[sim]'")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.skipif(HAVE, reason="the `sim` extra is installed: its refusal for a machine without it cannot show")
def test_without_the_extra_it_is_refused_saying_how_to_install_it() -> None:
    reason = refusal(load_stack(TUNED))
    assert reason is not None and "not installed" in reason and "stackpin[sim]" in reason
    result = _run("sim", "curve", str(TUNED), "--model", "aiconfigurator")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "not installed" in result.stderr
    assert result.stdout == ""


def test_importing_the_cli_and_the_step_model_does_not_load_aiconfigurator() -> None:
    code = ("import sys, stackpin.cli.main, stackpin.sim.aic, stackpin.sim.curve;"
            "print([m for m in sys.modules if m.startswith('aiconfigurator')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@needs_extra
def test_decode_steps_grow_with_batch_and_context() -> None:
    """The model the earlier trial rejected (vLLM data) fell with the batch; the one used must not."""
    from stackpin.sim.models import step_model

    stack = load_stack(TUNED)
    model = step_model("aiconfigurator", stack, stack.decode)
    by_batch = [model.step_time(b, 0, b * 27_000) for b in (1, 2, 4, 8, 16, 32, 64)]
    assert by_batch == sorted(by_batch) and by_batch[-1] > 1.5 * by_batch[0]
    by_context = [model.step_time(64, 0, 64 * ctx) for ctx in (1_000, 27_000, 100_000)]
    assert by_context == sorted(by_context) and by_context[-1] > by_context[0]
    # Verifying more speculative tokens costs more; a step of one sequence is milliseconds, not tens.
    assert model.step_time(8, 5, 8 * 27_000) > model.step_time(8, 0, 8 * 27_000)
    assert 0.001 < by_batch[0] < 0.02
    # A prefill chunk costs more than a decode step, and more when it attends to more context.
    assert model.step_time(0, 0, 0, 8192) > by_batch[0]
    assert model.step_time(0, 0, 60_000, 2048) > model.step_time(0, 0, 0, 2048)


@needs_extra
@pytest.mark.parametrize(("lock", "says"), [
    (RUBIN, "no Vera Rubin system data"),
], ids=["vera-rubin"])
def test_a_stack_it_cannot_model_is_refused_with_the_reason(lock: Path, says: str) -> None:
    for command in (["sim", "curve", str(lock)], ["sim", "serve", str(lock), "--port", "0"]):
        result = _run(*command, "--model", "aiconfigurator")
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("error: --model aiconfigurator: ") and says in result.stderr
        assert result.stdout == ""


@needs_extra
def test_every_substitution_is_stated_by_the_server() -> None:
    from stackpin.sim.server import serve_in_thread

    with serve_in_thread(LAUNCH, speed=20, model="aiconfigurator") as sim:
        info = httpx.get(f"{sim.url}/stackpin/sim").json()
        body = {"messages": [{"role": "user", "content": " ".join(f"w{i}" for i in range(3000))}],
                "max_tokens": 40, "stream": False}
        answer = httpx.post(f"{sim.url}/v1/chat/completions", json=body, timeout=60).json()
    assert info["simulated"] is True and info["model"] == "aiconfigurator"
    stated = "\n".join(info["substitutions"])
    for needed in ("deepseek-ai/DeepSeek-V4-Flash", "stands for deepseek-ai/DeepSeek-V4.1-Flash",
                   "TensorRT-LLM 1.3.0rc23", "vLLM 0.24.0", "system gb300", "precision:", "the lock serves fp8-fp4",
                   "MTP (nextn)", "KV transfer", "not modelled"):
        assert needed in stated, needed
    assert answer["usage"]["completion_tokens"] == 40 and answer["usage"]["prompt_tokens"] == 3000


@needs_extra
def test_served_single_agent_speed_follows_the_aiconfigurator_curve() -> None:
    from stackpin.sim.curve import single_agent_tps
    from stackpin.sim.server import serve_in_thread
    from tests.test_sim import _decode_tps, _stream, _words

    speed = 2.0
    with serve_in_thread(TUNED, speed=speed, model="aiconfigurator") as sim:
        result = _stream(sim.url, _words(50), 800)
    expected = single_agent_tps(load_stack(TUNED), model="aiconfigurator")
    assert _decode_tps(result) / speed == pytest.approx(expected, rel=0.12)


@needs_extra
def test_figures_show_aiconfigurator_next_to_roofline_and_published() -> None:
    result = _run("sim", "figures", "-o", "json")
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)["figures"]}
    launch = rows["GB300 launch, single agent tok/s"]
    tuned = rows["GB300 tuned, single agent tok/s"]
    assert isinstance(launch["aiconfigurator"], float) and isinstance(tuned["aiconfigurator"], float)
    # Not fitted to the figures, but on the same order: within a factor of two of the published ones.
    assert 0.5 * launch["published"] < launch["aiconfigurator"] < 2 * launch["published"]
    assert tuned["aiconfigurator"] > launch["aiconfigurator"]
    rubin = rows["Vera Rubin tuned, single agent tok/s"]["aiconfigurator"]
    assert "no Vera Rubin system data" in rubin["refused"]
    text = _run("sim", "figures").stdout
    assert "aiconfigurator" in text.splitlines()[0] and "refused [1]" in text


@needs_extra
def test_plan_shows_aiconfigurators_estimate_for_the_same_stack_and_slo(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from stackpin.cli.main import main as cli
    from stackpin.sim.stack import load_stack
    from tests import benchdata

    paths = []
    for make, lock in ((benchdata.tuned, TUNED), (benchdata.rubin, RUBIN)):
        path = tmp_path / f"{lock.stem}.json"
        benchdata.write(make(load_stack(lock).digest), path)
        paths.append(str(path))
    runner = CliRunner()
    data = json.loads(runner.invoke(cli, ["plan", "--agents", "10000", "--slo", "tps=80,ttft=10s", *paths,
                                          "-o", "json"]).stdout)
    tuned, rubin = data["stacks"]
    aic = tuned["aiconfigurator"]
    # Its curve ends at max-num-seqs (64 a decode engine) still above 80 tok/s: a lower bound, as a measured one.
    assert aic["bound"] in ("within", "at-least") and aic["agents_per_gpu"] > 0 and aic["racks"] >= 1
    # Racks for 10,000 agents follow its agents per GPU (whole stacks of 72 GPUs, one stack a rack).
    assert aic["racks"] >= 10000 / (aic["agents_per_gpu"] * 72)
    assert "TTFT not modelled" in aic["reason"]
    assert rubin["aiconfigurator"]["bound"] is None and "no Vera Rubin" in rubin["aiconfigurator"]["reason"]
    text = runner.invoke(cli, ["plan", "--agents", "10000", "--slo", "tps=80,ttft=10s", *paths]).stdout
    assert "aiconfigurator" in text.splitlines()[1] and "refused [2]" in text and "aiconfigurator [2]:" in text


@needs_extra
def test_the_aiconfigurator_column_counts_whole_stacks_whatever_share_was_measured(tmp_path: Path) -> None:
    """A result measured on a share of the stack (sim serve --share: 4 of 72 GPUs) gets the same racks as one
    of the whole stack: the simulated curve's agents are per whole stack (issue 20: 12 racks shown for 24)."""
    from click.testing import CliRunner

    from stackpin.cli.main import main as cli
    from stackpin.sim.stack import load_stack
    from tests import benchdata

    racks = []
    for gpus in (72, 4):
        result = benchdata.result("gb300-tuned", single=848, knee=64.5, ttft_knee=1500, gpus=gpus,
                                  digest=load_stack(TUNED).digest)
        path = tmp_path / f"tuned-{gpus}.json"
        benchdata.write(result, path)
        out = CliRunner().invoke(cli, ["plan", "--agents", "10000", "--slo", "tps=80,ttft=10s", str(path), "-o",
                                       "json"])
        assert out.exit_code == 0, out.output
        racks.append(json.loads(out.stdout)["stacks"][0]["aiconfigurator"]["racks"])
    assert racks[0] == racks[1] >= 1


@needs_extra
def test_a_bench_result_against_it_carries_every_substitution(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from stackpin.bench.resultfile import read_result
    from stackpin.cli.main import main as cli
    from stackpin.sim.server import serve_in_thread

    trace = tmp_path / "agents.jsonl"
    params = ["first_input.median=800", "turn_input.median=200", "output.median=30", "output.min=20",
              "output.max=60", "turns.median=2", "turns.max=2"]
    subprocess.run([*CLI, "trace", "gen", "--sessions", "2", "--seed", "1",
                    *[x for p in params for x in ("--param", p)], "--out", str(trace)], cwd=ROOT, check=True,
                   capture_output=True)
    out = tmp_path / "r.json"
    with serve_in_thread(TUNED, speed=5.0, model="aiconfigurator") as sim:
        stated = httpx.get(f"{sim.url}/stackpin/sim").json()["substitutions"]
        run = CliRunner().invoke(cli, ["bench", "run", "--endpoint", sim.url, "--trace", str(trace), "--lock",
                                       str(TUNED), "--agents", "1", "--delay-scale", "0", "--out", str(out)])
    assert run.exit_code == 0, run.stderr
    result = read_result(out)
    assert result.simulation is not None and result.simulation.model == "aiconfigurator"
    assert list(result.simulation.substitutions) == stated and len(stated) >= 6
    assert result.points[0].errors == 0
