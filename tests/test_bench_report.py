"""`stackpin plot` (bench plot) and `stackpin report`: deterministic PNG curves and a self-contained HTML
page of a deployment's history, diffs and bench curves, loaded in headless Chromium and checked as
rendered."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from stackpin.bench.result import BenchResult
from stackpin.cli.main import main
from stackpin.history.store import HistoryStore
from tests import benchdata
from tests.helpers import ROOT

HISTORY = ROOT / "history"
DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The flags that run it here: no sandbox (root), no GPU, nothing reached over the network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                    "(scripts/install-test-services.sh installs Debian's package)")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def results_for_revisions(tmp: Path) -> tuple[str, str]:
    """A launch-shaped result bound to revision 1's stack and a tuned-shaped one bound to revision 2's."""
    store = HistoryStore(HISTORY)
    key = store.resolve(DEPLOYMENT)
    one, two = tmp / "r1.json", tmp / "r2.json"
    benchdata.write(benchdata.launch(store.read(key, 1).stack_digest), one)
    benchdata.write(benchdata.tuned(store.read(key, 2).stack_digest), two)
    return str(one), str(two)


def report(tmp: Path, out: Path, *extra: str) -> Result:
    one, two = results_for_revisions(tmp)
    return invoke("report", DEPLOYMENT, "--history", str(HISTORY), "--out", str(out), "--result", f"1={one}",
                  "--result", f"2={two}", *extra)


def test_plot_writes_the_same_png_for_the_same_results(tmp_path: Path) -> None:
    paths = []
    for name, make in (("launch", benchdata.launch), ("tuned", benchdata.tuned)):
        paths.append(str(tmp_path / f"{name}.json"))
        benchdata.write(make(), paths[-1])
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    result = invoke("bench", "plot", *paths, "--out", str(first))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {first}  (2 curve(s), SLO 80 tok/s)\n"
    assert invoke("bench", "plot", *paths, "--out", str(second), "--slo", "tps=80,ttft=10s").exit_code == 0
    data = first.read_bytes()
    assert data == second.read_bytes()
    width, height = png_size(data)
    assert width == 1200 and 500 <= height <= 650  # the plots, and the legend's rows below them
    assert b"tIME" not in data and b"matplotlib version" not in data


def test_plot_is_in_the_bench_group() -> None:
    assert "plot" not in invoke("--help").stdout
    assert "throughput per GPU against per-agent output speed" in invoke("bench", "plot", "--help").stdout
    assert "plot" in invoke("bench", "--help").stdout


def test_report_is_one_self_contained_deterministic_page(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = report(tmp_path, out)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {out}  ({DEPLOYMENT}: 3 revision(s), 2 bench result(s))\n"
    html = out.read_text(encoding="utf-8")
    links = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert links and all(link.startswith("data:image/png;base64,") for link in links), links
    assert "<script" not in html and "http://" not in html and "https://" not in html
    again = tmp_path / "again.html"
    assert report(tmp_path, again).exit_code == 0 and again.read_bytes() == out.read_bytes()


def test_report_shows_revisions_diffs_and_curves(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert report(tmp_path, out, "-o", "json").exit_code == 0
    html = out.read_text(encoding="utf-8")
    assert len(re.findall(r'<tr class="revision"', html)) == 3
    assert "Roll back to the launch stack while the tuned one is investigated" in html
    # The diff is stackpin.diff's: the same one-line summary the history listing prints, and its fields.
    summary = invoke("history", DEPLOYMENT, "--history", str(HISTORY), "-o", "json")
    change = [r["change"] for r in json.loads(summary.stdout)["revisions"]][1]
    assert f"Revision 1 &rarr; 2: {change}" in html
    assert "spec.kernels.attention" in html and "FLASHMLA_MEGA_ATTN_DSV41" in html
    assert len(re.findall(r'<tr class="result"', html)) == 2
    [chart] = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    width, height = png_size(base64.b64decode(chart))
    assert width == 1200 and 500 <= height <= 650


def test_results_beside_a_revision_are_attached(tmp_path: Path) -> None:
    history = tmp_path / "history"
    shutil.copytree(HISTORY, history)
    one, _ = results_for_revisions(tmp_path)
    shutil.copy(one, history / DEPLOYMENT / "000001.bench.json")
    out = tmp_path / "report.html"
    result = invoke("report", DEPLOYMENT, "--history", str(history), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "1 bench result(s)" in result.stdout and "000001.bench.json" in out.read_text()
    # The history itself still reads: a result beside a revision is not a revision.
    assert invoke("history", DEPLOYMENT, "--history", str(history)).exit_code == 0


def test_a_result_of_another_stack_or_revision_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    one, two = results_for_revisions(tmp_path)
    out = tmp_path / "report.html"
    for args, expected in [
        (["--result", f"1={two}"], f"error: {two}: measured stack sha256:"),
        (["--result", f"9={one}"], f"error: --result 9=...: {DEPLOYMENT} has no revision 9"),
        (["--result", one], f"error: --result {one}: expected REV=FILE"),
    ]:
        result = invoke("report", DEPLOYMENT, "--history", str(HISTORY), "--out", str(out), *args)
        assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
        assert result.stderr.startswith(expected), result.stderr
        assert not out.exists()


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=120, check=True)


@needs_chromium
def test_chromium_renders_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert report(tmp_path, out).exit_code == 0
    # A probe the test adds (the page itself has no script): each image's decoded size, once loaded.
    probe = tmp_path / "probe.html"
    probe.write_text(out.read_text().replace("</body>", (
        '<script>window.addEventListener("load", () => document.body.setAttribute("data-images", '
        'Array.from(document.images).map(i => i.naturalWidth + "x" + i.naturalHeight).join(" ")));'
        "</script></body>")))
    dom = chromium(tmp_path, "--dump-dom", probe.as_uri()).stdout
    assert re.findall(r"<h2[^>]*>([^<]+)</h2>", dom) == ["Revision history", "Bench curves",
                                                         "Changes between revisions"]
    assert re.findall(r"<h1>([^<]+)</h1>", dom) == [f"stackpin report: {DEPLOYMENT}"]
    assert len(re.findall(r'<tr class="revision" data-revision="\d"', dom)) == 3
    [chart] = re.findall(r'src="data:image/png;base64,([^"]+)"', out.read_text())
    assert 'data-images="{}x{}"'.format(*png_size(base64.b64decode(chart))) in dom
    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", out.as_uri())
    assert png_size(shot.read_bytes()) == (1200, 1600)


def test_a_single_revision_without_results_still_makes_a_page(tmp_path: Path) -> None:
    history = tmp_path / "history"
    shutil.copytree(HISTORY, history)
    for later in ("000002.yaml", "000003.yaml", "HEAD"):  # a history of one revision, as it was then
        (history / DEPLOYMENT / later).unlink()
    out = tmp_path / "report.html"
    result = invoke("report", DEPLOYMENT, "--history", str(history), "--out", str(out))
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert len(re.findall(r'<tr class="revision"', html)) == 1
    assert "One revision: nothing to compare." in html and "No bench result is attached" in html
    assert "<img" not in html


def test_values_from_files_are_escaped(tmp_path: Path) -> None:
    store = HistoryStore(HISTORY)
    digest = store.read(store.resolve(DEPLOYMENT), 1).stack_digest
    hostile = benchdata.launch(digest)
    hostile = hostile.model_copy(update={"stack": hostile.stack.model_copy(
        update={"name": '<script>alert("x")</script>'})})
    path = tmp_path / "hostile.json"
    benchdata.write(hostile, path)
    out = tmp_path / "report.html"
    result = invoke("report", DEPLOYMENT, "--history", str(HISTORY), "--out", str(out), "--result", f"1={path}")
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "<script" not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html


def report_of(result: BenchResult, revision: int, tmp_path: Path, name: str = "result.json") -> str:
    """The report's HTML with `result` (written to tmp_path/name) given for `revision`."""
    path = tmp_path / name
    benchdata.write(result, path)
    out = tmp_path / "report.html"
    done = invoke("report", DEPLOYMENT, "--history", str(HISTORY), "--out", str(out), "--result", f"{revision}={path}")
    assert done.exit_code == 0, done.output
    return out.read_text(encoding="utf-8")


