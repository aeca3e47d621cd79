"""Which package index, and with which credentials, as pip decides: `--index-url`, else $PIP_INDEX_URL, else
`[global] index-url` of pip's configuration files, else PyPI; a user:password in the URL is sent as Basic
auth, else ~/.netrc's entry for the host ($NETRC names another file). A site that already configured pip
for its mirror configures stackpin too. Credentials never appear in a message: `redact` every URL shown.
"""

from __future__ import annotations

import configparser
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from stackpin.errors import StackpinError

DEFAULT_INDEX = "https://pypi.org/simple"


def config_files() -> list[Path]:
    """pip's configuration files, lowest priority first (pip's order: global, user, site, $PIP_CONFIG_FILE)."""
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    xdg_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs.split(os.pathsep)) if d]
    files += [Path("/etc/pip.conf"), Path.home() / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf",
              Path(sys.prefix) / "pip.conf"]
    named = os.environ.get("PIP_CONFIG_FILE")
    if named == os.devnull:  # pip: PIP_CONFIG_FILE=/dev/null turns every configuration file off
        return []
    return files + [Path(named)] if named else files


def configured_index() -> str | None:
    """`[global] index-url` of the highest-priority pip configuration file that sets it."""
    found = None
    for path in config_files():
        if not path.is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
        except (configparser.Error, UnicodeDecodeError, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StackpinError(f"{path}: not a pip configuration file ({redact_text(first)})") from None
        for key in ("index-url", "index_url"):  # pip reads either spelling
            if parser.has_option("global", key):
                found = parser.get("global", key).strip()
    return found or None


def index_url(given: str | None) -> str:
    """The index to read: `given`, else $PIP_INDEX_URL, else pip's configuration, else PyPI."""
    return given or os.environ.get("PIP_INDEX_URL") or configured_index() or DEFAULT_INDEX


def redact(url: str) -> str:
    """`url` without its user:password (`https://***@host/simple`), for every message that shows it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a malformed URL>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def redact_text(text: str) -> str:
    """Any URL with userinfo inside `text` (an exception's words) redacted."""
    return " ".join(redact(word) if "://" in word and "@" in word else word for word in text.split(" "))


@dataclass(frozen=True)
class Endpoint:
    """An index URL split into what is requested (no userinfo) and the Basic credentials for its host."""

    url: str
    shown: str  # redacted, for messages
    origin: tuple[str, str, int]  # scheme, host, port the credentials are for: never sent to another origin
    credentials: tuple[str, str] | None


def endpoint(url: str) -> Endpoint:
    """Split `url`; refuse what is not an http(s) URL with a host, naming it redacted."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
        port = parts.port  # a non-numeric port raises here
    except ValueError:
        raise StackpinError(f"{shown}: not a valid index URL") from None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise StackpinError(f"{shown}: not an http(s) index URL", "or give --find-links DIR for a directory")
    netloc = parts.netloc.rpartition("@")[2]
    credentials = None
    if "@" in parts.netloc:
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        credentials = (unquote(user), unquote(password))
    else:
        credentials = _netrc(host)
    origin = (parts.scheme, host, port or (443 if parts.scheme == "https" else 80))
    return Endpoint(urlunsplit(parts._replace(netloc=netloc)), shown, origin, credentials)


def _netrc(host: str) -> tuple[str, str] | None:
    """The login and password ~/.netrc (or $NETRC) holds for `host`; none when it has none or is unreadable,
    as pip (requests) treats it."""
    import netrc

    path = os.environ.get("NETRC") or str(Path.home() / ".netrc")
    if not Path(path).is_file():
        return None
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (netrc.NetrcParseError, OSError, UnicodeDecodeError):
        return None
    if entry is None or not entry[0]:
        return None
    return entry[0], entry[2] or ""
