"""Writing a release into a catalog directory: `engines/<engine>-<version>.json` and its pin in
`versions.yaml`, both or neither.

The JSON is canonical (sorted keys, 2-space indent, defaults left out, a trailing newline), so adding
the same package again gives the same bytes. versions.yaml is edited line by line, one flow mapping per
release, so its comments and the order of its other entries survive: the bundled file is commented.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from stackpin.catalog import merged_versions, versions_of, versions_skeleton
from stackpin.catalog.engine_data import CATALOG_FORMAT, Release
from stackpin.catalog.search import engine_file_name
from stackpin.catalog.version import parse_version
from stackpin.engines.pins import Pin
from stackpin.errors import StackpinError
from stackpin.yamlio import ambiguous_scalar, load_data, write_files

_ENTRY = re.compile(r"^  (?:\"([^\"]+)\"|'([^']+)'|([^\s:#][^:#]*?)):\s")
NEW_VERSIONS = """# Version pins of the releases added to this catalog with `stackpin engines add`, read from each
# package's metadata (vLLM pins flashinfer-python and torch; ai-dynamo's vllm extra pins vllm and nixl).
source: "package metadata, recorded by stackpin engines add"
"""


def _explicit(value: Any) -> Any:
    """`value` as JSON data, every record field that holds its default left out (at every depth)."""
    if isinstance(value, msgspec.Struct):
        out: dict[str, Any] = {}
        for field in msgspec.structs.fields(value):
            held = getattr(value, field.name)
            if field.default is not msgspec.NODEFAULT:
                default = field.default
            elif field.default_factory is not msgspec.NODEFAULT:
                default = field.default_factory()
            else:
                out[field.encode_name] = _explicit(held)
                continue
            # Compared as JSON: a list the extractor built equals its field's default tuple.
            if msgspec.to_builtins(held) != msgspec.to_builtins(default):
                out[field.encode_name] = _explicit(held)
        return out
    if isinstance(value, dict):
        return {key: _explicit(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_explicit(item) for item in value]
    return value


def catalog_json(release: Release) -> str:
    data: dict[str, Any] = _explicit(release)
    data.update(format=CATALOG_FORMAT, engine=release.engine)  # defaults, but a reader needs them
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _scalar(value: str) -> str:
    return json.dumps(value) if ambiguous_scalar(value) or not re.fullmatch(r"[\w.+-]+", value) else value


def _entry(version: str, fields: dict[str, str]) -> str:
    inner = ", ".join(f"{key}: {_scalar(value)}" for key, value in fields.items())
    return f"  {json.dumps(version)}: {{{inner}}}"


def set_pin(text: str, section: str, version: str, fields: dict[str, str]) -> str:
    """`text` (a versions.yaml) with `version`'s entry in `section` replaced, or inserted where PEP 440
    orders it; the section is added at the end when missing."""
    lines = text.splitlines()
    entry = _entry(version, fields)
    try:
        start = lines.index(f"{section}:")
    except ValueError:
        tail = next((i for i, line in enumerate(lines) if line.startswith("source:")), len(lines))
        lines[tail:tail] = [f"{section}:", entry]
        return "\n".join(lines) + "\n"
    end = start + 1
    while end < len(lines) and (lines[end].startswith("  ") or not lines[end].strip()):
        end += 1
    insert_at = start + 1
    for index in range(start + 1, end):
        match = _ENTRY.match(lines[index])
        if not match:
            continue
        existing = next(g for g in match.groups() if g is not None).strip()
        if existing == version:
            lines[index] = entry
            return "\n".join(lines) + "\n"
        try:
            if parse_version(existing) < parse_version(version):
                insert_at = index + 1
        except ValueError:
            insert_at = index + 1
    lines.insert(insert_at, entry)
    return "\n".join(lines) + "\n"


def _check_versions(path: Path, text: str) -> None:
    """The edited file must still be a versions.yaml the catalog reads."""
    data = load_data(text) or {}
    base = versions_skeleton()
    try:
        versions_of(merged_versions({**base, **data}, ()))
    except ValueError as exc:
        raise StackpinError(f"{path}: the pin written would not read back ({str(exc).splitlines()[0]})") from None


def write_release(catalog_dir: Path, release: Release, pin: Pin | None) -> tuple[Path, Path | None]:
    """Write the release's catalog file and pin into `catalog_dir`; returns both paths (None: no pin)."""
    target = catalog_dir / "engines" / engine_file_name(release.engine, release.version)
    files: dict[Path, str] = {target: catalog_json(release)}
    versions_path = None
    if pin is not None:
        versions_path = catalog_dir / "versions.yaml"
        current = versions_path.read_text(encoding="utf-8") if versions_path.is_file() else NEW_VERSIONS
        updated = set_pin(current, pin[0], release.version, pin[1])
        _check_versions(versions_path, updated)
        if updated != current or not versions_path.is_file():
            files[versions_path] = updated
    target.parent.mkdir(parents=True, exist_ok=True)
    write_files(files, root=catalog_dir)
    return target, versions_path
