"""Resolving 200 image references against a real local registry: concurrently (what `stackpin lock`
does) versus one at a time (what a shell loop over `crane digest` or `skopeo inspect` does).

Starts Debian's docker-registry on loopback (scripts/install-test-services.sh installs it).
Run from the repository root: `python bench/bench_resolve.py [N_REFS] [REPEATS]`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stackpin.oci import OCI_INDEX, ImageRef, RegistryClient  # noqa: E402
from stackpin.ocilayout import LayoutResolver, LayoutWriter, push_layout_to_registry  # noqa: E402
from tests.registry import _start  # noqa: E402  (the test suite's registry launcher)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory() as tmp, _start(Path(tmp), None) as (host, _):
        base = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:bench"
        LayoutWriter(Path(tmp) / "oci").add_image(base, [("linux", "arm64"), ("linux", "amd64")])
        mirrors = {"nvcr.io": f"{host}/bench"}
        with RegistryClient() as client:
            push_layout_to_registry(Path(tmp) / "oci", client, mirrors)
            index = LayoutResolver(Path(tmp) / "oci").resolve(base)
            data = LayoutResolver(Path(tmp) / "oci").read_blob(index.digest)
            refs = [ImageRef.parse(f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:t{i}") for i in range(n)]
            for ref in refs:
                client.push_manifest(ImageRef(host, f"bench/{ref.repository}", ref.tag), data, OCI_INDEX)
            client.resolve_many(refs[:8], mirrors)  # warm the connection pool
            sequential, concurrent = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                for ref in refs:
                    client.resolve(ref, mirrors)
                sequential.append(time.perf_counter() - start)
                start = time.perf_counter()
                resolved = client.resolve_many(refs, mirrors, max_workers=16)
                concurrent.append(time.perf_counter() - start)
            assert all(r.digest == index.digest for r in resolved)
    seq, con = statistics.median(sequential), statistics.median(concurrent)
    print(f"resolve {n} references against a local registry (median of {repeats})")
    print(f"  one at a time              {seq * 1000:8.1f} ms  ({seq / n * 1000:.2f} ms/ref)")
    print(f"  concurrent (16 workers)    {con * 1000:8.1f} ms  ({con / n * 1000:.2f} ms/ref)")
    print(f"  speed-up                   {seq / con:8.2f}x")


if __name__ == "__main__":
    main()
