"""Closed sets are StrEnums: compared, printed and written (JSON, YAML) exactly as the plain strings were."""

from __future__ import annotations

import json
from enum import StrEnum

import pytest

from stackpin.catalog import PlatformKind, load_catalog
from stackpin.deploy.objects import Action
from stackpin.profile.topology import ROLES, Role
from stackpin.render.output import Drift, DriftStatus
from stackpin.yamlio import dump_yaml


@pytest.mark.parametrize("enum", [Action, DriftStatus, Role, PlatformKind])
def test_members_write_as_their_values(enum: type[StrEnum]) -> None:
    for member in enum:
        assert member == member.value and f"{member}" == member.value
        assert json.dumps({"k": member}) == json.dumps({"k": member.value})
        assert dump_yaml({"k": member}) == dump_yaml({"k": member.value})


def test_the_sets_are_what_the_strings_were() -> None:
    assert [a.value for a in Action] == ["created", "configured", "unchanged", "recreated", "pruned"]
    assert str(Drift("m/x.yaml", DriftStatus.extra)) == "extra    m/x.yaml"
    assert {r for roles in ROLES.values() for r in roles} == set(Role)
    assert {p.kind for p in load_catalog().platforms.values()} == set(PlatformKind)
