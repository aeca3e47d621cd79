"""The packaged example profiles and JSON Schema, read through importlib.resources (so they read the same
from a checkout, an installed wheel or a zip).

`profiles/` and `schema/` here are byte-for-byte copies of the repository's own (tests/test_examples.py
holds them equal; `make examples` refreshes them). The standard library only: shell completion lists the
names on every Tab.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

# The tuned GB300 stack: the rack this project is about with the five tuning changes applied, one
# colocated pool (the simplest placement to edit), and no `extends:` of its own.
DEFAULT = "gb300-tuned"
SCHEMA_FILE = "stackprofile.schema.json"


def _root() -> Traversable:
    return files("stackpin.examples")


def _profiles() -> dict[str, Traversable]:
    """{example name (file stem): file} over every model directory under profiles/."""
    found: dict[str, Traversable] = {}
    for model in _root().joinpath("profiles").iterdir():
        if model.is_dir():
            found |= {f.name.removesuffix(".yaml"): f for f in model.iterdir() if f.name.endswith(".yaml")}
    return dict(sorted(found.items()))


def example_names() -> list[str]:
    return list(_profiles())


def example_text(name: str) -> str:
    """The example's text as shipped; KeyError for a name that is not one."""
    return _profiles()[name].read_text(encoding="utf-8")


def schema_text() -> str:
    return _root().joinpath("schema", SCHEMA_FILE).read_text(encoding="utf-8")
