"""Answering a registry's 401: its WWW-Authenticate challenge, Basic credentials, or the Bearer token
handshake with the token service the challenge names.

The handshake is go-containerregistry's (`transport/bearer.go`) and docker's: with an identity token, the
OAuth2 refresh_token grant (distribution's docs/spec/auth/oauth.md: a form POST of grant_type,
refresh_token, service, scope and client_id to the realm), falling back to the plain GET when the token
service has no OAuth2 endpoint (404); otherwise the GET of distribution's token spec, with Basic
credentials when there are any."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import stackpin.jsonio as jsonio
from stackpin.errors import ResolveError
from stackpin.lock.oci.credentials import Credential
from stackpin.lock.oci.reference import ImageRef

if TYPE_CHECKING:
    import httpx

CLIENT_ID = "stackpin"  # the OAuth2 client_id the spec requires: any meaningful name, for the server's audit


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


def authorization(ref: ImageRef, challenge: str, scope: str, creds: Credential | None,
                  send: Callable[..., httpx.Response], unauthorized: Callable[[], ResolveError]) -> str | None:
    """The Authorization header value answering a 401 `challenge` for `scope`, or None if we have
    nothing to answer with. `send(method, url, where, **kwargs)` makes the token request (with the
    client's retries and deadlines); `unauthorized()` is the error a refused token request raises."""
    import httpx

    scheme, params = parse_challenge(challenge)
    basic = creds.basic if creds else None
    if scheme == "basic":
        if not basic:
            return None
        return "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
    if scheme != "bearer":
        return None
    realm = params.get("realm")
    if not realm or "://" not in realm:
        raise ResolveError(f"registry {ref.registry} sent a Bearer challenge without a realm URL")
    scopes = (params.get("scope") or scope).split()
    try:
        realm_host = httpx.URL(realm).netloc.decode()
    except httpx.InvalidURL:
        raise ResolveError(f"registry {ref.registry} sent an invalid token realm {realm!r}") from None
    where = f"token service {realm_host}"
    resp, posted = None, False
    if creds and creds.identity_token:
        form = {"grant_type": "refresh_token", "refresh_token": creds.identity_token, "client_id": CLIENT_ID,
                "scope": " ".join(scopes)}
        if "service" in params:
            form["service"] = params["service"]
        resp, posted = send("POST", realm, where, data=form), True
        if resp.status_code == 404:  # no OAuth2 endpoint: the spec's GET, as go-containerregistry falls back
            resp, posted = None, False
    if resp is None:
        query = [("scope", s) for s in scopes]
        if "service" in params:
            query.append(("service", params["service"]))
        resp = send("GET", realm, where, params=query, auth=basic)
    if resp.status_code in (401, 403) or (posted and resp.status_code == 400):  # 400: OAuth2's invalid_grant
        raise unauthorized()
    if resp.status_code != 200:
        raise ResolveError(f"token service {realm_host} for registry {ref.registry} answered HTTP {resp.status_code}")
    try:
        body: Any = jsonio.loads(resp.content)
        token = body.get("token") or body.get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or not token:
        raise ResolveError(f"token service {realm_host} answered without a token")
    return f"Bearer {token}"
