"""Reading the Kubernetes objects of one file or one kustomize directory, bounded and without surprises.

Every file is a regular file read with a byte limit (yamlio.read_regular: a FIFO or a device is refused,
never read); a directory must hold a kustomization whose `resources` name files (or directories) inside
it, never a path that leaves it, a URL or a link; fields of a kustomization that would change objects
(patches, images, name prefixes) are refused rather than silently left out: `kubectl kustomize DIR` first.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stackpin.errors import InputError, Location, Problem, clip
from stackpin.imports.dgd import Dgd, DgdError, dgds_in
from stackpin.yamlio import MAX_INPUT_BYTES, parse_yaml_all, read_regular

KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# Fields that only list or label: reading the resources gives the same serving content.
_HARMLESS = {"apiVersion", "kind", "resources", "namespace", "commonLabels", "labels", "commonAnnotations",
             "metadata"}
MAX_FILES = 256
MAX_DEPTH = 8


def _problem(path: Path | str, message: str) -> InputError:
    return InputError([Problem(Location(str(path)), "", message)])


def _read(path: Path, display: str) -> list[Any]:
    try:
        raw = read_regular(path, MAX_INPUT_BYTES, follow=False)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise _problem(display, "no such file") from None
    except IsADirectoryError:
        raise _problem(display, "is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.errno == 40:
            reason = "is a symbolic link; name the file it points to"
        raise _problem(display, f"cannot read: {reason}") from None
    return [doc for doc, _ in parse_yaml_all(text, display) if doc is not None]


def _objects(path: Path, display: str, root: Path, seen: list[int], depth: int) -> list[tuple[Any, str]]:
    if depth > MAX_DEPTH:
        raise _problem(display, f"kustomizations nested deeper than {MAX_DEPTH}")
    if path.is_symlink():
        raise _problem(display, "is a symbolic link; name what it points to")
    if not path.is_dir():
        seen[0] += 1
        if seen[0] > MAX_FILES:
            raise _problem(display, f"more than {MAX_FILES} files")
        return [(doc, display) for doc in _read(path, display)]
    found = [path / name for name in KUSTOMIZATIONS if (path / name).exists()]
    if not found:
        raise _problem(display, "is a directory without a kustomization.yaml; name a DGD file or a kustomize "
                       "directory")
    kustomization_display = f"{display.rstrip('/')}/{found[0].name}"
    docs = _read(found[0], kustomization_display)
    kust = docs[0] if docs else {}
    if not isinstance(kust, Mapping):
        raise _problem(kustomization_display, "is not a mapping")
    other = sorted(set(kust) - _HARMLESS)
    if other:
        raise _problem(kustomization_display, f"{', '.join(map(str, other))} would change the objects and are not "
                       "applied by stackpin import; import the output of `kubectl kustomize` instead")
    resources = kust.get("resources") or []
    if not isinstance(resources, list):
        raise _problem(kustomization_display, "resources: expected a list")
    out: list[tuple[Any, str]] = []
    for item in resources:
        if not isinstance(item, str) or not item:
            raise _problem(kustomization_display, f"resources: {clip(item, 60)!r} is not a path")
        target = (path / item)
        try:
            target.resolve().relative_to(root.resolve())
        except ValueError:
            raise _problem(kustomization_display, f"resources: {clip(item, 60)!r} is outside {root}") from None
        if "://" in item or item.startswith("/"):
            raise _problem(kustomization_display, f"resources: {clip(item, 60)!r} is not a relative path")
        out += _objects(target, f"{display.rstrip('/')}/{item}", root, seen, depth + 1)
    return out


def read_objects(path: Path) -> list[tuple[Any, str]]:
    """(object, file) for every YAML document of a file or a kustomize directory."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise _problem(path, "no such file or directory")
    return _objects(path, str(path), path, [0], 0)


def read_dgds(path: Path) -> tuple[Dgd, ...]:
    """The DynamoGraphDeployments of a file or kustomize directory; exit 2 (InputError, one line) on bad input."""
    objects = read_objects(path)
    mappings = [(o, src) for o, src in objects if isinstance(o, Mapping)]
    try:
        found = dgds_in(mappings)
    except DgdError as exc:
        raise _problem(path, exc.message) from None
    if not found:
        raise _problem(path, "holds no DynamoGraphDeployment")
    return found
