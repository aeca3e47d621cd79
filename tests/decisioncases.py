"""The decision model's cases as result files, for docs/bench.md's table: `python -m tests.decisioncases DIR`.

Each case is a pair (CASE-a.json, CASE-b.json) built as tests/test_decisions.py builds them (seeded requests
through stackpin.bench.stats.build_point, so every figure reads back verified from its request log); they are
illustrative shapes, not measurements of any stack.
"""

from __future__ import annotations

from pathlib import Path

from stackpin.bench.result import BenchResult, result_json
from tests.test_bench_compare import LAUNCH, TUNED, make_result
from tests.test_decisions import invalidate, without_logs

NEVER_CROSSED = {"agents": (1, 8, 32), "fail_from": None}


def cases() -> dict[str, tuple[BenchResult, BenchResult]]:
    def run(seed: int, tps: float = 100, lock: Path = TUNED, **shape: object) -> BenchResult:
        return make_result(lock, tps=tps, ttft=0.5, seed=seed, **shape)  # type: ignore[arg-type]

    return {
        "improvement": (run(1, lock=LAUNCH), run(2, tps=130)),
        "regression": (run(1), run(2, tps=70)),
        "no-change": (run(1), run(2)),
        "invalid-point": (run(1, **NEVER_CROSSED), invalidate(run(2, **NEVER_CROSSED), {32})),
        "all-invalid": (run(1), invalidate(run(2), {1, 4, 5})),
        "two-bounds": (run(1, lock=LAUNCH, agents=(1, 96, 384), gpus=72, fail_from=None),
                       run(2, agents=(1, 96), gpus=4, fail_from=None)),
        "below-a-bound": (run(1, agents=(1, 8, 9, 32), fail_from=None), run(2, agents=(1, 8, 9, 32), fail_from=9)),
        "no-log": (run(1), without_logs(run(2, tps=2.3))),
    }


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, pair in cases().items():
        for side, result in zip("ab", pair, strict=True):
            (out / f"{name}-{side}.json").write_text(result_json(result), encoding="utf-8")
    print(f"{len(cases())} cases in {out}")
