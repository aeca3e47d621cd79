"""stackpin/records.py: the typed records every command reads, and their errors at file:line:col."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

import msgspec
import pytest

from stackpin.errors import InputError, Location
from stackpin.records import CamelRecord, Invalid, anchored, load, problems_of


class Mode(StrEnum):
    fast = "fast"
    safe_mode = "safe-mode"


class Pool(CamelRecord, frozen=True, kw_only=True):
    max_num_seqs: Annotated[int, msgspec.Meta(ge=1)] | None = None
    mode: Mode = Mode.fast
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    sizes: dict[str, int] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if "bad" in self.labels:
            raise Invalid("labels", "bad is not a label")


class Doc(CamelRecord, frozen=True, kw_only=True):
    api_version: Literal["v1"] = msgspec.field(name="apiVersion")
    name: Annotated[str, msgspec.Meta(pattern=anchored(r"^[a-z]+$"))]
    pools: list[Pool] = msgspec.field(default_factory=list)
    worker: Pool


def _problems(data: object) -> list[str]:
    return [f"{'.'.join(map(str, path))}: {message}" for path, message in problems_of(data, Doc)]


def test_every_wrong_field_is_named_not_only_the_first() -> None:
    data = {"apiVersion": "v2", "name": "web", "worker": {"maxNumSeqs": 0, "mode": "slow", "maxNumSeq": 3},
            "pools": [{}, {"maxNumSeqs": "4"}]}
    assert _problems(data) == [
        "apiVersion: must be one of 'v1', got 'v2'",
        "worker.maxNumSeqs: must be an integer >= 1",
        "worker.mode: must be one of 'fast', 'safe-mode', got 'slow'",
        "worker.maxNumSeq: unknown field (did you mean 'maxNumSeqs'?)",
        "pools.1.maxNumSeqs: must be an integer or null, got a string",
    ]


def test_a_missing_field_and_a_rule_of_the_record_are_named_at_their_field() -> None:
    assert _problems({"apiVersion": "v1", "name": "web"}) == ["worker: required field is missing"]
    # The record's own rule names the field by its YAML name.
    assert _problems({"apiVersion": "v1", "name": "web", "worker": {"labels": {"bad": "x"}}}) == [
        "worker.labels: bad is not a label"]
    # A wrong value inside a mapping is named by its key, not at the mapping.
    assert _problems({"apiVersion": "v1", "name": "web", "worker": {"sizes": {"a": 1, "b": "two"}}}) == [
        "worker.sizes.b: must be an integer, got a string"]
    # A bool where a count belongs is named by its value, as the file spells it.
    assert _problems({"apiVersion": "v1", "name": "web", "worker": {"sizes": {"a": True, "b": False}}}) == [
        "worker.sizes.a: must be an integer, got true", "worker.sizes.b: must be an integer, got false"]


def test_a_pattern_refuses_a_trailing_line_break() -> None:
    # msgspec matches with re.search, whose `$` also matches before a final newline.
    assert _problems({"apiVersion": "v1", "name": "web\n", "worker": {}}) == [
        "name: must match the pattern ^[a-z]+$"]
    assert _problems({"apiVersion": "v1", "name": "web", "worker": {}}) == []


def test_load_raises_one_input_error_with_every_problem_at_its_location() -> None:
    marks = {("name",): 2, ("worker", "mode"): 5, ("worker",): 4}

    def locate(path: tuple[str | int, ...]) -> Location:
        while path and path not in marks:
            path = path[:-1]
        return Location("doc.yaml", marks.get(path, 1), 3)

    with pytest.raises(InputError) as caught:
        load({"apiVersion": "v1", "name": "Web", "worker": {"mode": 1}}, Doc, locate)
    assert caught.value.lines() == [
        "doc.yaml:2:3: name: must match the pattern ^[a-z]+$",
        "doc.yaml:5:3: worker.mode: must be one of 'fast', 'safe-mode', got 1",
    ]


def test_records_dump_their_yaml_names_and_replace_without_mutating() -> None:
    doc = Doc.from_data({"apiVersion": "v1", "name": "web", "worker": {"mode": "safe-mode"}})
    assert doc.worker.mode is Mode.safe_mode  # enum fields hold members
    assert doc.to_data() == {"apiVersion": "v1", "name": "web", "pools": [],
                             "worker": {"maxNumSeqs": None, "mode": "safe-mode", "labels": {}, "sizes": {}}}
    other = doc.replace(name="api")
    assert (doc.name, other.name, other.worker) == ("web", "api", doc.worker)
    with pytest.raises(AttributeError):
        doc.name = "x"  # type: ignore[misc]
    with pytest.raises(msgspec.ValidationError):
        Doc.from_data({"apiVersion": "v1", "name": "web", "worker": {"maxNumSeqs": True}})  # a bool is no count
