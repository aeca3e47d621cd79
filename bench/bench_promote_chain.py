"""What verifying the whole chain costs a `promote` (issue 18): promote onto a history of 1 revision and
onto one of 1,000, side by side, in one process; the difference is the chain's cost.

Every promote verifies every revision before it writes (nothing is recorded on a broken chain). Files
verified before are found in the per-user cache by the sha256 of their bytes (stackpin/history/verified.py)
and not parsed again: that is the usual case, a user's second promote. The first promote on a machine
(a fresh CI runner) parses every file; it is printed too. With signatures required each revision's
signature is checked on every read, never cached.

Each sample promotes onto a fresh copy of the history (copied untimed). Medians; CPU time beside wall
time, and a row whose wall time is more than 1.5x its CPU time is marked invalid (the host did not keep up).

Run from the repository root: `python bench/bench_promote_chain.py [REPEATS]` (default 9).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from stackpin.history.model import Action, ActionKind, DeploymentKey, Revision, new_revision, revision_text
from stackpin.history.record import promote
from stackpin.history.signing import load_signing_key, signature_path
from stackpin.history.store import HistoryStore
from stackpin.lock.lockfile import read_lock
from stackpin.yamlio import create_exclusive

ROOT = Path(__file__).resolve().parent.parent
LOCK = read_lock(ROOT / "lockfiles" / "gb300-tuned.lock.yaml")
AUTHOR = "bench <bench@stackpin.dev>"
AIM_MS = 50.0


def build(root: Path, count: int, key_file: Path | None) -> DeploymentKey:
    locks = [read_lock(ROOT / "lockfiles" / f"{name}.lock.yaml") for name in ("gb300-launch", "gb300-tuned")]
    store, key = HistoryStore(root), DeploymentKey.of_lock(locks[0])
    store.directory(key).mkdir(parents=True)
    signer = load_signing_key(key_file) if key_file else None
    previous: Revision | None = None
    for number in range(1, count + 1):
        # Alternating stacks, the newest gb300-launch: promote refuses the stack the newest revision already has.
        revision = new_revision(key, number, locks[(count - number) % 2], created="2026-01-01T00:00:00Z", author=AUTHOR,
                                message=f"synthetic revision {number}", action=Action(kind=ActionKind.promote),
                                previous=previous)
        text = revision_text(revision)
        if signer:
            signature_path(store.path(key, number)).write_text(signer.sign(text.encode()))
        create_exclusive(store.path(key, number), text)
        previous = revision
    assert previous is not None
    store.write_head(key, previous)
    return key


def sample(template: Path, work: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one promote onto a fresh copy of `template`."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(template, work / "history")
    store = HistoryStore(work / "history", env={**os.environ, **env})
    wall, cpu = time.perf_counter(), time.process_time()
    promote(LOCK, "bench", store, work / "deployments", env={"STACKPIN_AUTHOR": AUTHOR,
                                                            "SOURCE_DATE_EPOCH": "1767225600"})
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def medians(runs: dict[str, Callable[[], tuple[float, float]]], repeats: int) -> dict[str, tuple[float, float]]:
    for run in runs.values():  # untimed: imports, validators, the page cache, the verified cache
        run()
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            got[name].append(run())
    return {name: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s)) for name, s in got.items()}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    with tempfile.TemporaryDirectory(prefix="bench-promote-") as tmp:
        work = Path(tmp)
        key_file = work / "signer"
        key = ed25519.Ed25519PrivateKey.generate()  # what `ssh-keygen -t ed25519` writes, without needing it
        key_file.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))
        public = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
        signers = work / "allowed_signers"
        signers.write_text(f"bench@stackpin.dev {public}\n")
        for size in (1, 1000):
            build(work / f"h{size}", size, None)
            build(work / f"s{size}", size, key_file)
        cache = {"STACKPIN_CACHE_DIR": str(work / "cache")}
        signed = {**cache, "STACKPIN_ALLOWED_SIGNERS": str(signers), "STACKPIN_SIGNING_KEY": str(key_file)}
        runs: dict[str, Callable[[], tuple[float, float]]] = {
            "onto 1 revision": lambda: sample(work / "h1", work / "w", cache),
            "onto 1,000 revisions": lambda: sample(work / "h1000", work / "w", cache),
            "onto 1 revision, signed": lambda: sample(work / "s1", work / "w", signed),
            "onto 1,000 revisions, signed": lambda: sample(work / "s1000", work / "w", signed),
        }
        warm = medians(runs, repeats)
        cold = medians({"onto 1,000 revisions, no cache (first promote on a machine)":
                        lambda: sample(work / "h1000", work / "w", {"STACKPIN_CACHE_DIR": ""})}, 3)
    one, thousand = warm["onto 1 revision"], warm["onto 1,000 revisions"]
    print(f"promote (library call, render included), median of {repeats} in turn; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    invalid = False
    for name, (wall, cpu) in {**warm, **cold}.items():
        bad = wall > 1.5 * cpu
        invalid |= bad and name in ("onto 1 revision", "onto 1,000 revisions")
        print(f"  {name:<60} wall {wall:7.1f} ms  cpu {cpu:7.1f} ms{'  INVALID: host did not keep up' if bad else ''}")
    added = thousand[0] - one[0]
    signed_added = warm["onto 1,000 revisions, signed"][0] - warm["onto 1 revision, signed"][0]
    print(f"  chain of 1,000 adds {added:.1f} ms ({signed_added:.1f} ms with signatures required)")
    if invalid:
        print(f"aim: verifying a 1,000-revision chain adds < {AIM_MS:.0f} ms to promote: not measured (host did not "
              "keep up)")
    else:
        print(f"aim: verifying a 1,000-revision chain adds < {AIM_MS:.0f} ms to promote: {added:.1f} ms, "
              f"{'met' if added < AIM_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
