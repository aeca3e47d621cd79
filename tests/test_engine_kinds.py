"""The catalogued packages' one table (stackpin.catalog.engine_kinds) against what reads it and what it mirrors:
each serving engine's row agrees with its backend, every row's reader and record exist where the catalog and
`engines add` look for them, and the flag catalog built from a row is the one its engine's parser would read."""

from __future__ import annotations

import typing
from importlib import import_module

import msgspec
import pytest

from stackpin import backends
from stackpin.catalog.engine_data import DynamoRelease, EntryPoint, Release
from stackpin.catalog.engine_kinds import KINDS, SERVING, kind
from stackpin.catalog.flags import PROJECTS, dynamo_worker, engine_catalog, engine_release
from stackpin.engines import listing, package


def test_the_serving_rows_are_the_backends_registry_with_its_spellings() -> None:
    assert tuple(k.name for k in SERVING) == backends.names()
    for row in SERVING:
        engine = backends.engine(row.name)
        assert (engine.label, engine.distribution, engine.dynamo_worker) == (row.label, row.distribution,
                                                                               row.dynamo_worker)
        assert engine.worker_command[-1] == row.dynamo_module


def test_every_row_names_a_record_reader_and_source_directory_that_exist() -> None:
    records = typing.get_args(Release)
    assert len({k.name for k in KINDS}) == len({k.distribution for k in KINDS}) == len(KINDS)
    dynamo_fields = {f.name for f in msgspec.structs.fields(DynamoRelease)}
    for row in KINDS:
        assert row.record in records, f"{row.name}: {row.record.__name__} is not in engine_data.Release"
        module, _, function = row.reader.partition(":")
        assert callable(getattr(import_module(module), function)), row.reader
        assert row.sources.endswith("/")
        assert package.PROJECTS[row.distribution] == (row.name, row.sources)
        assert PROJECTS[row.name] == row.distribution
        if row.serving:
            assert issubclass(row.record, EntryPoint)  # the flag catalog is built from the engine's own parser
            assert row.dynamo_worker in dynamo_fields, f"DynamoRelease has no {row.dynamo_worker} section"
            assert (row.dynamo_rule is None) != (row.dynamo_section is None), "a worker's rule comes from one place"
            if row.dynamo_section is not None:
                module, _, function = row.dynamo_section.partition(":")
                assert callable(getattr(import_module(module), function)), row.dynamo_section


def test_engines_list_reads_every_shipped_catalog_file_by_the_table() -> None:
    entries = listing.list_catalogs()
    shipped = {(e.engine, e.version) for e in entries if e.where == "bundled"}
    assert {engine for engine, _ in shipped} == {k.name for k in KINDS}
    assert listing._FILE.match("trtllm-1.0.0.json") is None  # a package not in the table is not listed


def test_each_serving_engine_reads_its_release_and_flag_catalog_generically() -> None:
    for row in SERVING:
        versions = [e.version for e in listing.list_catalogs() if e.engine == row.name]
        catalog, release = engine_catalog(row.name, versions[-1]), engine_release(row.name, versions[-1])
        assert isinstance(release, row.record) and catalog is not None
        assert catalog.name == f"{row.label} {versions[-1]}" and catalog.flags == release.options
        for option, choices in row.checked_at_start.items():
            assert option not in catalog.enforced and catalog.known[option] == release.choices[choices]
    assert engine_catalog("dynamo", "1.6.1") is None  # not a serving engine: its entry points are dynamo_catalog's
    with pytest.raises(KeyError, match="catalogs no 'trtllm'"):
        kind("trtllm")


def test_each_serving_engines_dynamo_worker_section_is_read_by_its_row() -> None:
    for row in SERVING:
        section = dynamo_worker("1.6.1", row.name)
        assert isinstance(section, EntryPoint) and section.options, row.name
    assert dynamo_worker("0.0.1", "sglang") is None  # no catalog has that Dynamo
