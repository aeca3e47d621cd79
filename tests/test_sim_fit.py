"""What the step model's fit says about itself (stackpin/sim/fit.py, `stackpin sim figures`): which
parameters ended on a bound, which figures each moves, and how well it predicts a figure it was not
fitted to."""

from __future__ import annotations

import json

from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.sim.curve import calibration, figures
from stackpin.sim.fit import fit, independent, leave_one_out, loss, provenance
from stackpin.sim.roofline import load_params


def test_the_files_values_are_the_fit_and_say_where_they_sit() -> None:
    # A search starts from the shipped values and never ends worse than them.
    _, best = fit(restarts=1)
    assert best <= loss(load_params())
    rows = {p.parameter: p for p in provenance()}
    on_bound = {name for name, p in rows.items() if p.on_bound}
    # Two of ten sit on a bound, the data would push them further: the generic sparse-MLA kernel and autotune
    # off, both at the top of what the write-ups allow (each change is credited with part of the gain). Draft
    # acceptance is published now (roofline.yaml published_acceptance), no longer fitted.
    assert on_bound == {"attention.FLASHINFER_MLA_SPARSE_DSV41", "autotune.off"}
    names = [f["name"] for f in calibration()["figures"]]
    assert len(rows["bw_efficiency"].moves) >= len(names) - 1  # (nearly) every figure leans on bandwidth
    assert "acceptance.dspark" not in rows


def test_leave_one_out_refits_without_each_independent_figure() -> None:
    assert "GB300 tuned / launch, single agent" not in independent()  # a quotient of two listed figures
    rows = leave_one_out(restarts=2)
    assert [r.name for r in rows] == independent()
    assert all(r.predicted > 0 for r in rows)
    # Refitted without it, a figure is predicted, not reproduced: some land far from the fitted model's values
    # (the 1.6x at 80 tok/s pins the piecewise and eager step costs nothing else constrains).
    fitted = {f.name: f.simulated for f in figures()}
    assert any(abs(r.predicted / fitted[r.name] - 1) > 0.05 for r in rows)


def test_sim_figures_states_the_fit() -> None:
    result = CliRunner().invoke(main, ["sim", "figures", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["figures"]) == 7 and len(data["fitted"]) == 10
    assert {row["parameter"] for row in data["fitted"] if row["onBound"] == "high"} >= {"autotune.off"}
    # Public figures the fit does not see are printed beside the model, with what it does not model.
    checks = {row["name"]: row for row in data["validation"]}
    single = checks["A100 80 GB x8 (TP8), single stream tok/s"]
    assert single["published"] == 129 and single["simulated"] > 0
    assert any("CPU offload" in u for u in single["unmodelled"])
    text = CliRunner().invoke(main, ["sim", "figures"]).stdout
    # One table: every figure, fitted or held out, with its error; held-out rows name what the model lacks.
    assert "fitted or held out" in text and "held out (1) (2) (3)" in text and "(2) not modelled: precision" in text
    assert "fitted to 7 figures (6 independent" in text and "on bound" in text
