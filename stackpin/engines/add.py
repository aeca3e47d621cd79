"""`stackpin engines add`: a published release into a catalog directory, without installing or importing it.

The package comes from the index (`NAME==VERSION`) or from a file already on disk (`from_file`, for
sites without the index). It is read with `ast` only (package.py), its catalog extracted (the reader
stackpin.catalog.engine_kinds names for its project: vllm_release, dynamo_release, flashinfer_release,
sglang_release), its sha256 recorded, and the version pins of its metadata written into the directory's
versions.yaml (store.py).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from stackpin.catalog.engine_data import DynamoRelease, EntryPoint, FlashinferRelease, Release
from stackpin.catalog.engine_kinds import KINDS, SERVING
from stackpin.catalog.search import ENV, site_dirs
from stackpin.engines.index import default_index, fetch
from stackpin.engines.package import PROJECTS, Package, PackageError, normalize, read_package
from stackpin.engines.pins import pin_of
from stackpin.engines.store import write_release
from stackpin.errors import StackpinError


def reader(project: str) -> Callable[[Package], Release]:
    """The catalog reader of `project` (a normalized project name stackpin catalogs), as its row names it."""
    row = next(k for k in KINDS if k.distribution == project)
    module, _, function = row.reader.partition(":")
    build: Callable[[Package], Release] = getattr(import_module(module), function)
    return build


_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)\s*$")


@dataclass(frozen=True)
class Added:
    """What `engines add` wrote, and from what."""

    release: Release
    package: str  # the file read
    sha256: str
    catalog_file: Path
    versions_file: Path | None
    pin: dict[str, str] | None  # the entry written to versions.yaml
    downloaded: bool

    @property
    def counts(self) -> dict[str, int]:
        release = self.release
        if isinstance(release, EntryPoint):  # a serving engine's own parser
            counts = {"options": len(release.options), "optionStrings": len(release.option_strings)}
            # A parser that generates spellings of its own (vLLM's inverse --enable-/--disable- forms) and types
            # JSON options with config classes: how many strings were registered, how many generated.
            config_classes = getattr(release, "config_classes", None)
            if config_classes is not None:
                registered = sum(len(o.strings) for o in release.options.values())
                counts |= {"registered": registered, "generated": len(release.option_strings) - registered}
            counts["deprecated"] = sum(len(o.deprecated) for o in release.options.values())
            counts["envVars"] = len(getattr(release, "env_vars", {}))
            if config_classes is not None:
                counts["configClasses"] = len(config_classes)
            return counts
        if isinstance(release, DynamoRelease):
            # The worker counted is the first serving engine's (the default engine's), as it always was.
            worker: EntryPoint = getattr(release, SERVING[0].dynamo_worker or "")
            return {"workerOptionStrings": len(worker.option_strings),
                    "frontendOptionStrings": len(release.frontend.option_strings), "envVars": len(release.env_vars)}
        return {"envVars": len(release.env_vars)}


def parse_spec(spec: str) -> tuple[str, str]:
    """`vllm==0.33.0` -> ("vllm", "0.33.0"); only the projects stackpin catalogs, pinned exactly."""
    match = _SPEC.match(spec)
    if not match:
        raise StackpinError(f"{spec!r}: expected NAME==VERSION, e.g. vllm==0.33.0")
    project = normalize(match.group(1))
    if project not in PROJECTS:
        raise StackpinError(f"{spec!r}: stackpin catalogs {', '.join(f'{p}==X' for p in PROJECTS)}")
    return project, match.group(2)


def default_catalog_dir() -> Path:
    sites = site_dirs()
    if not sites:
        raise StackpinError("no catalog directory to write to", f"give --catalog DIR or set {ENV}")
    return sites[0]


def extract(package: Package) -> Release:
    """The release's catalog; a package whose sources lack what the extractor reads (a module that is not
    there or does not parse) is a one-line error naming it, never a traceback."""
    try:
        return reader(package.project)(package)
    except LookupError as exc:
        raise PackageError(f"{package.filename}: {exc.args[0] if exc.args else exc} is missing or does not "
                           "parse; not a release stackpin can read") from None
    except (RecursionError, MemoryError):
        raise PackageError(f"{package.filename}: its sources are nested too deeply to read") from None


def add_release(spec: str | None, *, from_file: Path | None = None, catalog_dir: Path | None = None,
                index_url: str | None = None, cache_dir: Path | None = None, crd: str | None = None) -> Added:
    """Add `spec` (NAME==VERSION; optional with `from_file`, then checked against the file) to
    `catalog_dir` (default: the first directory of STACKPIN_CATALOG_PATH)."""
    wanted = parse_spec(spec) if spec else None
    if wanted is None and from_file is None:
        raise StackpinError(f"name a release ({', '.join(f'{p}==X' for p in PROJECTS)}) or give --from FILE")
    target = catalog_dir or default_catalog_dir()
    if from_file is not None:
        if not from_file.is_file():
            raise StackpinError(f"{from_file}: " + ("not a regular file (a wheel or sdist)" if from_file.exists()
                                                    else "no such file"))
        package = read_package(from_file)
    else:
        assert wanted is not None
        with tempfile.TemporaryDirectory(prefix="stackpin-engines-") as tmp:
            directory = cache_dir or Path(tmp)
            directory.mkdir(parents=True, exist_ok=True)
            package = read_package(fetch(*wanted, index_url or default_index(), directory))
    if wanted is not None and (package.project, package.version) != wanted:
        raise PackageError(f"{package.filename} is {package.project} {package.version}, not {wanted[0]} {wanted[1]}")
    release = extract(package)
    # An engine extra's pins come with the Dynamo release; an engine release writes its own (FlashInfer, torch).
    pin = pin_of(release, crd) if not isinstance(release, FlashinferRelease) else None
    catalog_file, versions_file = write_release(target, release, pin)
    return Added(release=release, package=package.filename, sha256=package.sha256, catalog_file=catalog_file,
                 versions_file=versions_file, pin=pin[1] if pin else None, downloaded=from_file is None)
