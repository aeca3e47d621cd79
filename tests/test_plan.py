"""`stackpin plan`: the operating point interpolated on measured curves (never extrapolated silently),
whole racks, rack power from the catalog, waits, the mature scenario, the controls check and -o json.

Results are built here (tests/benchdata.py), with curves whose crossings are known exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stackpin.bench.result import BenchResult, Slo
from stackpin.catalog import load_catalog
from stackpin.cli.main import main
from stackpin.errors import StackpinError
from stackpin.plan.capacity import make_plan
from stackpin.plan.curve import Bound, curve_of, operating_point
from stackpin.plan.slo import parse_slo
from tests import benchdata

SLO = Slo(tps=80, ttft_s=10)
# Every agent at 100 tok/s with 100 agents, 60 tok/s with 200: 80 tok/s is crossed half way, at 150 agents.
ROWS = [(1, 500.0, 0.5, 7.0), (100, 100.0, 2.0, 140.0), (200, 60.0, 4.0, 170.0)]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def write(tmp: Path, name: str, result: BenchResult) -> str:
    path = tmp / f"{name}.json"
    benchdata.write(result, path)
    return str(path)


def test_slo_parses_as_the_command_line_spells_it() -> None:
    assert parse_slo("tps=80,ttft=10s") == Slo(tps=80, ttft_s=10, percentile="p90")
    assert parse_slo("tps=20, ttft=500ms, percentile=p99") == Slo(tps=20, ttft_s=0.5, percentile="p99")
    assert parse_slo("tps=20,ttft=2m").ttft_s == 120
    for bad in ("tps=80", "tps=fast,ttft=1s", "tps=80,ttft=ten", "tps=80,ttft=1s,percentile=p42", "speed=80,ttft=1s"):
        with pytest.raises(StackpinError, match="--slo"):
            parse_slo(bad)


def test_the_target_is_interpolated_between_the_measured_points_that_straddle_it() -> None:
    result = benchdata.exact("s", ROWS)
    op = operating_point(curve_of(result, "p90"), SLO, 72)
    assert op.bound is Bound.within and op.limited_by == "tps"
    assert op.agents == pytest.approx(150) and op.agents_per_gpu == pytest.approx(150 / 72)
    assert op.tps_per_gpu == pytest.approx(155) and op.speed == pytest.approx(80)
    assert "between 100 and 200 agents" in op.note


def test_a_crossing_past_an_invalid_point_is_a_lower_bound_not_interpolated_over_it() -> None:
    """Met at 100, missed at 200, an invalid point at 150 between: the curve there is unknown (issue 34)."""
    result = benchdata.exact("s", ROWS)
    op = operating_point(curve_of(result, "p90"), SLO, 72, invalid=(150,))
    assert op.bound is Bound.at_least and op.agents == 100 and op.limited_by is None
    assert "150 invalid between: a lower bound" in op.note
    assert operating_point(curve_of(result, "p90"), SLO, 72, invalid=(300,)).bound is Bound.within


def test_the_ttft_limit_cuts_in_when_it_is_crossed_first() -> None:
    result = benchdata.exact("s", ROWS)
    op = operating_point(curve_of(result, "p90"), Slo(tps=80, ttft_s=2.5), 72)
    # TTFT 2.0 s at 100 agents, 4.0 s at 200: 2.5 s is a quarter of the way, before the speed's half way.
    assert op.limited_by == "ttft" and op.agents == pytest.approx(125) and op.speed == pytest.approx(90)


def test_the_slowest_agent_is_what_the_target_is_held_to() -> None:
    result = benchdata.launch()
    point = result.points[3]
    assert curve_of(result, "p90")[3].speed == min(point.agent_tps_samples) < point.agent_tps.p50


def test_a_target_still_met_at_the_largest_count_is_a_lower_bound_never_an_extrapolation() -> None:
    result = benchdata.exact("s", ROWS)
    op = operating_point(curve_of(result, "p90"), Slo(tps=50, ttft_s=10), 72)
    assert op.bound is Bound.at_least and op.agents == 200 and op.tps_per_gpu == 170
    assert "lower bound" in op.note and "not extrapolated" in op.note


def test_a_target_missed_by_the_fewest_agents_is_unmet_with_the_reason() -> None:
    result = benchdata.exact("s", ROWS[1:])
    op = operating_point(curve_of(result, "p90"), Slo(tps=150, ttft_s=10), 72)
    assert op.bound is Bound.unmet
    assert op.note == "fails at 100 agents (100 tok/s < 150); fewer than 100 agents were not measured"


def test_racks_are_whole_and_an_exact_fit_takes_no_extra_gpu() -> None:
    # 150 agents on 72 GPUs: 1,500 agents need exactly 10 instances, 720 GPUs, 10 racks; one more agent, 11.
    result = benchdata.exact("s", ROWS)
    plan = make_plan([(Path("s.json"), result)], 1500, SLO)
    cap = plan.stacks[0].current.capacity
    assert (cap.gpus, cap.instances, cap.racks, cap.rack_gpus) == (720, 10, 10, 72)
    cap = make_plan([(Path("s.json"), result)], 1501, SLO).stacks[0].current.capacity
    assert (cap.gpus, cap.instances, cap.racks) == (721, 11, 11)


def test_stacks_smaller_than_a_rack_pack_into_whole_racks() -> None:
    # A 36-GPU stack holding 75 agents at the target: 1,000 agents are 14 instances, 504 GPUs, 7 racks.
    result = benchdata.exact("half", [(1, 500.0, 0.5, 14.0), (50, 100.0, 2.0, 140.0), (100, 60.0, 4.0, 170.0)],
                             gpus=36)
    cap = make_plan([(Path("h.json"), result)], 1000, SLO).stacks[0].current.capacity
    assert cap.instances == 14 and cap.gpus == math.ceil(1000 / (75 / 36)) and cap.racks == 7


def test_power_comes_from_the_catalog_and_is_unknown_where_it_has_none() -> None:
    gb300 = load_catalog().platforms["gb300-nvl72"]
    assert gb300.power_kw and "docs/facts.md#rack-power" in gb300.power_source
    assert load_catalog().platforms["vera-rubin-nvl72"].power_kw is None
    result = benchdata.exact("s", ROWS)
    cap = make_plan([(Path("s.json"), result)], 1500, SLO).stacks[0].current.capacity
    assert cap.rack_power_kw == gb300.power_kw and cap.power_kw == 10 * gb300.power_kw
    assert cap.agents_per_mw == pytest.approx(1500 / (cap.power_kw / 1000))  # the plan's agents, its racks' power
    fewer = make_plan([(Path("s.json"), result)], 1401, SLO).stacks[0].current.capacity
    assert fewer.racks == 10 and fewer.agents_per_mw == pytest.approx(1401 / (10 * gb300.power_kw / 1000))
    rubin = benchdata.exact("r", ROWS, platform="vera-rubin-nvl72")
    cap = make_plan([(Path("r.json"), rubin)], 1500, SLO).stacks[0].current.capacity
    assert cap.racks == 10 and cap.rack_power_kw is None and cap.power_kw is None and cap.agents_per_mw is None


def test_a_sites_metered_rack_power_replaces_the_catalogs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A site overlay (docs/site.md) that says what its Vera Rubin racks draw: plan reads it before the catalog,
    which has no public figure."""
    (tmp_path / "site.yaml").write_text(
        "apiVersion: stackpin.dev/v1\nkind: SiteFacts\nplatforms:\n  vera-rubin-nvl72:\n    powerKw: 190\n"
        "    measured:\n      powerKw: {source: the rack PDUs' meter, nodes: [rack-1], at: '2026-06-02T10:00:00Z'}\n",
        encoding="utf-8")
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(tmp_path))
    rubin = benchdata.exact("r", ROWS, platform="vera-rubin-nvl72")
    cap = make_plan([(Path("r.json"), rubin)], 1500, SLO).stacks[0].current.capacity
    assert (cap.racks, cap.rack_power_kw, cap.power_kw) == (10, 190, 1900)
    assert cap.agents_per_mw == pytest.approx(1500 / 1.9)


