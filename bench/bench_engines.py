"""Extraction time per package: how long `stackpin engines add` takes to read a published release.

For each package: reading the archive (metadata, sha256, the .py sources below vllm/, dynamo/ or
flashinfer/) and extracting its catalog with `ast`, medians of in-process runs; then one whole
`stackpin engines add --from FILE` process for the largest. The published packages the shipped
catalogs come from are downloaded once into .bench/engines/ (ignored; the network test uses it too);
where the index cannot be reached they are left out and said so. The small packages the tests build
(devkit/enginepkgs.py) are always timed.

Run from the repository root: `python bench/bench_engines.py [REPEATS]` (default 3).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # devkit sits beside bench/, not inside the installed package

from devkit import enginepkgs  # noqa: E402
from devkit.timing import load_note  # noqa: E402
from stackpin.engines.add import extract  # noqa: E402
from stackpin.engines.index import default_index, fetch  # noqa: E402
from stackpin.engines.package import read_package  # noqa: E402
from stackpin.errors import StackpinError  # noqa: E402

CACHE = ROOT / ".bench" / "engines"
PUBLISHED = [("vllm", "0.28.0"), ("vllm", "0.31.0"), ("vllm", "0.33.0"), ("ai-dynamo", "1.5.1"),
             ("ai-dynamo", "1.6.0"), ("ai-dynamo", "1.6.1"), ("flashinfer-python", "0.6.16.post3"),
             ("flashinfer-python", "0.7.0.post1"), ("flashinfer-python", "0.7.2.post1")]
AIM_S = 5.0  # read + extract of vLLM's 47 MB sdist


def median_s(call: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    samples, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def published() -> tuple[list[Path], list[str]]:
    CACHE.mkdir(parents=True, exist_ok=True)
    found, missing = [], []
    for project, version in PUBLISHED:
        try:
            found.append(fetch(project, version, default_index(), CACHE))
        except StackpinError as exc:
            # Offline: a file downloaded before is still the published one (its sha256 is in the catalog).
            stem = project.replace("-", "_")
            cached = sorted(CACHE.glob(f"{stem}-{version}.tar.gz")) + sorted(CACHE.glob(f"{stem}-{version}-*.whl"))
            if cached:
                found.append(cached[0])
            else:
                missing.append(f"{project}=={version} ({exc.message})")
    return found, missing


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    files, missing = published()
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        work = Path(tmp)
        small = [enginepkgs.vllm_sdist(work), enginepkgs.vllm_wheel(work), enginepkgs.dynamo_wheel(work),
                 enginepkgs.flashinfer_wheel(work)]
        print(f"engines add, per package: read (archive, sha256, sources) and extract (ast), median of {repeats} "
              f"in-process runs; {load_note()}")
        print(f"  {'package':<62} {'MB':>6} {'.py read':>9} {'read':>8} {'extract':>9} {'total':>8}")
        vllm_total = None
        for path in [*files, *small]:
            read_s, package = median_s(lambda p=path: read_package(p), repeats)
            extract_s, _ = median_s(lambda p=package: extract(p), repeats)
            label = path.name + ("  (test-built)" if path.parent == work else "")
            print(f"  {label:<62} {path.stat().st_size / 1e6:>6.1f} {len(package.files):>9,} "
                  f"{read_s * 1000:>6.0f}ms {extract_s * 1000:>7.0f}ms {(read_s + extract_s) * 1000:>6.0f}ms")
            if path.name == "vllm-0.33.0.tar.gz":
                vllm_total = read_s + extract_s
        for item in missing:
            print(f"  not timed, the index did not give it: {item}")
        headline = [p for p in files if p.name == "vllm-0.33.0.tar.gz"] or small[:1]
        biggest = headline[0]
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "stackpin", "engines", "add", "--from", str(biggest), "--catalog",
                        str(work / "catalog")], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        print(f"  whole process: stackpin engines add --from {biggest.name}: {time.perf_counter() - start:.2f} s")
    if vllm_total is None:
        print("aim: vLLM 0.33.0 sdist read and extracted in under 5 s: not measured (no download)")
    else:
        verdict = "met" if vllm_total <= AIM_S else "NOT met"
        print(f"aim: vLLM 0.33.0 sdist read and extracted in under {AIM_S:.0f} s: {vllm_total:.2f} s: {verdict}")


if __name__ == "__main__":
    main()
