"""The example profiles and JSON Schema packaged for `stackpin init` are the repository's own, byte for byte,
and the wheel's package data takes every one of them (a generated-file check: `make examples` refreshes
the copies, `make schema` both schemas)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from stackpin.examples.packaged import DEFAULT, example_names, example_text, schema_text

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = ROOT / "stackpin" / "examples"


def _tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_packaged_copies_equal_the_repository_byte_for_byte() -> None:
    for name in ("profiles", "schema"):
        repository, packaged = _tree(ROOT / name), _tree(PACKAGED / name)
        assert sorted(packaged) == sorted(repository), (
            f"stackpin/examples/{name} does not hold the files of {name}/: run `make examples` and commit")
        stale = [file for file, data in repository.items() if packaged[file] != data]
        assert not stale, f"stale in stackpin/examples/{name}: {stale}; run `make examples` and commit"


def test_package_data_takes_every_packaged_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["stackpin"]
    files = [p.relative_to(ROOT / "stackpin").as_posix() for p in sorted(PACKAGED.rglob("*"))
             if p.is_file() and p.suffix not in (".py", ".pyc", ".md")]
    left_out = [f for f in files if not any(fnmatch.fnmatchcase(f, g) for g in globs)]
    assert files and not left_out, f"not in [tool.setuptools.package-data]: {left_out}"


def test_the_package_reads_what_the_repository_ships() -> None:
    shipped = sorted(p.stem for p in (ROOT / "profiles").rglob("*.yaml"))
    assert example_names() == shipped and DEFAULT in shipped
    assert example_text("gb300-tuned").encode() == (ROOT / "profiles/deepseek-v4.1-flash/gb300-tuned.yaml").read_bytes()
    assert schema_text().encode() == (ROOT / "schema/stackprofile.schema.json").read_bytes()
