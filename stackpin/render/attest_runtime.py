"""stackpin runtime attestation: is this pod about to run the stack its lock pins?

Shipped by `stackpin render` in each stack's attestation ConfigMap and run by every worker's init
container with the runtime image's own Python, before the engine starts. stackpin never imports it: it
uses the standard library only, so that it runs in any image.

    python3 attest.py EXPECTED_JSON

EXPECTED_JSON (rendered from the lock) names the deployment, the versions of the engine packages,
the autotune cache directory with the sha256 of every file in it (when the lock records them), and
the GPU model of the rack (one name, or the names a site measured). Checked: the installed distributions
(importlib.metadata of this Python), every file of the mounted cache, and the GPU names `nvidia-smi`
reports (when it is on PATH). A GPU name that is only the catalog's estimate (`gpuCheck: log`) fails no
pod: a different name is written to stderr as an `attestation note:` line and the pod passes.

Exit 0 with one line `attested sha256:<digest of EXPECTED_JSON> (<deployment>): ...` (the digest
`stackpin render` records on the ConfigMap, beside the stack digest); exit 1 with one line
`attestation failed ...`
that names every difference (also written to the container's termination log, so `kubectl describe
pod` shows it); exit 2 when EXPECTED_JSON cannot be read.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

TERMINATION_LOG = "/dev/termination-log"
NVIDIA_SMI_TIMEOUT_S = 60


def installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_packages(packages: dict[str, str]) -> tuple[list[str], list[str]]:
    """(differences, what matched) for distribution -> locked version."""
    diffs, ok = [], []
    for dist, want in sorted(packages.items()):
        have = installed(dist)
        if have is None:
            diffs.append(f"{dist} is not installed (the lock pins {want})")
        elif have != want:
            diffs.append(f"{dist} {have} is installed, the lock pins {want}")
        else:
            ok.append(f"{dist} {have}")
    return diffs, ok


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_cache(cache: dict[str, Any] | None) -> tuple[list[str], str]:
    """(differences, summary) of the mounted autotune cache against the lock's per-file digests."""
    if cache is None:
        return [], "no autotune cache"
    root = cache["dir"]
    files: dict[str, str] | None = cache.get("files")
    if not os.path.isdir(root):
        return [f"autotune cache {root} is not mounted"], ""
    if files is None:
        # An older lock records only the cache image's digest, which the container runtime checked when
        # it pulled the image volume; there is nothing per file to compare here.
        return [], "autotune cache mounted (the lock records no per-file digests)"
    found = {}
    for top, dirs, names in os.walk(root):
        dirs.sort()
        for name in names:
            full = os.path.join(top, name)
            found[os.path.relpath(full, root).replace(os.sep, "/")] = full
    diffs = [f"autotune cache file {rel} is missing" for rel in sorted(set(files) - set(found))]
    diffs += [f"autotune cache file {rel} differs from the locked digest" for rel in sorted(set(files) & set(found))
              if sha256_file(found[rel]) != files[rel]]
    diffs += [f"autotune cache file {rel} is not in the lock" for rel in sorted(set(found) - set(files))]
    # vLLM writes into each config-hash directory at start-up (a temp file, then a rename) and crashes
    # when it cannot: the directory it reads must be writable by the engine's user.
    for directory in sorted({os.path.dirname(found[rel]) for rel in found} | {root}):
        if not os.access(directory, os.W_OK | os.X_OK):
            diffs.append(f"autotune cache directory {directory} is not writable; vLLM writes there at start-up")
    return diffs, f"autotune cache {len(files)} file(s)"