def test_the_results_table_says_where_the_client_was_saturated(tmp_path: Path) -> None:
    store = HistoryStore(HISTORY)
    result = benchdata.launch(store.read(store.resolve(DEPLOYMENT), 1).stack_digest)
    result = result.model_copy(update={"client": result.client.model_copy(update={"saturated": True})})
    [row] = re.findall(r'<tr class="result">(.*?)</tr>', report_of(result, 1, tmp_path))
    # Agents per GPU at the SLO (447.6 agents on 72 GPUs): results on unequal GPU counts compare only so.
    assert "the client was saturated: throughput is a floor" in row and "<td>6.22</td>" in row


def test_the_report_counts_valid_points_only_and_lists_the_invalid_ones_with_their_cause(tmp_path: Path) -> None:
    from tests.busyhost import with_invalid

    store = HistoryStore(HISTORY)
    key = store.resolve(DEPLOYMENT)
    # The busy host: a stack with one valid point of six was reported with its six.
    busy = with_invalid(benchdata.tuned(store.read(key, 2).stack_digest), {8, 32, 128, 512, 2048})
    html = report_of(busy, 2, tmp_path, "busy.json")
    [row] = re.findall(r'<tr class="result">(.*?)</tr>', html)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[6] == "1 of 6"  # the valid points column
    # Its only valid point (1 agent) met the SLO: a bound, said so, never an interpolated figure.
    assert cells[8].startswith("&gt;= ") and "5 invalid point(s) not counted" in cells[10]
    invalid = re.findall(r'<tr class="invalid"><td>2</td><td><code>busy.json</code></td><td>gb300-tuned</td>'
                         r"<td>(\d+)</td><td>([^<]+)</td></tr>", html)
    assert [int(a) for a, _ in invalid] == [8, 32, 128, 512, 2048]
    cause = next(p.invalid for p in busy.points if p.invalid)
    assert cause and all(c == cause.replace("'", "&#39;") for _, c in invalid)
    assert "client saturated" in cause


