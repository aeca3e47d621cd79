"""Canonical YAML: every value round-trips, whatever its characters."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from stackpin.yamlio import dump_yaml

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
