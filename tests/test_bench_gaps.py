"""Every gap between token events (stackpin/bench/gaps.py), next to the per-request ITL mean: recorded
by the client, pooled per point, recomputed from the request log on read."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.bench.gaps import bucket_seconds, gap_bucket, gap_dist, rescaled
from stackpin.bench.resultfile import read_result
from stackpin.bench.stats import percentile
from stackpin.cli.main import main
from tests.sse_server import Server, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"


def test_a_bucket_holds_its_gaps_within_two_percent() -> None:
    rng = random.Random(1)
    for _ in range(2000):
        gap = 10 ** rng.uniform(-6, 1)
        assert bucket_seconds(gap_bucket(gap)) == pytest.approx(gap, rel=0.021)
    assert gap_bucket(0.0) == 0 and bucket_seconds(0) == 0.0


def test_pooled_percentiles_follow_the_gaps() -> None:
    rng = random.Random(2)
    gaps = [rng.lognormvariate(-6, 0.6) for _ in range(5000)]
    requests = []
    for start in range(0, len(gaps), 50):  # pooled over requests of 50 gaps each
        histogram: dict[int, int] = {}
        for g in gaps[start:start + 50]:
            histogram[gap_bucket(g)] = histogram.get(gap_bucket(g), 0) + 1
        requests.append(tuple(sorted(histogram.items())))
    d = gap_dist(requests)
    assert d is not None and d.count == len(gaps)
    ordered = sorted(gaps)
    for q, value in ((0.5, d.p50), (0.9, d.p90), (0.99, d.p99)):
        assert value == pytest.approx(percentile(ordered, q), rel=0.05)
    assert d.mean == pytest.approx(sum(gaps) / len(gaps), rel=0.02)
    assert gap_dist([(), ()]) is None
    # A simulator's --speed scaled back out: every gap 4x longer.
    assert bucket_seconds(rescaled({gap_bucket(0.001): 3}, 4)[0][0]) == pytest.approx(0.004, rel=0.03)


def test_the_client_records_every_gap_and_a_result_keeps_them_honest(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"session_id": f"s{i}", "input_length": 50, "output_length": 40}) + "\n"
                             for i in range(4)))
    out = tmp_path / "r.json"
    with serve_in_thread(Server(itl_s=0.002)) as server:
        run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace), "--lock",
                                        str(LOCK), "--agents", "2", "--out", str(out)])
    assert run.exit_code == 0, run.output
    assert "GAP p50" in run.output and "GAP: every gap between token events" in run.output
    point = read_result(out).points[0]
    assert point.token_gap_s is not None
    # One event a token here: 39 gaps a request, and together they span first to last token, as ITL does.
    assert point.token_gap_s.count == sum(r.output_tokens - 1 for r in point.request_log) == 4 * 39
    itl = sum(r.itl_mean_s or 0 for r in point.request_log) / len(point.request_log)
    assert point.token_gap_s.mean == pytest.approx(itl, rel=0.03)
    # An edited gap figure is caught on read, as every other headline figure is.
    data = json.loads(out.read_text())
    data["points"][0]["token_gap_s"]["p50"] *= 0.5
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    refused = CliRunner().invoke(main, ["bench", "compare", str(out), str(edited)])
    assert refused.exit_code == 2 and "points.0.token_gap_s" in refused.output, refused.output
