"""The step model's fit to the published figures, and what it says about itself.

`fit(names)` searches the free parameters (roofline.yaml `fit`, with their bounds) for the least squared
log error over the named calibration figures: coordinate search from the file's values, then from random
starts inside the bounds. `provenance(params)` says, per free parameter, whether it ended on a bound and
which figures it moves; `leave_one_out()` refits without each independent figure and gives the error on
the one left out: how well the model predicts a figure it was not fitted to.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackpin.sim.curve import LOCKDIR, calibration, figures
from stackpin.sim.roofline import load_params

Path_ = tuple[str, ...]


def free(params: dict[str, Any] | None = None) -> list[tuple[Path_, float, float]]:
    """(path under `fitted`, low, high) of every fitted parameter."""
    spec = (params or load_params())["fit"]
    return [(tuple(name.split(".")), float(low), float(high)) for name, (low, high) in spec.items()]


def get(params: dict[str, Any], path: Path_) -> float:
    node: Any = params["fitted"]
    for key in path:
        node = node[key]
    return float(node)


def put(params: dict[str, Any], path: Path_, value: float) -> None:
    node: Any = params["fitted"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def loss(params: dict[str, Any], names: set[str] | None = None, lockdir: Path = LOCKDIR) -> float:
    f = params["fitted"]
    # A graph replay costs less than piecewise graphs, which cost less than launching every kernel.
    if not (f["graph_step_s"] * 1.2 <= f["piecewise_step_s"] and f["piecewise_step_s"] * 1.2 <= f["eager_step_s"]):
        return math.inf
    return sum(math.log(max(x.simulated, 1e-9) / x.published) ** 2 for x in figures(params, lockdir)
               if names is None or x.name in names)


def _search(params: dict[str, Any], names: set[str] | None, lockdir: Path) -> float:
    best = loss(params, names, lockdir)
    step = 0.3
    for _ in range(40):
        improved = False
        for path, low, high in free(params):
            value = get(params, path)
            for factor in (1 + step, 1 / (1 + step)):
                trial = min(high, max(low, value * factor))
                put(params, path, trial)
                trial_loss = loss(params, names, lockdir)
                if trial_loss < best - 1e-12:
                    best, value, improved = trial_loss, trial, True
                else:
                    put(params, path, value)
        if not improved:
            step /= 2
            if step < 0.005:
                break
    return best


def fit(names: set[str] | None = None, restarts: int = 12, seed: int = 0,
        from_file: bool = True, lockdir: Path = LOCKDIR) -> tuple[dict[str, Any], float]:
    """The best parameters for the named figures (all by default) and their loss. The search starts from
    the file's values (unless `from_file` is off: they were fitted to every figure), then from random
    starts inside the bounds."""
    rng = random.Random(seed)
    start = load_params()
    params, best = copy.deepcopy(start), loss(start, names, lockdir) if from_file else math.inf
    for restart in range(restarts):
        trial = copy.deepcopy(start)
        if restart or not from_file:
            # A start the loss refuses (step costs out of order) is drawn again: the search cannot leave it, and
            # with every start refused the fit would fall back to the file's values (fitted with every figure).
            for _ in range(100):
                for path, low, high in free(start):
                    put(trial, path, math.exp(rng.uniform(math.log(low), math.log(high))))
                if math.isfinite(loss(trial, names, lockdir)):
                    break
        trial_loss = _search(trial, names, lockdir)
        if trial_loss < best:
            params, best = trial, trial_loss
    return params, best


@dataclass(frozen=True)
class Provenance:
    parameter: str
    value: float
    low: float
    high: float
    on_bound: str | None  # "low" or "high" when the fit ended there (within 1%)
    moves: tuple[str, ...]  # figures that move by more than 1% when it moves by 20%


def provenance(params: dict[str, Any] | None = None, lockdir: Path = LOCKDIR) -> list[Provenance]:
    params = copy.deepcopy(params or load_params())
    base = {f.name: f.simulated for f in figures(params, lockdir)}
    out = []
    for path, low, high in free(params):
        value = get(params, path)
        moved: set[str] = set()
        for factor in (0.8, 1.2):
            put(params, path, value * factor)
            moved |= {f.name for f in figures(params, lockdir)
                      if base[f.name] and abs(f.simulated / base[f.name] - 1) > 0.01}
        put(params, path, value)
        bound = "low" if value <= low * 1.01 else "high" if value >= high / 1.01 else None
        out.append(Provenance(".".join(path), value, low, high, bound, tuple(n for n in base if n in moved)))
    return out


def independent() -> list[str]:
    """The calibration figures that are not computed from other listed figures."""
    return [f["name"] for f in calibration()["figures"] if not f.get("derived")]


def _dependents(name: str) -> set[str]:
    """Derived figures whose terms include the figure `name` computes (leaving it out leaves them out)."""
    items = {f["name"]: f for f in calibration()["figures"]}
    terms = [items[name].get(k) for k in ("of", "per") if k in items[name]]
    return {n for n, f in items.items() if f.get("derived") and any(f.get(k) in terms for k in ("of", "per"))}


@dataclass(frozen=True)
class LeftOut:
    name: str
    published: float
    predicted: float  # by the model fitted without it

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def leave_one_out(restarts: int = 4, lockdir: Path = LOCKDIR) -> list[LeftOut]:
    every = {f["name"] for f in calibration()["figures"]}
    out = []
    for name in independent():
        # Random starts only: the file's values were fitted with this figure and would carry it in.
        params, _ = fit(every - {name} - _dependents(name), restarts=restarts, from_file=False,
                        lockdir=lockdir)
        figure = next(f for f in figures(params, lockdir) if f.name == name)
        out.append(LeftOut(name, figure.published, figure.simulated))
    return out


@dataclass(frozen=True)
class FigureRow:
    """One public figure as `stackpin sim figures` shows it: fitted (calibration.yaml `figures`) or held out
    (`validation`), the model's value and its error; for a fitted figure, its error when left out of the fit."""

    name: str
    published: float
    model: float
    status: str  # "fitted", "fitted (quotient)" (computed from two fitted figures) or "held out"
    tolerance: float | None = None  # fitted: the calibration test's
    within: bool | None = None
    left_out: float | None = None  # fitted: the error refitted without it (--leave-one-out)
    source: str = ""
    lacks: str = ""
    unmodelled: tuple[str, ...] = ()

    @property
    def error(self) -> float:
        return self.model / self.published - 1


def every_figure(lockdir: Path = LOCKDIR, loo: bool = False) -> list[FigureRow]:
    """Every public figure calibration.yaml has, fitted ones first, each with the model's error (and with
    `loo`, each independent fitted figure's error when the model is refitted without it)."""
    from stackpin.sim.curve import validation

    left = {x.name: x.error for x in leave_one_out(lockdir=lockdir)} if loo else {}
    alone = set(independent())
    rows = [FigureRow(f.name, f.published, f.simulated, "fitted" if f.name in alone else "fitted (quotient)",
                      f.tolerance, f.within, left.get(f.name)) for f in figures(lockdir=lockdir)]
    rows += [FigureRow(v.name, v.published, v.simulated, "held out", source=v.source, lacks=v.lacks,
                       unmodelled=v.unmodelled) for v in validation(lockdir=lockdir)]
    return rows
