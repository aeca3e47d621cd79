import atexit
import os
import shutil
import tempfile

pytest_plugins = ["tests.registry", "tests.kube"]

# stackpin caches revision files it verified in the user's cache directory (stackpin/history/verified.py):
# tests keep theirs in a directory of their own, on, as for a user (the cache is content-keyed, so every
# tamper test also runs against a filled cache). Subprocesses (and pytest-xdist's workers) inherit it; the
# process that made it removes it when it exits.
if "STACKPIN_CACHE_DIR" not in os.environ:
    os.environ["STACKPIN_CACHE_DIR"] = tempfile.mkdtemp(prefix="stackpin-test-cache-")
    atexit.register(shutil.rmtree, os.environ["STACKPIN_CACHE_DIR"], ignore_errors=True)

# A bench point whose client event loop ran late by --lag-limit (10 ms of the stack's time by default), or
# whose busiest client process used --busy-limit of a CPU (0.9), is invalid. Tests judge what the client
# and the commands do, against instant loopback servers, on hosts as busy as CI's: they measure with
# limits this host always holds, and tests/test_bench_validity.py sets its own.
os.environ.setdefault("STACKPIN_BENCH_LAG_LIMIT", "10s")
os.environ.setdefault("STACKPIN_BENCH_BUSY_LIMIT", "100")
