#!/usr/bin/env bash
# Build the Python environment that runs stackpin/enginecheck/check_runtime.py, the engine
# check that calls vLLM 0.31.0's own config and model-build code on CPU.
#
#   bash scripts/install-engine-check.sh [VENV_DIR]     (default .enginecheck/vllm-0.31.0)
#
# Steps (scripts/pinned-venv.sh): a venv; torch==2.13.0 with its dependencies; then the pinned list in
# scripts/enginecheck-vllm-0.31.0.txt with --no-deps, so only what the check imports is installed
# (vLLM's own requirements pull in GPU stacks it never touches); an import smoke test. Idempotent.
#
# vLLM 0.31.0's METADATA pins torch==2.13.0. On this kind of machine, pip's config finds the CPU build
# (2.13.0+cpu) under /opt/wheels. Elsewhere pip fetches the CUDA build from PyPI (several GB); the
# check works with either, since it never touches a GPU.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-$(dirname "$here")/.enginecheck/vllm-0.31.0}"
exec bash "$here/pinned-venv.sh" "install-engine-check" "$venv" "$here/enginecheck-vllm-0.31.0.txt" \
    '"$PY" -c "import torch, transformers, flashinfer, vllm"' "torch==2.13.0"
