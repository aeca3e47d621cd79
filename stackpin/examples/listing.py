"""One line about each packaged example (`stackpin init --list`), derived from the example itself as init
would write it (loaded, its chain merged, summarised as `stackpin validate` summarises a stack), so that a
new or changed example needs no description kept beside it."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from stackpin.examples.packaged import DEFAULT, example_names
from stackpin.examples.starter import chain, plan_starter


@dataclass(frozen=True)
class ExampleInfo:
    name: str
    description: str
    extends: tuple[str, ...]  # the examples it needs written beside it, nearest first
    default: bool


def describe_examples() -> list[ExampleInfo]:
    from stackpin.profile.loader import load_profile
    from stackpin.validate.summary import summarize

    out = []
    with tempfile.TemporaryDirectory(prefix="stackpin-examples-") as tmp:
        for name in example_names():
            starter = plan_starter(name)
            here = Path(tmp, name)
            here.mkdir()
            for file, text in starter.files.items():
                (here / file).write_text(text, encoding="utf-8")
            profile = load_profile(here / starter.profile_file).profile
            summary = summarize(profile)
            pools = ", ".join(f"{pool.role} {pool.shape}" for pool in summary.pools)
            versions = profile.spec.versions
            description = (f"{summary.platform}, {summary.gpus_used} GPUs, {summary.placement}: {pools}; "
                           f"Dynamo {versions.dynamo}, vLLM {versions.vllm}")
            out.append(ExampleInfo(name, description, tuple(chain(name)[1:]), name == DEFAULT))
    return out
