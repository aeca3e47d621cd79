"""Registry credentials from a docker config.json (inline ones only)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from stackpin.errors import ResolveError
from stackpin.lock.oci.reference import normalize_registry


def default_docker_config() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def _auth_key(key: str) -> str:
    """`https://index.docker.io/v1/` and `docker.io` name the same registry in config.json."""
    host = key.split("://", 1)[-1].split("/", 1)[0]
    return normalize_registry(host)


def load_docker_credentials(path: Path) -> dict[str, tuple[str, str]]:
    """registry -> (user, password) from `auths` in a docker config.json. Only inline credentials
    (`auth` = base64 "user:pass", or `username`/`password`) are read: credential helpers
    (`credsStore`, `credHelpers`) and `identitytoken` are not supported. A missing file means none."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ResolveError(f"cannot read docker config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ResolveError(f"docker config {path} is not valid JSON: {exc}") from None
    auths = doc.get("auths") if isinstance(doc, dict) else None
    creds: dict[str, tuple[str, str]] = {}
    for key, entry in (auths if isinstance(auths, dict) else {}).items():
        if not isinstance(entry, dict):
            continue
        user, password = entry.get("username"), entry.get("password")
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except ValueError:
                raise ResolveError(f"docker config {path}: auths.{key}.auth is not base64 of 'user:password'") from None
        if user and password is not None:
            creds[_auth_key(key)] = (user, password)
    return creds
