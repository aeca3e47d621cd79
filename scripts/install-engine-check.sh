#!/usr/bin/env bash
# Build the Python environment that runs stackpin/enginecheck/check_runtime.py, the engine
# check that calls vLLM 0.31.0's own config and model-build code on CPU.
#
#   bash scripts/install-engine-check.sh [VENV_DIR]     (default .enginecheck/vllm-0.31.0)
#
# Steps:
#   1. Create a venv.
#   2. Install torch==2.13.0, with its dependencies.
#   3. Install the pinned list in scripts/enginecheck-vllm-0.31.0.txt with --no-deps, so
#      only what the check imports is installed (vLLM's own requirements pull in GPU
#      stacks it never touches).
#
# Idempotent: the venv keeps a stamp holding the sha256 of the requirements (and the
# torch pin). A current venv is left alone; a stale or half-built one is rebuilt from
# scratch. Only PyPI (or the mirrors pip's own config names) is contacted.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${1:-$repo/.enginecheck/vllm-0.31.0}"
reqs="$here/enginecheck-vllm-0.31.0.txt"
# vLLM 0.31.0's METADATA pins torch==2.13.0. On this kind of machine, pip's config finds
# the CPU build (2.13.0+cpu) under /opt/wheels. Elsewhere pip fetches the CUDA build from
# PyPI (several GB); the check works with either, since it never touches a GPU.
torch_pin="torch==2.13.0"
stamp_name=".enginecheck-stamp"

fail() {
    echo "install-engine-check: $*" >&2
    rm -rf "$venv"
    exit 1
}

[ -f "$reqs" ] || { echo "install-engine-check: missing $reqs" >&2; exit 1; }
command -v python3 >/dev/null || { echo "install-engine-check: python3 not found" >&2; exit 1; }

want="$( { echo "$torch_pin"; cat "$reqs"; } | sha256sum | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/$stamp_name" 2>/dev/null)" = "$want" ]; then
    echo "engine check env current: $venv (requirements sha256 ${want:0:12})"
    exit 0
fi

# From here on, an interrupted or failed build must not leave a venv that looks usable.
trap 'fail "interrupted"' INT TERM
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
"${pip[@]}" install "$torch_pin" || fail "pip install $torch_pin failed"
"${pip[@]}" install --no-deps -r "$reqs" || fail "pip install --no-deps -r $reqs failed"
# Import smoke test: the check's own imports, minus the CUDA stand-ins it installs first.
"$venv/bin/python" -c "import torch, transformers, flashinfer, vllm" >/dev/null 2>&1 \
    || fail "import smoke test failed (run $venv/bin/python -c 'import vllm' to see why)"
echo "$want" > "$venv/$stamp_name"
trap - INT TERM
echo "engine check env ready: $venv (vllm 0.31.0, $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'), $(du -sh "$venv" | cut -f1))"
