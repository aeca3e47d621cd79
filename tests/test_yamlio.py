"""Canonical YAML: every value round-trips, whatever its characters."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from stackpin.yamlio import ambiguous_scalar, dump_yaml

text = st.text(alphabet=st.characters(exclude_categories=("Cs",)))
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=500, derandomize=True)
@given(values)
def test_dump_yaml_round_trips(data: object) -> None:
    text_out = dump_yaml({"v": data})
    assert yaml.safe_load(text_out) == {"v": data}
    assert dump_yaml({"v": data}) == text_out


# Texts that take dump_yaml's own fast paths (printable ASCII lines; plain scalars up to the width) and their
# edges: spaces next to line breaks, leading and trailing breaks, a plain text longer than the width (4096).
ascii_lines = st.text(alphabet=st.sampled_from(" \n\tab#:-'\"|"), max_size=40)
long_plain = st.builds(lambda word, n: " ".join([word] * n), st.sampled_from(["a", "ab", "x:y"]),
                       st.integers(1000, 2200))
scalar_values = st.recursive(
    st.none() | st.booleans() | text | ascii_lines | long_plain,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text | ascii_lines, children, max_size=4),
    max_leaves=12,
)


def _pyyaml_alone(data: object) -> str:
    """dump_yaml's output from PyYAML's own analysis and writers (dump_yaml's dumper, its faster paths undone)."""
    from yaml.emitter import Emitter

    from stackpin.yamlio import _CanonicalDumper

    class PyYAMLAlone(_CanonicalDumper):
        analyze_scalar = Emitter.analyze_scalar  # type: ignore[assignment]
        write_plain = Emitter.write_plain  # type: ignore[assignment]
        write_literal = Emitter.write_literal  # type: ignore[assignment]

    return yaml.dump(data, Dumper=PyYAMLAlone, sort_keys=True, default_flow_style=False, allow_unicode=True,
                     width=4096)


@settings(max_examples=400, derandomize=True)
@given(st.one_of(values, scalar_values))
def test_dump_yaml_writes_what_pyyaml_alone_writes(data: object) -> None:
    """dump_yaml remembers PyYAML's analysis of each scalar text and analyses and writes printable ASCII texts
    its own faster way; the bytes are those of PyYAML's own emitter, dumped twice (the second time every text
    is remembered)."""
    plain = _pyyaml_alone({"v": data, "again": data})
    assert dump_yaml({"v": data, "again": data}) == plain == dump_yaml({"v": data, "again": data})


def test_the_rendered_manifests_are_pyyaml_s_own_bytes() -> None:
    """Every shipped stack's objects, as render writes them (the attestation script a 9 KB `|` block)."""
    from pathlib import Path

    from stackpin.lock.lockfile import read_lock
    from stackpin.render.build import build_objects

    locks = sorted((Path(__file__).resolve().parent.parent / "lockfiles").glob("*.lock.yaml"))
    assert locks
    for path in locks:
        for obj in build_objects(read_lock(path)):
            assert dump_yaml(obj) == _pyyaml_alone(obj)


# Strings some YAML 1.1 or 1.2 reader takes for a non-string when written plain. Go's yaml.v2 (what
# kubectl, Argo CD and Flux read manifests with) is the strictest: `y` is true, `08` is 8, `1_` is 1.
AMBIGUOUS = [
    # YAML 1.1 bools, any letter case
    "y", "Y", "n", "N", "yes", "Yes", "YES", "yEs", "no", "NO", "true", "True", "TRUE", "tRuE", "false", "FALSE",
    "on", "On", "ON", "off", "Off", "OFF",
    # nulls
    "", "~", "null", "Null", "NULL", "nUlL",
    # ints in every base and spelling, underscores anywhere Go's reader drops them
    "0", "-0", "+0", "00", "7", "-7", "+7", "08", "09", "0755", "0o17", "0O17", "-0o7", "0x1F", "0X1f", "+0x1F",
    "0x_1F", "0x1F_", "0b101", "0B1", "-0b101", "0b1_0", "1_000", "1_", "123_", "0_0", "0__", "+_1", "-_1", "9_9",
    "99999999999999999999", "0xFFFFFFFFFFFFFFFFFF",
    # floats
    "1.0", "1.", "0.", ".5", "+.5", "-.5", "1e3", "1E3", "1e-3", "1e+3", "12e03", "1.e5", ".5e3", ".5E+3", "09.5",
    "1_000.5", ".5_0", ".1_0", "._5", "1__e3", "1_e_3", "1e_3",
    ".inf", ".Inf", ".INF", "+.inf", "-.inf", "+.INF", ".nan", ".NaN", ".NAN", ".nAn",
    # YAML 1.1 sexagesimals
    "1:20", "190:20:30", "-1:20", "1:20.5", "1_0:20",
    # YAML 1.1 timestamps, and Go's looser spelling of them
    "2001-12-14", "2001-1-2", "2001-12-14t21:59:43.10-05:00", "2001-12-14T21:59:43.10Z",
    "2001-12-14 21:59:43.10 -5", "2001-12-15 2:59:43.10",
    # merge and value keys
    "<<", "=",
]
# Strings no reader takes for anything else: they stay plain, so manifests stay readable.
PLAIN = ["v1", "0.31.0", "1.2.3", "0.5.1", "Inf", "+Inf", "NaN", "nan", "inf", "0x", "0b", "0o", "0x1p-2", "1e", "1e+",
         "+-1", "1,000", "_1", "yess", "y1", "nope", "onn", "nil", "None", "1:2:3x", "2001-12-14x", "8Gi",
         "200Gi", "arm64", "agg", "5s", "1m", "sha256:abc", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.5.1",
         "UCX_CUDA_IPC_ENABLE_MNNVL", "--enforce-eager", "fp8", "10.0.0.1", "1-2", "12:60", "0o8", "0b2", "0xG"]


@pytest.mark.parametrize("value", AMBIGUOUS)
def test_ambiguous_strings_are_quoted(value: str) -> None:
    assert ambiguous_scalar(value)
    assert dump_yaml({"k": value}) == f"k: '{value}'\n"
    text = dump_yaml({value: value})  # keys too: Go reads `y: 1` as {"true": 1}
    assert text.startswith(("'", "? '")) and yaml.safe_load(text) == {value: value}, text


@pytest.mark.parametrize("value", PLAIN)
def test_unambiguous_strings_stay_plain(value: str) -> None:
    assert not ambiguous_scalar(value)
    assert dump_yaml({"k": value}) == f"k: {value}\n"
    assert yaml.safe_load(dump_yaml({value: value})) == {value: value}


def test_non_strings_stay_plain() -> None:
    assert dump_yaml({"a": True, "b": None, "c": 8, "d": 0.5, "e": [1, "1"]}) == (
        "a: true\nb: null\nc: 8\nd: 0.5\ne:\n- 1\n- '1'\n")


def test_the_yaml_loader_is_chosen_in_yamlio_only() -> None:
    import re
    from pathlib import Path

    from stackpin.yamlio import SAFE_LOADER, load_data

    assert load_data("a: [1, 2]\nb: '2024-01-01'\n") == {"a": [1, 2], "b": "2024-01-01"}
    assert SAFE_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    package = Path(__file__).resolve().parent.parent / "stackpin"
    choosing = re.compile(r"yaml\.(safe_load|load)\(|CSafeLoader|\byaml\.SafeLoader\)")
    found = [f"{path.relative_to(package)}:{n}" for path in sorted(package.rglob("*.py")) if path.name != "yamlio.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if choosing.search(line)]
    assert not found, "read YAML with stackpin.yamlio (load_data, load_yaml, SAFE_LOADER):\n" + "\n".join(found)
