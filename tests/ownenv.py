"""The environments of their own some tests run in (`make engine-env`, `make dynamo-env`): present, or the
test skips saying why (the build's reason, kept in DIR/UNAVAILABLE), or fails where CI requires it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def own_env(python: Path, unavailable: Path, what: str, target: str, require: str) -> Path:
    """`python` when it is there; else skip (or fail when $`require` is set) with the reason."""
    if python.is_file():
        return python
    why = unavailable.read_text().strip() if unavailable.is_file() else f"run `make {target}`"
    message = f"no {what} environment at {python.parent.parent}: {why}"
    if os.environ.get(require):
        pytest.fail(message)
    pytest.skip(message)
