"""The roofline model, on the shipped locks, reproduces the published figures within the tolerance
stackpin/sim/calibration.yaml states; and the curve behaves like a serving curve."""

from __future__ import annotations

from pathlib import Path

from stackpin.sim.curve import curve, figures, throughput_at
from stackpin.sim.stack import load_stack

ROOT = Path(__file__).resolve().parent.parent


def test_published_figures_are_reproduced_within_the_stated_tolerance() -> None:
    rows = figures()
    assert len(rows) == 7 and all(0 < f.tolerance <= 0.15 for f in rows)
    off = [f"{f.name}: published {f.published}, simulated {f.simulated}" for f in rows if not f.within]
    assert not off, "\n".join(off)


def test_more_agents_mean_slower_agents_and_more_throughput() -> None:
    points = curve(load_stack(ROOT / "lockfiles" / "gb300-tuned.lock.yaml"))
    assert len(points) == 64  # max-num-seqs of the tuned worker pool
    assert points[0].agent_tps > 3 * points[-1].agent_tps
    assert points[-1].output_tps_per_gpu > 5 * points[0].output_tps_per_gpu
    assert throughput_at(points, 10_000) == 0.0  # no agent is that fast
    assert throughput_at(points, 1.0) == max(p.output_tps_per_gpu for p in points)


def test_a_profile_not_yet_locked_gives_the_same_curve_as_its_lock() -> None:
    """plan asks what-ifs of profiles; the curve must not depend on whether the stack was locked."""
    from stackpin.profile.loader import load_profile
    from stackpin.sim.stack import profile_stack

    loaded = load_profile(ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml")
    locked = curve(load_stack(ROOT / "lockfiles" / "gb300-tuned.lock.yaml"))
    assert curve(profile_stack(loaded.profile, "gb300-tuned")) == locked


def test_a_longer_context_workload_slows_agents() -> None:
    from stackpin.bench.tracegen import default_shape, generate
    from stackpin.sim.curve import default_workload, workload_of

    long = workload_of(generate(100, 0, default_shape().with_overrides({"turn_input.median": "4000"})))
    assert long.context > 1.5 * default_workload().context
    stack = load_stack(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")
    assert curve(stack, long)[-1].agent_tps < curve(stack)[-1].agent_tps


def test_cli_figures_and_curve() -> None:
    import json

    from click.testing import CliRunner

    from stackpin.cli.main import main

    figures_out = CliRunner().invoke(main, ["sim", "figures", "-o", "json"])
    assert figures_out.exit_code == 0 and all(row["within"] for row in json.loads(figures_out.stdout)["figures"])
    every = json.loads(figures_out.stdout)["every"]
    # Every figure says whether the model was fitted to it, and its error.
    assert {r["status"] for r in every} == {"fitted", "fitted (quotient)", "held out"}
    assert all(r["error"] == round(r["model"] / r["published"] - 1, 4) for r in every)
    lock = str(ROOT / "lockfiles" / "gb300-launch.lock.yaml")
    result = CliRunner().invoke(main, ["sim", "curve", lock, "--at", "80", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    last = data["points"][-1]
    assert len(data["points"]) == 64 and last["running"] == 64 * 14  # 14 decode replicas
    assert last["agents"] > last["running"]  # each agent also counted through its prefill and tool time
    assert data["at"]["80"] == round(throughput_at(curve(load_stack(Path(lock))), 80), 1)


def test_speculative_acceptance_falls_with_draft_position_as_published() -> None:
    """roofline.yaml's acceptance_decay reproduces its sources: DeepSeek-V3's MTP module accepts its first
    draft 85-90% of the time, and reused for seven drafts gives 3.20 tokens a step (Nebius, K = 7, original
    MTP, temperature 0), well under the 5.25 one rate for every position would give."""
    from stackpin.sim.roofline import acceptance_decay, accepted_tokens

    assert abs(accepted_tokens(0.875, 7) - 3.20) < 0.03
    assert accepted_tokens(0.875, 1) == 1.875  # one draft: its own rate, no decay yet
    assert acceptance_decay() < 1
    # Each further draft is worth less than the one before it.
    gains = [accepted_tokens(0.9, k + 1) - accepted_tokens(0.9, k) for k in range(7)]
    assert all(a > b for a, b in zip(gains, gains[1:], strict=False))
