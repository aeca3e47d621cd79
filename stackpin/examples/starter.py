"""A starter profile from a packaged example (`stackpin init`): the example, renamed if asked, with every
base its `extends:` chain needs and the JSON Schema, so that it validates, locks and renders where it is
written and editors check it (its yaml-language-server modeline names the schema beside it).

Bases are written as `_NAME.yaml`: in a directory, files starting with '_' are bases, read only through
`extends:` (stackpin.validate.check.expand_profile_args), so `stackpin validate DIR` and `stackpin lock
DIR` take the starter alone. Nothing that exists is replaced: every name is checked before the first is
written, each file is created whole under a name nobody holds (`create_exclusive`), and a failure takes
back what this run created.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stackpin.errors import InputError, Location, Problem
from stackpin.examples.packaged import DEFAULT, SCHEMA_FILE, example_names, example_text, schema_text
from stackpin.version import __version__
from stackpin.yamlio import FieldPath, ambiguous_scalar, create_exclusive, parse_yaml

MODELINE = f"# yaml-language-server: $schema={SCHEMA_FILE}\n"
_MODELINE = re.compile(r"# yaml-language-server: \$schema=\S*\r?\n")


@dataclass(frozen=True)
class Starter:
    example: str
    name: str  # the starter's metadata.name; its file is NAME.yaml
    files: Mapping[str, str]  # file name -> text: the starter first, its bases nearest first, the schema last

    @property
    def profile_file(self) -> str:
        return f"{self.name}.yaml"


@dataclass(frozen=True)
class Outcome:
    path: Path
    action: Literal["wrote", "kept"]  # kept: the file was there already, byte for byte what init writes


def chain(example: str) -> list[str]:
    """`example` and the examples its `extends:` chain reads, nearest first."""
    names = example_names()
    if example not in names:
        raise ValueError(f"no example profile {example!r} (one of: {', '.join(names)})")
    found = [example]
    while (parent := _extends(found[-1])) is not None:
        if parent in found:
            raise ValueError(f"example {found[-1]} extends {parent}, which extends it")
        found.append(parent)
    return found


def _extends(example: str) -> str | None:
    data, _ = parse_yaml(example_text(example), f"{example}.yaml")
    parent = data.get("extends")
    if parent is None:
        return None
    stem = str(parent).removesuffix(".yaml")
    if stem not in example_names() or parent != f"{stem}.yaml":  # a packaging mistake, found by the tests
        raise ValueError(f"example {example} extends {parent!r}, which is not an example beside it")
    return stem


def check_name(name: str) -> None:
    """ValueError unless `name` is what metadata.name accepts (the model's own check)."""
    from stackpin.profile.model import Metadata
    from stackpin.records import problems_of

    if problems_of({"name": name, "deployment": "d"}, Metadata):
        raise ValueError(f"{name!r} is not a stack name: lowercase letters, digits and '-', starting and ending "
                         "with a letter or digit, 40 characters at most") from None


def plan_starter(example: str = DEFAULT, name: str | None = None) -> Starter:
    """The files `stackpin init --from EXAMPLE [--name NAME]` writes, as text; nothing is written."""
    names = chain(example)
    if name is not None:
        check_name(name)
    files: dict[str, str] = {}
    for i, current in enumerate(names):
        parent = names[i + 1] if i + 1 < len(names) else None
        text = _edit(example_text(current), current,
                     extends=f"_{parent}.yaml" if parent else None, name=name if i == 0 else None)
        files[f"{name or current}.yaml" if i == 0 else f"_{current}.yaml"] = text
    files[SCHEMA_FILE] = schema_text()
    return Starter(example, name or example, files)


def _edit(text: str, example: str, extends: str | None, name: str | None) -> str:
    """The example's text with its modeline naming the schema beside it, a line saying where it came from,
    `extends:` naming the written base and metadata.name set; its comments and layout kept."""
    data, positions = parse_yaml(text, f"{example}.yaml")
    lines = text.splitlines(keepends=True)
    for path, value in ((("extends",), extends), (("metadata", "name"), name)):
        if value is not None:
            old = data.get("extends") if path == ("extends",) else data.get("metadata", {}).get("name")
            line = positions.locate(path).line - 1
            lines[line] = _set(lines[line], path, str(old), value, example)
    head = [MODELINE, f"# Written by `stackpin init` (stackpin {__version__}) from its example profile {example}.\n"]
    start = 1 if lines and _MODELINE.fullmatch(lines[0]) else 0
    return "".join(head + lines[start:])


def _set(line: str, path: FieldPath, old: str, new: str, example: str) -> str:
    """`key: old  # comment` -> `key: new  # comment`, `new` quoted where a YAML 1.1 reader (Go's) would
    read it as anything but a string (a stack named `yes` or `123`)."""
    key = str(path[-1])
    found = re.fullmatch(rf"(\s*{re.escape(key)}:[ \t]+){re.escape(old)}([ \t]+#.*)?(\r?\n)?", line)
    if found is None:  # a packaging mistake, found by the tests
        raise ValueError(f"example {example}: {'.'.join(map(str, path))} is not written plain on one line")
    value = json.dumps(new) if ambiguous_scalar(new) else new
    return f"{found[1]}{value}{found[2] or ''}{found[3] or ''}"


def write_starter(directory: Path, starter: Starter) -> list[Outcome]:
    """Write the starter's files into `directory` (created if missing, its parent must exist). A base or
    schema file already there with exactly the text init writes is kept (another starter's); any other
    existing name is refused, all named, before anything is written."""
    directory = Path(directory)
    targets = {directory / name: text for name, text in starter.files.items()}
    if os.path.lexists(directory) and not directory.is_dir():
        raise InputError([Problem(Location(str(directory)), "", "is not a directory")])
    if not directory.exists() and not directory.parent.is_dir():
        raise InputError([Problem(Location(str(directory)), "", f"cannot create: {directory.parent} is not "
                                  "a directory")])
    kept, taken = [], []
    for i, (path, text) in enumerate(targets.items()):
        if not os.path.lexists(path):
            continue
        if i > 0 and _holds(path, text):
            kept.append(path)
        else:
            taken.append(Problem(Location(str(path)), "", "exists; stackpin init never replaces a file (move it "
                                 "away or init another directory); nothing written"))
    if taken:
        raise InputError(taken)
    made_directory = not directory.exists()
    if made_directory:
        directory.mkdir()
    created: list[Path] = []
    try:
        for path, text in targets.items():
            if path in kept:
                continue
            try:
                create_exclusive(path, text)
            except FileExistsError:
                raise InputError([Problem(Location(str(path)), "", "appeared while stackpin init was writing; "
                                          "nothing written")]) from None
            created.append(path)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        if made_directory:
            try:
                directory.rmdir()
            except OSError:
                pass  # something else wrote there meanwhile: leave it
        raise
    return [Outcome(path, "kept" if path in kept else "wrote") for path in targets]


def _holds(path: Path, text: str) -> bool:
    """Whether `path` is a regular file (not a link) holding exactly `text`."""
    data = text.encode("utf-8")
    try:
        return (not path.is_symlink() and path.is_file() and path.stat().st_size == len(data)
                and path.read_bytes() == data)
    except OSError:
        return False
