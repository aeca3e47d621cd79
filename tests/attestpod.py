"""An attestation init container's view in DIR, for docs/engine-args.md's runnable block: what
tests/test_attestation.py builds, with the demo's stand-in autotune cache.

    python -m tests.attestpod DIR [--installed DIST=VERSION]... [--cuda VERSION] [--gpu NAME]

DIR gets the rendered gb300-tuned ConfigMap's attest.py and expected.json (its cache directory made
`flashinfer-autotune`, relative to DIR), that directory holding the demo mirror's stand-in cache as the seed
copies it (stackpin.demo.mirror's tree, the part under flashinfer's version and the GPU's arch), a
site-packages with the four locked distributions' metadata and a FlashInfer stand-in reporting the
environment that cache records, and bin/ with an nvidia-smi printing four GPU names and a python3 that runs
this interpreter with -S, PYTHONPATH=site-packages and PATH=bin:/usr/bin:/bin (a runtime image's Python
sees only its own packages). `--installed` changes an installed version, `--cuda` the cache file's CUDA,
`--gpu` the GPUs' name. DIR's earlier pod is replaced.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path


def build(directory: Path, installed: dict[str, str], cuda: str | None, gpu: str) -> None:
    from stackpin.demo.mirror import write_stand_in_cache
    from stackpin.profile.loader import load_profile
    from tests.test_attestation import FLASHINFER_STAND_IN, LOCKED, RUNTIME, _config_map, _nvidia_smi, _rendered, _site

    directory = directory.resolve()
    for old in ("site-packages", "bin", "flashinfer-autotune"):
        shutil.rmtree(directory / old, ignore_errors=True)
    cm = _config_map(_rendered("gb300-tuned"))
    (directory / "attest.py").write_text(cm["data"]["attest.py"])
    expected = json.loads(cm["data"]["expected.json"])
    expected["autotuneCache"]["dir"] = "flashinfer-autotune"
    (directory / "expected.json").write_text(json.dumps(expected))

    root = Path(__file__).resolve().parent.parent
    profile = load_profile(root / "profiles/deepseek-v4.1-flash/gb300-tuned.yaml").profile
    with tempfile.TemporaryDirectory() as tmp:
        write_stand_in_cache(Path(tmp), profile)
        [base] = {p.parent.parent for p in Path(tmp).rglob("*.json")}  # .../<version>/<arch>/<hash>/<file>
        shutil.copytree(base, directory / "flashinfer-autotune")
    files = sorted((directory / "flashinfer-autotune").rglob("*.json"))
    meta = json.loads(files[0].read_text())["_metadata"]
    if cuda is not None:
        for path in files:
            doc = json.loads(path.read_text())
            doc["_metadata"]["cuda_version"] = cuda
            path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")

    site = _site(directory, {**LOCKED, **installed})
    stand_in = site / "flashinfer" / "autotuner" / "autotuner.py"
    stand_in.write_text(FLASHINFER_STAND_IN.replace(repr(RUNTIME), repr(meta)))
    bin_dir = _nvidia_smi(directory, [gpu] * 4)
    python3 = bin_dir / "python3"
    python3.write_text(f"#!/bin/sh\nexec env -i PYTHONPATH='{site}' PATH='{bin_dir}:/usr/bin:/bin' LC_ALL=C.UTF-8 "
                       f"'{sys.executable}' -S \"$@\"\n")
    python3.chmod(0o755)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.attestpod")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--installed", action="append", default=[], metavar="DIST=VERSION")
    parser.add_argument("--cuda")
    parser.add_argument("--gpu", default="NVIDIA GB300")
    args = parser.parse_args(argv)
    build(args.dir, dict(item.split("=", 1) for item in args.installed), args.cuda, args.gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
