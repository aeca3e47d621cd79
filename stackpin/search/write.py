"""The top picks beside the base, as `upgrade propose` writes its candidate: the base file's own text with only
the picked values edited (stackpin.upgrade.textedit: comments, order and quoting stay), checked to load to
exactly the candidate that was validated and predicted and to pass validate again, then the proposal
(search.md for people, search.json for tools and part 3's verification). Everything is computed and
checked first; nothing is replaced without `force`; a pick this run wrote is taken back when the proposal
cannot be written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from stackpin.diff.model import StackDiff
from stackpin.diff.run import diff_loaded
from stackpin.errors import StackpinError
from stackpin.profile.loader import LoadedProfile, load_profile
from stackpin.search.run import Pick, SearchResult
from stackpin.upgrade.propose import loaded_text, stack_side
from stackpin.upgrade.textedit import TextEdit, scalar_text
from stackpin.validate import Severity, run_rules
from stackpin.yamlio import FieldPath, parse_yaml, write_atomic, write_files

NAME_MAX = 40  # metadata.name's limit (profile/model.py Metadata)
MARKDOWN = "search.md"
JSON = "search.json"


def pick_path(base: Path, rank: int) -> Path:
    """`gb300-tuned.yaml` -> `gb300-tuned.search-1.yaml`, beside it (its `extends:` resolves the same)."""
    return base.parent / f"{base.stem}.search-{rank}{base.suffix or '.yaml'}"


def pick_name(name: str, rank: int) -> str:
    candidate = f"{name}-search-{rank}"
    if len(candidate) > NAME_MAX:
        raise StackpinError(f"the pick's name {candidate!r} is longer than {NAME_MAX} characters",
                            "shorten metadata.name of the base profile")
    return candidate


def _replace_block(edit: TextEdit, path: FieldPath, value: Any) -> None:
    """Replace the value under the key at `path` (a block mapping or list, or a one-line flow value) with
    `value`: a scalar or flow list on the key's line, a mapping in block style below it."""
    data, positions = parse_yaml(edit.text, edit.display)
    lines = edit.text.splitlines(keepends=True)
    where = positions.locate(path)
    row, col = where.line - 1, where.col - 1
    key_end = lines[row].find(":", col)
    if key_end < 0 or lines[row][:col].strip():
        raise StackpinError(f"{edit.display}: {'.'.join(map(str, path))}: not a block mapping's key",
                            "edit the profile by hand, or write the mapping in block style")
    end = row
    for index in range(row + 1, len(lines)):  # the value ends at the first content line not indented deeper
        stripped = lines[index].strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(lines[index]) - len(lines[index].lstrip(" "))
        if indent < col or (indent == col and not stripped.startswith("- ")):
            break
        end = index
    head = lines[row][:key_end + 1]
    if isinstance(value, dict) and value:
        body = yaml.safe_dump(value, default_flow_style=False, sort_keys=False, width=10**6)
        block = [head + "\n"] + [" " * (col + 2) + line + "\n" for line in body.splitlines()]
    else:
        block = [f"{head} {scalar_text(value)}\n"]
    lines[row:end + 1] = block
    edit.text = "".join(lines)


def _leaves(path: FieldPath, value: Any) -> Iterator[tuple[FieldPath, Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves((*path, key), item)
    else:
        yield path, value


def edited_text(base: LoadedProfile, name: str, edits: tuple[tuple[FieldPath, Any], ...]) -> str:
    """The base file's text with the name and every edit written in, as few lines changed as it takes."""
    edit = TextEdit(base.path.read_text(encoding="utf-8"), str(base.path))
    edit.set(("metadata", "name"), name)
    for path, value in edits:
        if not edit.has(path):
            for leaf, item in _leaves(path, value):  # mappings the file lacks go in block style, key by key
                edit.insert(leaf, item)
            continue
        data, _ = parse_yaml(edit.text, edit.display)
        for key in path:
            data = data[key]
        if isinstance(value, dict | list) or isinstance(data, dict | list):
            _replace_block(edit, path, value)
        else:
            edit.set(path, value)
    return edit.text


@dataclass(frozen=True)
class Written:
    """What write_picks produced: the picks with their paths, the proposal directory and every file written."""

    result: SearchResult
    directory: Path
    files: tuple[Path, ...]


def _checked_pick(base: LoadedProfile, pick: Pick) -> tuple[str, StackDiff]:
    """The pick's text, held to load to the very candidate that was validated and predicted (its name
    aside) and to pass validate on its own, and its stack diff against the base."""
    name = pick_name(base.profile.name, pick.rank)
    path = pick_path(base.path, pick.rank)
    text = edited_text(base, name, pick.scored.edits)
    with loaded_text(path, text) as loaded:
        expected = pick.scored.profile.replace(metadata=pick.scored.profile.metadata.replace(name=name))
        if loaded.profile != expected:
            raise StackpinError(f"{path}: the edited text does not load to the candidate it was cut from",
                                "a bug in stackpin search's text edits: report it with the base profile")
        errors = [f for f in run_rules(loaded) if f.severity == Severity.error and f.acknowledged is None]
        if errors:
            raise StackpinError(f"{path}: {errors[0].code} {errors[0].message} (the written pick fails validate)")
        diff = diff_loaded(stack_side(base, str(base.path)), stack_side(loaded, str(path)))
    return text, diff


def write_picks(result: SearchResult, directory: Path, force: bool = False) -> Written:
    """Each pick beside the base and the proposal in `directory` (search.md, search.json)."""
    from stackpin.search.report import proposal_json, proposal_markdown

    base = load_profile(result.base)
    texts: dict[Path, str] = {}
    diffs: dict[int, StackDiff] = {}
    for pick in result.picks:
        text, diff = _checked_pick(base, pick)
        texts[pick_path(base.path, pick.rank)] = text
        diffs[pick.rank] = diff
    written = replace(result, picks=tuple(replace(p, path=pick_path(base.path, p.rank)) for p in result.picks))
    files = {directory / MARKDOWN: proposal_markdown(written, diffs), directory / JSON: proposal_json(written)}
    _check_free([*texts, *files], force)
    created: list[Path] = []
    try:
        for path, text in texts.items():
            if not path.exists():
                created.append(path)
            write_atomic(path, text)
        write_files(files, root=directory)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise
    return Written(written, directory, (*texts, *files))


def _check_free(paths: list[Path], force: bool) -> None:
    taken = [p for p in paths if p.exists()]
    if taken and not force:
        raise StackpinError(f"{taken[0]} exists; search never replaces one", "give --force to replace it")
