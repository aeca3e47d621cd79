"""Kubernetes naming rules stackpin checks before anything reaches an API server."""

from __future__ import annotations

import re

# RFC 1123 names as Kubernetes apimachinery checks them (IsDNS1123Label, IsDNS1123Subdomain): the one
# spelling of the rule, shared by the profile model, label checks and manifest validation.
DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_PATTERN = rf"^{DNS_LABEL}$"
DNS_SUBDOMAIN_PATTERN = rf"^{DNS_LABEL}(\.{DNS_LABEL})*$"
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)

# On every object of a lock with stand-in pins (a demo mirror's): the label selects them (render, status), the
# annotation of the same name says which pins.
STAND_IN_LABEL = "stackpin.dev/stand-in"
# Labels `stackpin render` sets on every object; a profile may not set them itself.
RENDERED_LABELS = frozenset({
    "app.kubernetes.io/name", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component", "stackpin.dev/profile", "stackpin.dev/stack-digest", STAND_IN_LABEL,
})


def label_problems(labels: dict[str, str]) -> list[str]:
    """Why each key or value is not a valid Kubernetes label (empty when all are)."""
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if not (0 < len(name) <= 63 and _LABEL_NAME.match(name)) or (
                prefix and not (len(prefix) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.match(prefix))):
            problems.append(f"{key[:80]!r} is not a valid Kubernetes label key")
        if value and not (len(value) <= 63 and _LABEL_NAME.match(value)):
            problems.append(f"{key[:80]}: {value[:80]!r} is not a valid Kubernetes label value "
                            "(63 characters at most: alphanumerics, '-', '_', '.', alphanumeric at both ends)")
    return problems
