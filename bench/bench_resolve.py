"""Resolving 200 image references against a real local registry: concurrently (what `stackpin lock`
does) versus one at a time (what a shell loop over `crane digest` or `skopeo inspect` does).

Starts Debian's docker-registry on loopback (scripts/install-test-services.sh installs it), and
measures it twice: directly (no network latency: both sides compete for this machine's CPUs) and
through bench/latency_proxy.py adding 20 ms per request, as a registry across a WAN would.
Run from the repository root: `python bench/bench_resolve.py [N_REFS] [REPEATS]`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.process import free_port  # noqa: E402
from devkit.registry import start_registry  # noqa: E402
from stackpin.lock.oci.client import RegistryClient  # noqa: E402
from stackpin.lock.oci.media import OCI_INDEX  # noqa: E402
from stackpin.lock.oci.reference import ImageRef  # noqa: E402
from stackpin.lock.ocilayout import LayoutResolver, LayoutWriter, push_layout_to_registry  # noqa: E402

WORKERS = 16
WAN_DELAY_MS = 20


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory() as tmp, start_registry(Path(tmp)) as (host, _):
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
            rows = [("loopback", *_measure(client, refs, mirrors, repeats))]
            port = free_port()
            proxy = subprocess.Popen([sys.executable, str(ROOT / "bench/latency_proxy.py"), str(port), host,
                                      str(WAN_DELAY_MS)], stdout=subprocess.PIPE, text=True)
            try:
                proxy.stdout.readline()  # "ready"
                wan = {"nvcr.io": f"127.0.0.1:{port}/bench"}
                rows.append((f"+{WAN_DELAY_MS} ms per request", *_measure(client, refs, wan, repeats)))
            finally:
                proxy.terminate()
                proxy.wait()
    print(f"resolve {n} references against a local docker-registry, median of {repeats}")
    print(f"  {'path':<22} {'one at a time':>14} {f'concurrent ({WORKERS})':>16} {'speed-up':>9}")
    for name, seq, con in rows:
        print(f"  {name:<22} {seq * 1000:11.1f} ms {con * 1000:13.1f} ms {seq / con:8.2f}x")


def _measure(client: RegistryClient, refs: list[ImageRef], mirrors: dict[str, str],
             repeats: int) -> tuple[float, float]:
    client.resolve_many(refs[:WORKERS], mirrors, max_workers=WORKERS)  # warm the connection pool
    sequential, concurrent = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for ref in refs:
            client.resolve(ref, mirrors)
        sequential.append(time.perf_counter() - start)
        start = time.perf_counter()
        client.resolve_many(refs, mirrors, max_workers=WORKERS)
        concurrent.append(time.perf_counter() - start)
    return statistics.median(sequential), statistics.median(concurrent)

if __name__ == "__main__":
    main()
