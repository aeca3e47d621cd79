"""A project's files from a simple repository page, in one shape whatever served it: the PEP 691 JSON
`files` entries (`filename`, `url`, `hashes`, `yanked`, `core-metadata`). A PEP 503 HTML page (what
pypiserver and many mirrors serve) and a directory of package files (`--find-links DIR`) are read into
the same entries, so choosing a file and reading its version is written once.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from stackpin import jsonio
from stackpin.engines.package import normalize

MAX_PAGE = 16 << 20  # bytes of one project page; PyPI's vllm page is ~2 MB as JSON
MAX_FILES = 20_000  # entries of one page
PACKAGE_SUFFIXES = (".whl", ".tar.gz", ".zip")

FileEntry = dict[str, Any]


class PageError(ValueError):
    """A page that is not a simple repository page."""


def _hash_of(fragment: str) -> dict[str, str]:
    """`sha256=HEX` (a URL fragment or a metadata attribute) as PEP 691's hashes mapping."""
    name, _, value = fragment.partition("=")
    return {name.lower(): value.lower()} if name and value else {}


def _metadata(value: str | None) -> bool | dict[str, str]:
    """PEP 658/714 `data-core-metadata`: absent, `true`, or `sha256=HEX`."""
    if value is None:
        return False
    hashes = _hash_of(value)
    return hashes or value.strip().lower() == "true"


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.files: list[FileEntry] = []
        self._open: FileEntry | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "a":
            return
        found = dict(attrs)
        href = found.get("href")
        if not href:
            return
        url, _, fragment = href.partition("#")
        metadata = found.get("data-core-metadata", found.get("data-dist-info-metadata"))
        yanked = found.get("data-yanked")
        self._open = {"filename": url.rstrip("/").rpartition("/")[2], "url": url, "hashes": _hash_of(fragment),
                      "yanked": (yanked or True) if yanked is not None else False,
                      "core-metadata": _metadata(metadata)}
        self.files.append(self._open)
        if len(self.files) > MAX_FILES:
            raise PageError(f"more than {MAX_FILES} files")

    def handle_data(self, data: str) -> None:
        if self._open is not None and data.strip():  # PEP 503: the anchor's text is the file name
            self._open["filename"] = data.strip()

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._open = None


def parse_html(text: str) -> list[FileEntry]:
    parser = _Anchors()
    parser.feed(text)
    parser.close()
    return parser.files


def parse_json(body: bytes) -> list[FileEntry]:
    try:
        data = jsonio.loads(body)
    except jsonio.NestingError as exc:
        raise PageError(str(exc)) from None
    except ValueError:
        raise PageError("not JSON") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise PageError("no list of files" if not isinstance(files, list) else f"more than {MAX_FILES} files")
    entries = []
    for item in files:
        if not isinstance(item, dict) or not isinstance(item.get("filename"), str) or not isinstance(
                item.get("url"), str):
            raise PageError("a file entry without a filename and url")
        hashes = item.get("hashes")
        hashes = hashes if isinstance(hashes, dict) else {}
        metadata = item.get("core-metadata", item.get("dist-info-metadata", False))
        entries.append({"filename": item["filename"], "url": item["url"],
                        "hashes": {str(k): str(v) for k, v in hashes.items()}, "yanked": item.get("yanked", False),
                        "core-metadata": metadata if isinstance(metadata, (bool, dict)) else False})
    return entries


ON_DISK = "on-disk"  # the sha256 of a --find-links entry: hashed when read


def parse_directory(directory: Path, project: str) -> list[FileEntry]:
    """The package files of `project` in `directory` (pip's --find-links DIR), listed as an index would, not
    read: a local file is hashed when it is read as a package (engines.package), so its listing carries
    ON_DISK for a sha256 (a hash of itself would prove nothing, and vLLM's files are hundreds of MB)."""
    entries = []
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name.endswith(PACKAGE_SUFFIXES) and release_of(project, path.name):
            entries.append({"filename": path.name, "url": path.resolve().as_uri(), "hashes": {"sha256": ON_DISK},
                            "yanked": False, "core-metadata": False})
    return entries


def release_of(project: str, filename: str) -> str | None:
    """The version in a wheel's or sdist's file name when the file is `project`'s, else None."""
    stem = normalize(project).replace("-", "_")
    name = filename.lower()
    for suffix in (".tar.gz", ".zip"):
        if name.endswith(suffix):
            head, _, tail = name.removesuffix(suffix).rpartition("-")
            return tail if head and normalize(head).replace("-", "_") == stem else None
    if name.endswith(".whl"):
        parts = name.split("-")
        return parts[1] if len(parts) >= 5 and normalize(parts[0]).replace("-", "_") == stem else None
    return None
