"""Rules for the identifiers a profile hands to other systems: Hugging Face model ids and revisions,
OCI image references, environment variable names. Each is checked where it enters (the profile
model), so nothing downstream (a cache path, a URL, a container env) ever sees a hostile string.
Python's `re.fullmatch` throughout: `$` would accept a trailing line break, `\\d` non-ASCII digits."""

from __future__ import annotations

import re

# huggingface_hub `validate_repo_id`: [org/]name, each part 1-96 of [A-Za-z0-9_.-], no '--' or
# '..', not starting or ending with '-' or '.'.
_REPO_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
# A branch, tag, `refs/pr/N` or commit: git ref characters only, no '..', no empty path component.
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
# An image reference as the distribution spec spells one: registry/path:tag@digest characters only.
_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
# Kubernetes EnvVar.name (C identifier, relaxed by Kubernetes 1.30+ to these characters).
_ENV_NAME = re.compile(r"[-._A-Za-z][-._A-Za-z0-9]*")


def model_id_problem(value: str) -> str | None:
    parts = value.split("/")
    if len(parts) > 2 or not all(_REPO_PART.fullmatch(p) for p in parts) or "--" in value or ".." in value:
        return ("is not a Hugging Face model id ([org/]name: letters, digits, '_', '.', '-'; no '--' or '..'; "
                "96 characters a part at most)")
    return None


def revision_problem(value: str) -> str | None:
    if len(value) > 255 or not _REVISION.fullmatch(value) or ".." in value or value.endswith(".lock"):
        return "is not a branch, tag or commit (letters, digits, '_', '.', '-', '/'; no '..' or empty part)"
    return None


def image_ref_problem(value: str) -> str | None:
    if len(value) > 1024 or not _IMAGE_REF.fullmatch(value):
        return "is not an image reference (registry/repository[:tag][@digest], no spaces or line breaks)"
    return None


def env_name_problem(value: str) -> str | None:
    if not _ENV_NAME.fullmatch(value):
        return "is not a valid environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)"
    return None
