"""Who made a revision and when, the way reproducible builds and git answer it.

Time: `SOURCE_DATE_EPOCH` when set (the reproducible-builds.org convention, so `make demo` writes the
same bytes on every run), else the clock; always UTC, to the second. Author: `STACKPIN_AUTHOR`, else
git's `user.name` / `user.email` where the history lives, else the operating-system user.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from stackpin.errors import StackpinError, clip

MAX_AUTHOR = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def created_at(env: Mapping[str, str] = os.environ) -> str:
    """Now, or SOURCE_DATE_EPOCH, as `YYYY-MM-DDTHH:MM:SSZ`."""
    raw = env.get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        seconds = int(time.time())
    elif raw.isascii() and raw.isdigit():
        seconds = int(raw)
    else:
        raise StackpinError(f"SOURCE_DATE_EPOCH={clip(raw)!r} is not a whole number of seconds since 1970-01-01 UTC")
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        raise StackpinError(f"SOURCE_DATE_EPOCH={clip(raw)} is beyond the year 9999") from None


def author_problem(author: str) -> str | None:
    """Why `author` is not one, or None. One address at most: the signature is checked for the last
    (signing.principal_of) while a reader sees the first, so `Alice <alice@...> <mallory@...>` would be
    signed by Mallory and read as Alice."""
    if not author or len(author) > MAX_AUTHOR or _CONTROL.search(author):
        return f"is not an author (one line of at most {MAX_AUTHOR} characters, such as `Name <email>`)"
    if author.count("<") > 1 or author.count(">") > 1:
        return "names more than one address; an author is `Name <email>`, one person with one address"
    return None


def checked_author(value: str, source: str) -> str:
    author = value.strip()
    problem = author_problem(author)
    if problem is not None:
        raise StackpinError(f"{source}: {clip(value)!r} {problem}")
    return author


def _git_config(where: Path, key: str) -> str | None:
    try:
        done = subprocess.run(["git", "config", "--get", key], cwd=where, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):  # no git here
        return None
    value = done.stdout.strip()
    return value if done.returncode == 0 and value else None


def author_of(where: Path, env: Mapping[str, str] = os.environ) -> str:
    """Who is recording a revision in the repository at (or above) `where`."""
    if env.get("STACKPIN_AUTHOR"):
        return checked_author(env["STACKPIN_AUTHOR"], "STACKPIN_AUTHOR")
    existing = Path(where).absolute()
    while not existing.is_dir():  # the history directory may not exist yet: ask from its nearest parent
        existing = existing.parent
    name, email = _git_config(existing, "user.name"), _git_config(existing, "user.email")
    if name or email:
        text = f"{name} <{email}>" if name and email else (name or f"<{email}>")
        return checked_author(text, "git config user.name / user.email")
    import getpass

    try:
        return checked_author(getpass.getuser(), "the operating-system user")
    except (OSError, KeyError, StackpinError):  # no passwd entry (a container's arbitrary uid)
        return f"uid {os.getuid()}"
