"""Property tests: whatever a profile file holds, stackpin answers with a StackpinError or a result.

Never another exception, never a hang. Derandomized so CI sees the same examples every run.
"""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stackpin.errors import StackpinError
from stackpin.profile.loader import load_profile
from stackpin.validate import run_rules
from stackpin.validate.summary import summarize
from tests.helpers import SHIPPED, base_doc

# libyaml's dumper when present: writing the files is not what is under test, loading them is.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, allow_unicode=True)

BASES = [p.stem for p in SHIPPED]
# Sized for < 20 s on two cores; STACKPIN_FUZZ_SCALE=20 for a deeper local run.
SCALE = float(os.environ.get("STACKPIN_FUZZ_SCALE", "1"))
FUZZ = settings(derandomize=True, database=None, deadline=2000, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Hang(Exception):
    """Not a StackpinError: a test that raises it fails."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt a hang (deadline= only measures examples that finish)."""

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_file(path: Path) -> None:
    """The whole library path `stackpin validate` takes; only StackpinError may escape."""
    with time_limit(10):
        try:
            loaded = load_profile(path)
            findings = run_rules(loaded)
            summarize(loaded.profile)
        except StackpinError as exc:
            assert exc.lines() and all(line and "\n" not in line for line in exc.lines()), exc.lines()
            return
    for finding in findings:
        assert finding.location and finding.code.startswith("SP")


# --- values and keys ------------------------------------------------------------------------------


def _keys_of(node: Any, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            out.add(str(key))
            _keys_of(value, out)
    elif isinstance(node, list):
        for value in node:
            _keys_of(value, out)
    return out


KNOWN_KEYS = sorted(set().union(*(_keys_of(base_doc(b), set()) for b in BASES)) | {
    "extends", "speculative", "worker", "prefill", "decode", "pipelineParallel", "nodesPerReplica", "draftModel",
    "draftTensorParallelSize", "precisionEmulation", "cpuOffloadGib", "mirrors", "count", "tensorParalel",
    "max_model_len", "all2All", "<<"})

NASTY_STRINGS = [
    "", " ", "{{ values.x }}", "a: b", "key: value\nother: 1", "- item", "[1, 2", "{", "*alias", "&anchor", "!!binary",
    "!!python/object/apply:os.system ['true']", "%YAML 1.2", "---", "...", "#", "'", '"', "\\", "\t", "\n", "\r\n",
    "~", "null", "yes", "off", "0x1F", "0o17", "1e400", ".inf", "-.nan", "1.6.1", "0.31.0", "NixlConnector", "dspark",
    "mtp", "deepseek_mtp", "NONE", "FULL", "replay", "tune", "fp8", "fp4", "auto", "b200", "a100", "vera-rubin-nvl72",
    "VLLM_ATTENTION_BACKEND", "deepseek-ai/DeepSeek-V4.1-Flash", "nvcr.io/x/y:latest", "x@sha256:" + "a" * 64,
    "../gb300-tuned.yaml", "/", ".", "nope.yaml", "fuzz.yaml", "x" * 300, "\u202e\u0000", "日本語\u2028", "😀" * 3,
]
NASTY_INTS = [0, -1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 72, 73, 144, 1024, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63),
              2**64, 10**18, 10**308, 10**400, -(10**400)]

ints = st.one_of(st.integers(min_value=-5, max_value=2000), st.sampled_from(NASTY_INTS),
                 st.integers(min_value=-(2**80), max_value=2**80))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.0000001]))
strings = st.one_of(st.sampled_from(NASTY_STRINGS), st.text(max_size=40))
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(min_size=0, max_size=20))
scalars = st.one_of(st.none(), st.booleans(), ints, floats, strings)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)), max_leaves=12)


# --- mutations ------------------------------------------------------------------------------------


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, prefix + (key,)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_paths(value, prefix + (i,)))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


OPS = st.sampled_from(["delete", "replace", "insert", "empty", "wrap", "number", "string"])
# A fresh container per draw: sampled_from hands out the same list or dict, which a later insert would
# grow, and the next example would start from a different document (FlakyStrategyDefinition).
EMPTY = st.sampled_from([[], {}, "", None, 0]).map(copy.deepcopy)


