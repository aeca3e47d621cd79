"""Answering a registry's 401: its WWW-Authenticate challenge, Basic credentials, or the Bearer token
handshake with the token service the challenge names."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stackpin.errors import ResolveError
from stackpin.lock.oci.reference import ImageRef

if TYPE_CHECKING:
    import httpx


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


def authorization(ref: ImageRef, challenge: str, scope: str, creds: tuple[str, str] | None,
                  send: Callable[..., httpx.Response], unauthorized: Callable[[], ResolveError]) -> str | None:
    """The Authorization header value answering a 401 `challenge` for `scope`, or None if we have
    nothing to answer with. `send(method, url, where, **kwargs)` makes the token request (with the
    client's retries and deadlines); `unauthorized()` is the error a refused token request raises."""
    import httpx

    scheme, params = parse_challenge(challenge)
    if scheme == "basic":
        if not creds:
            return None
        return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
    if scheme != "bearer":
        return None
    realm = params.get("realm")
    if not realm or "://" not in realm:
        raise ResolveError(f"registry {ref.registry} sent a Bearer challenge without a realm URL")
    query = [("scope", s) for s in (params.get("scope") or scope).split()]
    if "service" in params:
        query.append(("service", params["service"]))
    try:
        realm_host = httpx.URL(realm).netloc.decode()
    except httpx.InvalidURL:
        raise ResolveError(f"registry {ref.registry} sent an invalid token realm {realm!r}") from None
    resp = send("GET", realm, f"token service {realm_host}", params=query, auth=creds or None)
    if resp.status_code in (401, 403):
        raise unauthorized()
    if resp.status_code != 200:
        raise ResolveError(f"token service {realm_host} for registry {ref.registry} answered HTTP {resp.status_code}")
    try:
        body: Any = resp.json()
        token = body.get("token") or body.get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or not token:
        raise ResolveError(f"token service {realm_host} answered without a token")
    return f"Bearer {token}"