def test_a_bound_rows_waits_are_at_the_target_speed_at_most(tmp_path: Path) -> None:
    # Still met at the largest count (300 agents at 90 tok/s): packed to the plan's racks, agents may
    # run as slow as the target, 80 tok/s; the waits say so, as bounds.
    bound = benchdata.exact("m", [(1, 500.0, 0.5, 7.0), (300, 90.0, 3.0, 375.0)])
    s = make_plan([(Path("m.json"), bound)], 3000, SLO, turn_tokens=160).stacks[0].current
    assert s.operating.bound.value == "at-least" and s.waits.at_most
    assert s.waits.turn_s == pytest.approx(160 / SLO.tps)
    result = invoke("plan", "--agents", "3000", "--slo", "tps=80,ttft=10s", "--turn-tokens", "160",
                    write(tmp_path, "m", bound))
    assert "<= 2.0 s" in result.stdout


def test_waits_are_typical_output_tokens_over_the_per_agent_speed() -> None:
    plan = make_plan([(Path("l.json"), benchdata.launch())], 1000, SLO)
    # The request logs' median output is 150 tokens; a session is 4 turns of them (median sum below).
    sessions = [sum(benchdata.OUTPUTS[(i * 4 + j) % len(benchdata.OUTPUTS)] for j in range(4))
                for i in range(len(benchdata.OUTPUTS) * 2 // 4)]
    assert plan.workload.turn_tokens == 150
    assert plan.workload.trajectory_tokens in sessions
    s = plan.stacks[0].current
    assert s.waits.turn_s == pytest.approx(150 / s.operating.speed)
    given = make_plan([(Path("l.json"), benchdata.launch())], 1000, SLO, turn_tokens=300, trajectory_tokens=6000)
    assert given.stacks[0].current.waits.trajectory_s == pytest.approx(6000 / s.operating.speed)


def test_the_mature_result_pairs_with_the_current_one_on_its_platform(tmp_path: Path) -> None:
    launch, tuned, rubin = (write(tmp_path, n, f()) for n, f in
                            (("launch", benchdata.launch), ("tuned", benchdata.tuned), ("rubin", benchdata.rubin)))
    result = invoke("plan", "--agents", "10000", "--slo", "tps=80,ttft=10s", launch, rubin, "--mature", tuned,
                    "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    gb300, vr = data["stacks"]
    assert gb300["mature"]["source"] == tuned and vr["mature"] is None
    assert gb300["rack_delta"] == gb300["mature"]["capacity"]["racks"] - gb300["current"]["capacity"]["racks"] < 0
    orphan = invoke("plan", "--agents", "10", "--slo", "tps=80,ttft=10s", rubin, "--mature", tuned)
    assert orphan.exit_code == 2 and "no current results on platform gb300-nvl72" in orphan.stderr


def test_a_stated_gain_scales_agents_per_gpu_at_the_same_speed() -> None:
    result = benchdata.exact("s", ROWS)
    s = make_plan([(Path("s.json"), result)], 3000, SLO, gain=1.5).stacks[0]
    assert s.mature is not None and s.mature.source == "gain 1.5x"
    assert s.mature.operating.agents_per_gpu == pytest.approx(1.5 * s.current.operating.agents_per_gpu)
    assert s.mature.operating.speed == s.current.operating.speed
    assert (s.current.capacity.racks, s.mature.capacity.racks, s.rack_delta) == (20, 14, -6)


@pytest.mark.parametrize(("field", "change"), [
    ("trace_digest", {"trace": "sha256:" + "cd" * 32}),
    ("model", {"model": "deepseek-ai/DeepSeek-V4.1-Flash@v2"}),
    ("precision", {"precision": "fp8"}),
    ("slo", {"slo": Slo(tps=80, ttft_s=10, percentile="p99")}),
])
def test_results_under_different_controls_are_refused_naming_the_control(tmp_path: Path, field: str,
                                                                          change: dict[str, object]) -> None:
    a = write(tmp_path, "a", benchdata.launch())
    b = write(tmp_path, "b", benchdata.result("other", **change))
    chart = tmp_path / "plan.png"
    result = invoke("plan", "--agents", "100", "--slo", "tps=80,ttft=10s", a, b, "--chart", str(chart))
    assert result.exit_code == 2 and "Traceback" not in result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: results measured under different controls: {field}: {a} ") and "--force" in line
    assert not chart.exists()
    forced = invoke("plan", "--agents", "100", "--slo", "tps=80,ttft=10s", a, b, "--force", "-o", "json")
    assert forced.exit_code == 0, forced.output
    assert json.loads(forced.stdout)["forced"][0].startswith(f"{field}: {a} ")


def test_engines_may_differ_between_the_stacks_compared() -> None:
    a = benchdata.launch()
    b = benchdata.tuned().model_copy(update={"controls": a.controls.model_copy(update={"engines": {"vllm": "0.33.0"}})})
    assert make_plan([(Path("a"), a), (Path("b"), b)], 10, SLO).forced == ()


def test_json_is_the_same_answer_as_the_table(tmp_path: Path) -> None:
    path = write(tmp_path, "exact", benchdata.exact("s", ROWS))
    data = json.loads(invoke("plan", "--agents", "1500", "--slo", "tps=80,ttft=10s", path, "-o", "json").stdout)
    [stack] = data["stacks"]
    assert data["agents"] == 1500 and data["slo"] == {"tps": 80.0, "ttft_s": 10.0, "percentile": "p90"}
    assert stack["current"]["operating"] == {"agents": 150.0, "agents_per_gpu": round(150 / 72, 6),
                                             "tps_per_gpu": 155.0, "speed": 80.0, "bound": "within",
                                             "limited_by": "tps", "note": "interpolated between 100 and 200 agents "
                                                                         "(tps limit)"}
    assert stack["current"]["capacity"]["racks"] == 10 and stack["simulated"] is None
    # Without the `sim` extra a note says the aiconfigurator column is not shown; with it, the column
    # says why it has no estimate for a stack no lock in lockfiles/ has (tests/test_sim_aic.py has the rest).
    if stack["aiconfigurator"] is None:
        assert any("aiconfigurator" in n and "not installed" in n for n in data["notes"])
    else:
        assert stack["aiconfigurator"]["reason"].startswith("no lock with digest ")
    text = invoke("plan", "--agents", "1500", "--slo", "tps=80,ttft=10s", path)
    assert text.exit_code == 0
    row = next(line for line in text.stdout.splitlines() if line.startswith("s "))
    assert row.split()[3:8] == ["2.08", "155", "80", "720", "10"]


def test_text_marks_bounds_and_unknown_power(tmp_path: Path) -> None:
    path = write(tmp_path, "r", benchdata.exact("r", ROWS, platform="vera-rubin-nvl72"))
    result = invoke("plan", "--agents", "1500", "--slo", "tps=50,ttft=10s", path)
    row = next(line for line in result.stdout.splitlines() if line.startswith("r "))
    assert ">= 2.78" in row and "<= 8" in row and "unknown" in row
    assert ("r current: still met at 200 agents, the largest valid count measured: a lower bound, not "
            "extrapolated") in result.stdout


def test_the_chart_is_a_deterministic_png(tmp_path: Path) -> None:
    paths = [write(tmp_path, n, f()) for n, f in (("launch", benchdata.launch), ("rubin", benchdata.rubin))]
    charts = []
    for i in range(2):
        chart = tmp_path / f"plan{i}.png"
        result = invoke("plan", "--agents", "10000", "--slo", "tps=80,ttft=10s", *paths, "--chart", str(chart))
        assert result.exit_code == 0, result.output
        charts.append(chart.read_bytes())
    assert charts[0] == charts[1] and charts[0].startswith(b"\x89PNG\r\n\x1a\n")
    assert b"tIME" not in charts[0] and b"matplotlib version" not in charts[0]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"kind": "BenchResult", "version": 1}\n')
    for args, expected, lines in [
        # Every missing field of the result, one line each at file:line:col (as a profile's errors).
        (["--agents", "10", "--slo", "tps=80,ttft=10s", str(broken)],
         f"error: {broken}:1:1: stack: required field is missing", 8),
        (["--agents", "0", "--slo", "tps=80,ttft=10s", write(tmp_path, "a", benchdata.launch())],
         "must be positive", 1),
        (["--agents", "10", "--slo", "tps=80", str(broken)], "both tps= and ttft= are needed", 1),
    ]:
        result = invoke("plan", *args)
        assert result.exit_code == 2 and len(result.stderr.splitlines()) == lines, result.output
        assert expected in result.stderr


def test_a_saturated_client_or_an_interrupted_run_is_noted() -> None:
    result = benchdata.exact("s", ROWS)
    worn = result.model_copy(update={"interrupted": True,
                                     "client": result.client.model_copy(update={"saturated": True})})
    notes = make_plan([(Path("w.json"), worn)], 10, SLO).notes
    assert "w.json: the client was saturated while measuring: its throughput is a floor" in notes
    assert "w.json: the run was interrupted: its curve ends where it stopped" in notes
    assert not [n for n in make_plan([(Path("s.json"), result)], 10, SLO).notes if "s.json" in n]


def test_the_rack_difference_is_a_bound_when_the_mature_curve_never_crossed(tmp_path: Path) -> None:
    # The mature stack still holds 80 tok/s at its largest count (300 agents): its racks are at most.
    current = write(tmp_path, "c", benchdata.exact("c", ROWS))
    mature = write(tmp_path, "m", benchdata.exact("m", [(1, 500.0, 0.5, 7.0), (300, 90.0, 3.0, 375.0)]))
    result = invoke("plan", "--agents", "3000", "--slo", "tps=80,ttft=10s", current, "--mature", mature)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "mature:" in line)
    row = row.split(" refused [")[0]  # with the `sim` extra, the aiconfigurator column follows
    assert "<= 10" in row and row.rstrip().endswith("saves at least 10 racks")


def test_a_node_platform_counts_nodes() -> None:
    result = benchdata.exact("a", ROWS, platform="a100", gpus=8)
    cap = make_plan([(Path("a.json"), result)], 1500, SLO).stacks[0].current.capacity
    assert (cap.rack_kind, cap.rack_gpus, cap.instances, cap.racks, cap.rack_power_kw) == ("node", 8, 10, 10, None)


def test_failed_requests_break_the_target_as_bench_run_judges_it() -> None:
    result = benchdata.exact("s", ROWS)
    failing = result.points[2].model_copy(update={"errors": 3})
    result = result.model_copy(update={"points": (*result.points[:2], failing)})
    op = operating_point(curve_of(result, "p90"), Slo(tps=50, ttft_s=10), 72)
    # At 50 tok/s the curve would hold past 200 agents, but 3 requests failed there: 100 agents stand.
    assert (op.bound, op.limited_by, op.agents) == (Bound.within, "errors", 100)
    assert "3 request(s) failed at 200 agents" in op.note


def test_stacks_on_two_platforms_are_compared_per_gpu_at_the_target(tmp_path: Path) -> None:
    gb300 = benchdata.exact("g", [(1, 500.0, 0.5, 10.0), (100, 70.0, 3.0, 300.0)])
    rubin = benchdata.exact("r", [(1, 900.0, 0.5, 20.0), (100, 90.0, 3.0, 600.0)], platform="vera-rubin-nvl72")
    result = invoke("plan", "--agents", "1000", "--slo", "tps=80,ttft=10s", write(tmp_path, "g", gb300),
                    write(tmp_path, "r", rubin))
    assert result.exit_code == 0, result.output
    plan = make_plan([(Path("g.json"), gb300), (Path("r.json"), rubin)], 1000, SLO)
    g, r = (s.current.operating for s in plan.stacks)
    assert g.bound.value == "within" and r.bound.value == "at-least"  # Rubin still holds 80 at 100 agents
    ratio = r.tps_per_gpu / g.tps_per_gpu  # the larger over the smaller; Rubin's a lower bound
    said = f"per GPU at 80 tok/s per agent: r (vera-rubin-nvl72) / g (gb300-nvl72) = >= {ratio:.2f}x"
    assert said in result.stdout.replace("\n", " ")
