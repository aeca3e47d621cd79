#!/usr/bin/env bash
# Build the environment the Dynamo bed runs in (`stackpin sim serve LOCK --backend dynamo`): NVIDIA
# Dynamo 1.6.1's OpenAI-compatible frontend (with its KV router) and its mocker engine, CPU only.
#
#   bash scripts/install-dynamo-bed.sh [VENV_DIR]     (default .dynamobed/dynamo-1.6.1)
#
# An environment of its own: ai-dynamo pins kubernetes<33, which conflicts with stackpin's. The pinned
# list (scripts/dynamobed-1.6.1.txt) is installed with --no-deps, because `pip install ai-dynamo==1.6.1`
# fails on a machine that reaches PyPI only (its aisimulate==0.13.0 dependency is a stub there that
# downloads the real package from another index; see the list's header). About a minute and 700 MB.
# Idempotent (scripts/pinned-venv.sh). The smoke test: both entry points parse their options, which
# imports the Rust runtime, the router and the mocker.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-$(dirname "$here")/.dynamobed/dynamo-1.6.1}"
exec bash "$here/pinned-venv.sh" "install-dynamo-bed" "$venv" "$here/dynamobed-1.6.1.txt" \
    '"$PY" -m dynamo.frontend --help && "$PY" -m dynamo.mocker --help'
