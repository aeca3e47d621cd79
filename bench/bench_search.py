"""`stackpin search`: candidates per second through validate and through the step model, on the shipped GB300
and Vera Rubin profiles, beside the naive path (each candidate written as a profile file, loaded and validated
as `stackpin validate FILE` does); then one whole search of the full space (space.yaml) per profile.

Run from the repository root: `python bench/bench_search.py [SAMPLE] [REPEATS]` (defaults 1500 candidates, 3
repeats; medians). Nothing is written: the search runs without writing picks.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stackpin.bench.result import Slo
from stackpin.profile.loader import load_profile
from stackpin.search.prune import base_warnings, check
from stackpin.search.run import search
from stackpin.search.space import candidates
from stackpin.sim.curve import default_workload
from stackpin.validate import run_rules
from stackpin.yamlio import dump_yaml

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles" / "deepseek-v4.1-flash"
SLO = Slo(tps=80, ttft_s=10)
AIM_FULL_S = 30.0  # a whole space of 10,000+ candidates within half a minute on one core


def _naive_rate(base: Path, sample: int) -> float:
    """Candidates/s when each one is a profile file read and validated from scratch."""
    loaded = load_profile(base)
    docs = [c.document for c in itertools.islice(candidates(loaded, 1), sample)]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for n, doc in enumerate(docs):
            path = Path(tmp) / f"c{n}.yaml"
            path.write_text(dump_yaml(doc), encoding="utf-8")
            paths.append(path)
        started = time.perf_counter()
        for path in paths:
            run_rules(load_profile(path))
        return len(paths) / (time.perf_counter() - started)


def _search_rate(base: Path, sample: int) -> float:
    loaded = load_profile(base)
    allowed = base_warnings(run_rules(loaded))
    items = list(itertools.islice(candidates(loaded, 1), sample))
    started = time.perf_counter()
    for item in items:
        check(loaded, item, allowed)
    return len(items) / (time.perf_counter() - started)


def main() -> None:
    sample = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    workload = default_workload()
    print(f"candidates per second, median of {repeats} (sample of {sample} candidates per profile)")
    print(f"{'profile':<22} {'naive validate':>15} {'search validate':>16} {'ratio':>6} {'predict':>9}")
    for name in ("gb300-tuned", "vera-rubin-tuned"):
        base = PROFILES / f"{name}.yaml"
        naive = statistics.median(_naive_rate(base, sample) for _ in range(repeats))
        ours = statistics.median(_search_rate(base, sample) for _ in range(repeats))
        predicted = []
        for _ in range(repeats):
            r = search(base, SLO, workload, limit=sample)
            predicted.append((len(r.survivors) + r.merged) / r.predict_s)
        print(f"{name:<22} {naive:>15,.0f} {ours:>16,.0f} {ours / naive:>5.1f}x {statistics.median(predicted):>9,.0f}")
    for name in ("gb300-tuned", "vera-rubin-tuned"):
        started = time.perf_counter()
        r = search(PROFILES / f"{name}.yaml", SLO, workload)
        took = time.perf_counter() - started
        print(f"{name}: full space {r.enumerated:,} candidates in {took:.1f} s (validate {r.validate_s:.1f} s, "
              f"{r.enumerated / r.validate_s:,.0f}/s; predict {len(r.survivors) + r.merged:,} in {r.predict_s:.1f} s)")
        print(f"aim: {name} full search within {AIM_FULL_S:g} s: {took:.1f} s: "
              f"{'met' if took <= AIM_FULL_S else 'NOT met'}")


if __name__ == "__main__":
    main()