def mutate_once(data: st.DataObject, doc: Any) -> Any:
    paths = _paths(doc)
    path = paths[data.draw(st.integers(0, len(paths) - 1), label="path")]  # no new strategy per draw: cheaper
    op = data.draw(OPS, label="op")
    if not path:  # the whole document
        return data.draw(values, label="document") if op == "replace" else doc
    parent, last = _get(doc, path[:-1]), path[-1]
    target = parent[last]
    if op == "delete":
        del parent[last]
    elif op == "replace":
        parent[last] = data.draw(values, label="value")
    elif op == "insert" and isinstance(target, dict):
        target[data.draw(keys, label="key")] = data.draw(values, label="value")
    elif op == "insert" and isinstance(target, list):
        target.insert(data.draw(st.integers(0, len(target)), label="at"), data.draw(values, label="item"))
    elif op == "empty":
        parent[last] = data.draw(EMPTY, label="empty")
    elif op == "wrap":
        parent[last] = [[target], {"value": target}, {"nested": {"deeper": [target]}}][data.draw(st.integers(0, 2))]
    elif op == "number":
        parent[last] = data.draw(st.one_of(ints, floats), label="number")
    else:
        parent[last] = data.draw(strings, label="string")
    return doc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(FUZZ, max_examples=int(600 * SCALE))
@given(data=st.data())
def test_mutated_profiles_only_raise_stackpin_errors(workdir: Path, data: st.DataObject) -> None:
    doc = base_doc(data.draw(st.sampled_from(BASES), label="base"))
    for _ in range(data.draw(st.integers(1, 5), label="mutations")):
        doc = mutate_once(data, doc)
    path = workdir / "fuzz.yaml"
    path.write_text(dump(doc), encoding="utf-8", errors="surrogatepass")
    check_file(path)


@settings(FUZZ, max_examples=int(150 * SCALE))
@given(data=st.data())
def test_mutated_overlays_only_raise_stackpin_errors(workdir: Path, data: st.DataObject) -> None:
    """An overlay that extends a shipped profile, with random fields of its own."""
    overlay: Any = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile",
                    "extends": str(SHIPPED[0].parent / f"{data.draw(st.sampled_from(BASES))}.yaml")}
    for _ in range(data.draw(st.integers(1, 4), label="fields")):
        path = data.draw(st.lists(st.sampled_from(KNOWN_KEYS), min_size=1, max_size=4), label="field path")
        node = overlay
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = data.draw(values, label="value")
    if not isinstance(overlay.get("extends"), str):
        overlay["extends"] = data.draw(strings, label="extends")
    target = workdir / "overlay.yaml"
    target.write_text(dump(overlay), encoding="utf-8", errors="surrogatepass")
    check_file(target)


YAMLISH = st.text(alphabet=st.sampled_from(list(":-[]{},&*!|>'\"%@`#?~\n\t \\.0123456789abcxyzé\u0085\ufeff")),
                  max_size=200)


@settings(FUZZ, max_examples=int(600 * SCALE))
@given(raw=st.one_of(st.binary(max_size=300), YAMLISH.map(str.encode), st.text(max_size=200).map(
    lambda t: t.encode("utf-8", "surrogatepass"))))
def test_random_bytes_only_raise_stackpin_errors(workdir: Path, raw: bytes) -> None:
    path = workdir / "bytes.yaml"
    path.write_bytes(raw)
    check_file(path)


@settings(FUZZ, max_examples=int(250 * SCALE))
@given(data=st.data())
def test_spliced_profile_text_only_raises_stackpin_errors(workdir: Path, data: st.DataObject) -> None:
    """Random text cut into a real profile's text: reaches the loader's deeper paths more often."""
    text = dump(base_doc(data.draw(st.sampled_from(BASES), label="base")))
    for _ in range(data.draw(st.integers(1, 3), label="splices")):
        start = data.draw(st.integers(0, len(text)), label="start")
        end = data.draw(st.integers(start, min(len(text), start + 20)), label="end")
        text = text[:start] + data.draw(st.one_of(YAMLISH, st.sampled_from(NASTY_STRINGS)), label="insert") + text[end:]
    path = workdir / "spliced.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check_file(path)
