#!/usr/bin/env bash
# Installs the real services the test suite runs (idempotent; does nothing when all are present):
#   docker-registry  CNCF distribution 2.8, started by tests/registry.py on loopback
#   openssl          signs the JWTs of the test token service (tests/registry.py)
#   chromium         loads `stackpin report`'s page headless (tests/test_bench_report.py)
#   skopeo           reads what `stackpin mirror` wrote, as an independent OCI reader (tests/test_mirror.py)
set -euo pipefail

missing=()
[ -x /usr/bin/docker-registry ] || command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The package may start a system-wide registry on :5000; the tests never use it (they pick free ports).
