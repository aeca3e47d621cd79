#!/usr/bin/env bash
# Build the Python environment that runs stackpin/enginecheck/check_runtime.py, the engine
# check that calls vLLM 0.31.0's own config and model-build code on CPU.
#
#   bash scripts/install-engine-check.sh [VENV_DIR]     (default .enginecheck/vllm-0.31.0)
#   bash scripts/install-engine-check.sh VENV_DIR --sglang 0.5.21   (SGLang's: stackpin/enginecheck/sglang-0.5.21.txt)
#
# The same build as `stackpin engines setup-check` (stackpin/enginecheck/envbuild.py, standard library
# only, so the system python3 runs it before stackpin's own environment exists): a venv; torch==2.13.0
# with its dependencies; then the pinned list stackpin/enginecheck/vllm-0.31.0.txt with --no-deps, so
# only what the check imports is installed (vLLM's own requirements pull in GPU stacks it never
# touches); an import smoke test. Idempotent. pip shows its progress.
#
# vLLM 0.31.0's METADATA pins torch==2.13.0. On this kind of machine, pip's config finds the CPU build
# (2.13.0+cpu) under /opt/wheels. Elsewhere pip fetches the CUDA build from PyPI (several GB); the
# check works with either, since it never touches a GPU.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="${1:-$root/.enginecheck/vllm-0.31.0}"
command -v python3 >/dev/null || { echo "install-engine-check: python3 not found" >&2; exit 1; }
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m stackpin.enginecheck.envbuild "$(realpath -m "$venv")" --vllm 0.31.0 "${@:2}"