def test_the_reports_diff_tables_say_was_and_now_not_only_in_colour(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert report(tmp_path, out).exit_code == 0
    html = out.read_text(encoding="utf-8")
    assert "<th>Was (revision 1)</th><th>Now (revision 2)</th>" in html
    assert '<td class="old"><span class="sign">&minus;</span> was <code>FLASHINFER_MLA_SPARSE_DSV41</code></td>' in html
    assert '<td class="new"><span class="sign">+</span> now <code>FLASHMLA_MEGA_ATTN_DSV41</code>' in html


def _report_peak_mib(bench: dict[str, Any], work: Path, size: int, files: dict[str, Path]) -> float:
    import os
    import sys

    key = bench["build"](work / str(size), size, files)
    out = work / f"report-{size}.html"
    cmd = [sys.executable, "-m", "stackpin", "report", str(key), "--history", str(work / str(size)), "--out", str(out)]
    _, peak = bench["measured"](cmd, {**os.environ, "STACKPIN_CACHE_DIR": ""})  # every result read and verified
    html = out.read_text(encoding="utf-8")
    assert len(re.findall(r'<tr class="result">', html)) == size
    assert len(re.findall(r'<tr class="invalid">', html)) == size  # each result's saturated point, with its cause
    if size > 8:
        assert f"The chart draws the newest 8 of the {size} results" in html
    peak_mib: float = peak
    return peak_mib


def test_report_memory_does_not_grow_with_revisions(tmp_path: Path) -> None:
    """Peak memory of whole `stackpin report` processes (ru_maxrss from wait4), 10 and 100 revisions, each
    with a 1.4 MiB result attached (bench/bench_report.py's, 100 requests a point; `make bench` times the
    measured run's size, 14 MiB). Holding every result, 100 revisions took 3x the peak of 10 (114 -> 347
    MiB); reading one at a time and keeping summaries, the peak stays within 1.25x (93 -> 101 MiB)."""
    import runpy

    from stackpin.lock.lockfile import read_lock

    bench = runpy.run_path(str(ROOT / "bench" / "bench_report.py"), run_name="not_main")
    files = {}
    for name, single, knee in (("gb300-launch", 596, 60), ("gb300-tuned", 848, 64.5)):
        lock = read_lock(ROOT / "lockfiles" / f"{name}.lock.yaml")
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(bench["result_text"](bench["realistic_result"](name, lock.stack_digest, single, knee,
                                                                                requests=100)))
    assert files["gb300-launch"].stat().st_size > 2**20
    ten = _report_peak_mib(bench, tmp_path, 10, files)
    hundred = _report_peak_mib(bench, tmp_path, 100, files)
    assert hundred <= 1.25 * ten, f"peak {ten:.0f} MiB at 10 revisions, {hundred:.0f} MiB at 100"


def test_a_report_made_again_takes_each_summary_from_the_cache_for_the_same_bytes_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stackpin.bench import resultfile

    cache = tmp_path / "cache"
    monkeypatch.setenv("STACKPIN_CACHE_DIR", str(cache))
    first, again = tmp_path / "first.html", tmp_path / "again.html"
    assert report(tmp_path, first).exit_code == 0
    entries = sorted((cache / "result-summaries").iterdir())
    assert len(entries) == 2  # one per result file, named by the sha256 of its bytes

    def unread(path: Path) -> None:
        raise AssertionError(f"{path} read again")

    with monkeypatch.context() as m:
        m.setattr(resultfile, "read_result", unread)
        assert report(tmp_path, again).exit_code == 0  # the same files: summaries from the cache
    assert again.read_bytes() == first.read_bytes()
    # An edited figure is other bytes: read and verified in full, and refused, whatever the cache holds.
    one, two = results_for_revisions(tmp_path)
    data = json.loads(Path(two).read_text())
    data["points"][2]["output_tps_per_gpu"] *= 2
    Path(two).write_text(json.dumps(data, sort_keys=True, indent=2) + "\n")
    edited = invoke("report", DEPLOYMENT, "--history", str(HISTORY), "--out", str(again), "--result", f"1={one}",
                    "--result", f"2={two}")
    assert edited.exit_code == 2 and "points.2.output_tps_per_gpu" in edited.stderr and "edited by hand?" in \
        edited.stderr, edited.output
    # A cache entry that does not read is ignored: the result is read again and the page is the same.
    for entry in entries:
        entry.write_text("{not json")
    assert report(tmp_path, again).exit_code == 0 and again.read_bytes() == first.read_bytes()
