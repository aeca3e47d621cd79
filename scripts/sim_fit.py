"""Fit the simulator's unpublished parameters (stackpin/sim/roofline.yaml `fitted`, bounds under `fit`) to
the published figures (stackpin/sim/calibration.yaml) with stackpin/sim/fit.py.

    .venv/bin/python scripts/sim_fit.py          # prints the fitted values and the figures

Copy the printed values into roofline.yaml; tests/test_sim_calibration.py then holds the figures, and
`stackpin sim figures --leave-one-out` says how well the fit predicts a figure it did not see.
"""

from __future__ import annotations

from stackpin.sim.curve import figures
from stackpin.sim.fit import fit, free, get


def main() -> None:
    params, best = fit()
    for path, _, _ in free(params):
        print(".".join(path), round(get(params, path), 6))
    print("loss", round(best, 6))
    for f in figures(params):
        print(f"{f.name}: published {f.published}, simulated {f.simulated}")


if __name__ == "__main__":
    main()
