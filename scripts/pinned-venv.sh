#!/usr/bin/env bash
# Build a Python environment of its own from a pinned list, installed with --no-deps, once: the engine
# check's (install-engine-check.sh) and the Dynamo bed's (install-dynamo-bed.sh) use it.
#
#   bash scripts/pinned-venv.sh NAME VENV REQS SMOKE [PIP_SPEC...]
#
# PIP_SPEC... are installed (with their dependencies) before REQS; SMOKE is a shell command run with
# $PY set to the venv's python, which must succeed. Idempotent: the venv keeps a stamp holding the
# sha256 of PIP_SPEC... and REQS; a current venv is left alone, a stale or half-built one is rebuilt from
# scratch, and an interrupted or failed build leaves no venv that looks usable. Only PyPI (or the
# mirrors pip's config names) is contacted.
set -euo pipefail

name="$1" venv="$2" reqs="$3" smoke="$4"
shift 4
stamp_name=".pinned-venv-stamp"

fail() {
    echo "$name: $*" >&2
    rm -rf "$venv"
    exit 1
}

[ -f "$reqs" ] || { echo "$name: missing $reqs" >&2; exit 1; }
command -v python3 >/dev/null || { echo "$name: python3 not found" >&2; exit 1; }

want="$( { printf '%s\n' "$@"; cat "$reqs"; } | sha256sum | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/$stamp_name" 2>/dev/null)" = "$want" ]; then
    echo "$name env current: $venv (requirements sha256 ${want:0:12})"
    exit 0
fi

trap 'fail "interrupted"' INT TERM
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
if [ "$#" -gt 0 ]; then
    "${pip[@]}" install "$@" || fail "pip install $* failed"
fi
"${pip[@]}" install --no-deps -r "$reqs" || fail "pip install --no-deps -r $reqs failed"
PY="$venv/bin/python" bash -c "$smoke" >/dev/null 2>&1 || fail "smoke test failed: $smoke (with PY=$venv/bin/python)"
echo "$want" > "$venv/$stamp_name"
trap - INT TERM
echo "$name env ready: $venv ($(du -sh "$venv" | cut -f1))"
