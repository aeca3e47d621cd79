import os
import tempfile

pytest_plugins = ["tests.registry", "tests.kube"]

# stackpin caches revision files it verified in the user's cache directory (stackpin/history/verified.py):
# tests keep theirs in a directory of their own, on, as for a user (the cache is content-keyed, so every
# tamper test also runs against a filled cache). Subprocesses inherit it.
os.environ.setdefault("STACKPIN_CACHE_DIR", tempfile.mkdtemp(prefix="stackpin-test-cache-"))
