"""Why `--model aiconfigurator` times steps with aiconfigurator-core's TensorRT-LLM data rather than its
vLLM data (docs/sim.md#aiconfigurator): the same EngineHandle calls on both, the per-op breakdown of a
vLLM decode step, and the GEMM rows behind it. Needs the `sim` extra.

    .venv/bin/python scripts/aic_probe.py
"""

from __future__ import annotations

from pathlib import Path

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
PARALLEL = {"tp_size": 4, "moe_tp_size": 1, "moe_ep_size": 4}  # one engine of the GB300 stacks: TP4 with EP


def main() -> None:
    import aiconfigurator_core
    import pandas as pd
    from aiconfigurator_core.sdk.engine import EngineHandle

    for backend, version in (("vllm", "0.24.0"), ("trtllm", "1.3.0rc23")):
        h = EngineHandle.compile(MODEL, "gb300", backend, backend_version=version, **PARALLEL)
        print(f"{backend} {version}: decode_step_latency(gen_tokens=batch, isl=context, osl=2) in ms")
        print(f"  {'batch':>5}  {'1K':>7}  {'27K':>7}  {'100K':>7}")
        for b in (1, 4, 16, 64):
            row = [h.decode_step_latency(b, isl, 2) for isl in (1_000, 27_000, 100_000)]
            print(f"  {b:>5}  " + "  ".join(f"{v:7.2f}" for v in row))
        _, gen_ms, _ = h.run_static(batch_size=1, isl=1000, osl=100)
        print(f"  run_static(batch 1, isl 1000, osl 100): generation {gen_ms:.0f} ms = {99 / gen_ms * 1000:.0f} tok/s")
        if backend == "vllm":
            print("  per-op decode step, batch 1, context 10K (ms):")
            for name, ms, _, source in h.decode_step_per_op(1, 10_000, 2):
                print(f"    {name:28} {ms:7.3f}  {source}")
    table = Path(aiconfigurator_core.__file__).parent / "systems/data/gb300/gemm/vllm/0.24.0/gemm_perf.parquet"
    rows = pd.read_parquet(table)
    shape = rows[(rows.n == 1024) & (rows.k == 4096) & rows.m.isin([1, 4, 16, 64, 256, 1024, 4096, 32768])]
    print("vllm 0.24.0 GB300 GEMM table, N=1024 K=4096 (the shared expert's gate/up at TP4), latency ms:")
    print(shape.pivot_table(index="m", columns="gemm_dtype", values="latency").round(4).to_string())


if __name__ == "__main__":
    main()
