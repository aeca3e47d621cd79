"""Canonical JSON: the one encoding stackpin hashes and emits, so equal data always gives equal bytes.

The stack digest, every OCI manifest, config and index stackpin writes, and the JSON arguments of
rendered engine command lines all use it: sorted keys, no whitespace, UTF-8 as is (no \\u escapes).
"""

from __future__ import annotations

import json
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """JSON with sorted keys and no whitespace, as UTF-8 bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