def check_flashinfer_accepts(cache: dict[str, Any] | None) -> tuple[list[str], str]:
    """Every cache file through FlashInfer's own load rule, in this image, on this pod's GPUs: its
    `_collect_metadata()` is the runtime, `_classify_metadata_mismatches` the verdict load_configs acts on
    (a mismatch: the configs are ignored and every rank retunes), and `_records` must be a JSON object
    (load_configs raises otherwise, and vLLM does not catch it). Imported by name at run time: the runtime
    image carries FlashInfer; this script itself needs only the standard library."""
    if cache is None or not os.path.isdir(cache["dir"]):
        return [], ""
    try:
        tuner = importlib.import_module("flashinfer.autotuner.autotuner")
        current = tuner._collect_metadata()
        classify = tuner._classify_metadata_mismatches
    except Exception as exc:  # noqa: BLE001 -- any failure means the check could not run
        return [f"FlashInfer's autotuner cannot be loaded to check the cache ({type(exc).__name__}: {exc})"], ""
    diffs, count = [], 0
    for top, dirs, names in os.walk(cache["dir"]):
        dirs.sort()
        for name in sorted(n for n in names if n.endswith(".json")):
            rel = os.path.relpath(os.path.join(top, name), cache["dir"])
            try:
                with open(os.path.join(top, name), "rb") as fh:
                    doc = json.loads(fh.read().decode("utf-8"))
            except (OSError, ValueError) as exc:
                diffs.append(f"autotune cache file {rel} cannot be read as JSON ({exc})")
                continue
            if not isinstance(doc, dict) or not isinstance(doc.get("_records", {}), dict):
                diffs.append(f"autotune cache file {rel}: FlashInfer's load_configs raises on it")
                continue
            hard, soft = classify(doc.get("_metadata"), current)
            wrong = {**soft, **hard}
            if wrong:
                shown = ", ".join(f"{k} saved {v[0]!r} vs {v[1]!r} here" for k, v in sorted(wrong.items()))
                diffs.append(f"FlashInfer ignores autotune cache file {rel}: {shown}")
            count += 1
    return diffs, f"FlashInfer accepts {count} cache file(s)"


def check_gpu(want: str | list[str] | None, check: str = "enforce") -> tuple[list[str], str]:
    """(differences, summary) of the GPUs nvidia-smi reports against the rack's GPU model: one name, or the
    names a site measured. With `check` "log" the name is only the catalog's estimate: a different one is
    said on stderr and the pod passes (an unconfirmed fact fails no pod)."""
    smi = shutil.which("nvidia-smi")
    if not want or smi is None:
        return [], "GPU not checked (no nvidia-smi)" if want else "GPU not checked"
    wanted = [want] if isinstance(want, str) else list(want)
    try:
        run = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"nvidia-smi could not run ({exc})"], ""
    if run.returncode != 0:
        why = (run.stderr or run.stdout).strip().splitlines()
        return [f"nvidia-smi failed (exit {run.returncode}{': ' + why[0] if why else ''})"], ""
    names = [line.strip() for line in run.stdout.splitlines() if line.strip()]
    if not names:
        return ["nvidia-smi reports no GPU"], ""
    other = sorted(set(names) - set(wanted))
    shown = " or ".join(wanted)
    if other and check == "log":
        print(f"attestation note: GPU {', '.join(other)} is not {shown}, the catalog's unconfirmed name for the "
              "rack's GPU; not failed (measure it: stackpin site probe)", file=sys.stderr, flush=True)
        return [], f"GPU {len(names)}x {', '.join(sorted(set(names)))} (the catalog's {shown} unconfirmed)"
    if other:
        return [f"GPU {', '.join(other)} is not the rack's {shown}"], ""
    return [], f"GPU {len(names)}x {', '.join(sorted(set(names)))}"


def attest(expected: dict[str, Any], digest: str) -> tuple[bool, str]:
    """(passed, the one line to print); `digest` is the expectation file's sha256."""
    diffs, ok = check_packages(expected["packages"])
    cache = expected.get("autotuneCache")
    gpu = check_gpu(expected.get("gpu"), expected.get("gpuCheck", "enforce"))
    for found, summary in (check_cache(cache), check_flashinfer_accepts(cache), gpu):
        diffs += found
        if summary:
            ok.append(summary)
    stack = f"sha256:{digest} ({expected['deployment']})"
    if diffs:
        return False, f"attestation failed for {stack}: " + "; ".join(diffs)
    return True, f"attested {stack}: " + ", ".join(ok)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: attest.py EXPECTED_JSON", file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as fh:
            raw = fh.read()
        passed, line = attest(json.loads(raw.decode("utf-8")), hashlib.sha256(raw).hexdigest())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"attestation failed: {argv[1]} is not a readable expectation ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 2
    print(line, file=sys.stdout if passed else sys.stderr, flush=True)
    if not passed and os.access(TERMINATION_LOG, os.W_OK):
        with open(TERMINATION_LOG, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
