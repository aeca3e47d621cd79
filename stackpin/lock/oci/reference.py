"""Image references (`registry/repository[:tag][@sha256:...]`), their grammar, and registry mirrors."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from stackpin.errors import ResolveError

DOCKER_HUB = "docker.io"
# Docker Hub's API lives on a different host than the name users write.
DOCKER_HUB_API = "registry-1.docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

_DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")


def check_digest(digest: str, context: str) -> str:
    """`digest` if it is a well-formed sha256 digest (the only algorithm supported), else a ResolveError."""
    if not _DIGEST_RE.fullmatch(digest):
        raise ResolveError(f"invalid digest {digest!r} in {context}: expected 'sha256:' and 64 lowercase hex digits")
    return digest


def normalize_registry(host: str) -> str:
    """docker.io's aliases as one name."""
    return DOCKER_HUB if host.lower() in _HUB_ALIASES else host


@dataclass(frozen=True)
class ImageRef:
    """A fully qualified image reference: `registry/repository[:tag][@digest]`."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Parse like docker does: `nginx` is `docker.io/library/nginx:latest`; the first path
        component is a registry only if it has a `.` or `:`, is `localhost`, or has upper case."""
        where = f"image reference {text!r}"
        if not text or text != text.strip():
            raise ResolveError(f"invalid {where}: empty or surrounded by whitespace")
        name, at, digest = text.partition("@")
        if at:
            check_digest(digest, where)
        tag = None
        # A ':' after the last '/' starts the tag; one before it belongs to host:port.
        colon = name.rfind(":")
        if colon > name.rfind("/"):
            name, tag = name[:colon], name[colon + 1 :]
            if not _TAG_RE.fullmatch(tag):
                raise ResolveError(
                    f"invalid {where}: tag {tag!r} must be 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'"
                )
        first, slash, rest = name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
            registry, repository = normalize_registry(first), rest
        else:
            registry, repository = DOCKER_HUB, name
        if not _HOST_RE.fullmatch(registry):
            raise ResolveError(f"invalid {where}: registry {registry!r} is not host[:port]")
        if registry == DOCKER_HUB and "/" not in repository:
            repository = f"library/{repository}"
        for component in repository.split("/"):
            if not _COMPONENT_RE.fullmatch(component):
                raise ResolveError(
                    f"invalid {where}: repository component {component!r} must be lowercase "
                    "letters and digits separated by '.', '_', '__' or '-'"
                )
        if len(registry) + 1 + len(repository) > 255:
            raise ResolveError(f"invalid {where}: name longer than 255 characters")
        if tag is None and not at:
            tag = "latest"
        return cls(registry, repository, tag, digest if at else None)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    @property
    def name(self) -> str:
        """`registry/repository`, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What goes after `/manifests/` in the API: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    def with_digest(self, digest: str) -> ImageRef:
        return replace(self, digest=check_digest(digest, f"pin for {self}"))


def as_image_ref(ref: ImageRef | str) -> ImageRef:
    """Accept either form wherever a reference is expected."""
    return ref if isinstance(ref, ImageRef) else ImageRef.parse(ref)


def mirror_for(registry: str, mirrors: Mapping[str, str]) -> str | None:
    """The mirror configured for `registry` (keys like `index.docker.io` count as `docker.io`)."""
    for key, value in mirrors.items():
        if normalize_registry(key) == registry:
            return value
    return None


def apply_mirror(ref: ImageRef, mirrors: Mapping[str, str]) -> ImageRef:
    """Where to fetch `ref` from: a mirror value `host[:port][/path/prefix]` replaces the registry
    and prefixes the repository. Refs of registries without a mirror come back unchanged."""
    mirror = mirror_for(ref.registry, mirrors)
    if mirror is None:
        return ref
    host, _, prefix = mirror.strip("/").partition("/")
    bad_prefix = prefix and not all(_COMPONENT_RE.fullmatch(c) for c in prefix.split("/"))
    if "://" in mirror or not _HOST_RE.fullmatch(host) or bad_prefix:
        raise ResolveError(
            f"invalid mirror {mirror!r} for {ref.registry}: expected host[:port][/path/prefix] without a scheme"
        )
    repository = f"{prefix}/{ref.repository}" if prefix else ref.repository
    return replace(ref, registry=host, repository=repository)


def hostname(registry: str) -> str:
    if registry.startswith("["):
        return registry[1 : registry.find("]")]
    return registry.rsplit(":", 1)[0]


def is_loopback(registry: str) -> bool:
    return is_loopback_host(hostname(registry))


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address (IPv6 without brackets)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
