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
#
# Idempotent: the venv keeps a stamp holding the sha256 of the list. A current venv is left alone; a
# stale or half-built one is rebuilt from scratch. Only PyPI (or the mirrors pip's config names) is
# contacted.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${1:-$repo/.dynamobed/dynamo-1.6.1}"
reqs="$here/dynamobed-1.6.1.txt"
stamp_name=".dynamobed-stamp"

fail() {
    echo "install-dynamo-bed: $*" >&2
    rm -rf "$venv"
    exit 1
}

[ -f "$reqs" ] || { echo "install-dynamo-bed: missing $reqs" >&2; exit 1; }
command -v python3 >/dev/null || { echo "install-dynamo-bed: python3 not found" >&2; exit 1; }

want="$(sha256sum < "$reqs" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/$stamp_name" 2>/dev/null)" = "$want" ]; then
    echo "dynamo bed env current: $venv (requirements sha256 ${want:0:12})"
    exit 0
fi

# From here on, an interrupted or failed build must not leave a venv that looks usable.
trap 'fail "interrupted"' INT TERM
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
"${pip[@]}" install --no-deps -r "$reqs" || fail "pip install --no-deps -r $reqs failed"
# Smoke test: both entry points parse their options (imports the Rust runtime, the router, the mocker).
for module in dynamo.frontend dynamo.mocker; do
    "$venv/bin/python" -m "$module" --help >/dev/null 2>&1 \
        || fail "$module does not start (run $venv/bin/python -m $module --help to see why)"
done
echo "$want" > "$venv/$stamp_name"
trap - INT TERM
echo "dynamo bed env ready: $venv (ai-dynamo 1.6.1, $(du -sh "$venv" | cut -f1))"
