"""OCI distribution: one module per concern, none importing httpx at import time.

- `reference`: image reference grammar (`ImageRef`, digests) and registry mirrors;
- `media`: media types, digests, descriptors, manifests and the platforms and annotations they name;
- `credentials`: registry credentials as docker, crane and skopeo find them (files, credential helpers);
- `auth`: the registry's 401 challenge answered (Basic, or the Bearer token handshake);
- `client`: `RegistryClient`, resolution and blob/manifest push and pull over HTTP.

Every manifest and blob fetched is checked against the sha256 digest that names it; a mismatch is an
`IntegrityError`. Every other failure a user can hit (unknown tag, credentials, network) is a one-line
`ResolveError`; no httpx exception escapes.
"""
