"""The packages stackpin catalogs, serving engines first among them: the one table the stages above the
serving-engine seam (catalog, engines) read instead of naming an engine.

stackpin.backends is where an engine lives, but it sits below catalog and engines (tests/test_layout.py), so
those stages cannot ask it. Each row here says what they need of one package: the catalog file's prefix
(`engines/<name>-<version>.json`), the project `stackpin engines add` takes, the directory of its sources
that the reader parses, the record its catalog file holds, the reader ("module:function" in
stackpin.engines: a name, not an import, since engines sits below catalog) and, for a serving engine, the
Dynamo worker that runs it. tests/test_engine_kinds.py holds each backend to its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from stackpin.catalog.engine_data import DynamoRelease, FlashinferRelease, Release, SglangRelease, VllmRelease


@dataclass(frozen=True)
class ReleaseKind:
    """One package whose releases stackpin catalogs."""

    name: str  # engines/<name>-<version>.json; a serving engine's spec.engine
    label: str  # as people write it: "vLLM"
    distribution: str  # the project `stackpin engines add` takes (normalized), and its wheel METADATA Name
    sources: str  # the package directory whose Python sources the reader parses
    record: type[Release]  # what its catalog file holds
    reader: str  # "module:function" building `record` from a stackpin.engines.package.Package
    # A serving engine only: the Dynamo catalog section of its worker's own options (a DynamoRelease field), the
    # module `python -m` runs for that worker (its options are registered in <module>.args and .backend_args),
    # and what the catalog's rules say about the rest of the worker's command line: `dynamo_rule`, or the
    # "module:function" that reads the section and its rules from the worker's source (`dynamo_section`:
    # (SourceTree, EntryPoint) -> (section record, rules)), where the worker does more than pass them on.
    dynamo_worker: str | None = None
    dynamo_module: str | None = None
    dynamo_rule: str | None = None
    dynamo_section: str | None = None
    # Options whose values the release lists but only checks when the engine starts (option -> the kind of
    # its `choices`): known values for validation, not ones argparse refuses.
    checked_at_start: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def serving(self) -> bool:
        return self.dynamo_worker is not None


# In the order `engines add` names them. The serving engines' rows are the seam's: backends read them too.
KINDS: tuple[ReleaseKind, ...] = (
    ReleaseKind(
        name="vllm", label="vLLM", distribution="vllm", sources="vllm/", record=VllmRelease,
        reader="stackpin.engines.vllm_release:build", dynamo_worker="worker_vllm", dynamo_module="dynamo.vllm",
        dynamo_rule=("The vLLM worker (python -m dynamo.vllm) also accepts every vLLM engine option "
                     "(AsyncEngineArgs.add_cli_args) of the vLLM it runs with."),
        # --attention-backend takes any string at parse time and is checked against the backend registry when
        # the engine starts.
        checked_at_start=MappingProxyType({"--attention-backend": "attention_backends"})),
    ReleaseKind(name="dynamo", label="Dynamo", distribution="ai-dynamo", sources="dynamo/", record=DynamoRelease,
                reader="stackpin.engines.dynamo_release:build"),
    ReleaseKind(name="flashinfer", label="FlashInfer", distribution="flashinfer-python", sources="flashinfer/",
                record=FlashinferRelease, reader="stackpin.engines.flashinfer_release:build"),
    # What the SGLang worker does to SGLang's own parser is part of its section (SglangWorker), with its rule.
    ReleaseKind(
        name="sglang", label="SGLang", distribution="sglang", sources="sglang/", record=SglangRelease,
        reader="stackpin.engines.sglang_release:build", dynamo_worker="worker_sglang",
        dynamo_module="dynamo.sglang", dynamo_section="stackpin.engines.dynamo_sglang:worker_section"),
)
SERVING: tuple[ReleaseKind, ...] = tuple(kind for kind in KINDS if kind.serving)


def kind(name: str) -> ReleaseKind:
    """The row of package `name` (a catalog file's prefix, a serving engine's spec.engine)."""
    found = next((k for k in KINDS if k.name == name), None)
    if found is None:
        raise KeyError(f"stackpin catalogs no {name!r}; it catalogs {', '.join(k.name for k in KINDS)}")
    return found
