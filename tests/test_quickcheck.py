"""quickcheck answers exactly as jsonschema's Draft7Validator does, or says it is unsure.

Render trusts a "valid" from quickcheck without asking jsonschema, so a wrong yes would write an
invalid manifest. Compared on keyword corner cases and on many mutated copies of real manifests
(the upstream examples and the committed renders), against the schemas stackpin validates with.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stackpin.validate import manifests
from stackpin.validate.quickcheck import Unsure, is_valid

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "data" / "upstream"


def _objects() -> list[dict[str, Any]]:
    files = [*sorted(UPSTREAM.glob("*.yaml")), *sorted((ROOT / "manifests").rglob("*.yaml"))]
    docs = [doc for file in files for doc in yaml.safe_load_all(file.read_text(encoding="utf-8")) if doc]
    return [doc for doc in docs if manifests._crd_json_schemas().get((doc["apiVersion"], doc["kind"]))]


OBJECTS = _objects()


def _schema(obj: dict[str, Any]) -> dict[str, Any]:
    return manifests._crd_json_schemas()[(obj["apiVersion"], obj["kind"])]


def _agrees(instance: Any, schema: Any) -> bool | None:
    """quickcheck's verdict, asserted equal to jsonschema's; None when quickcheck is unsure."""
    expected = jsonschema.Draft7Validator(schema).is_valid(instance)
    try:
        got = is_valid(instance, schema)
    except Unsure:
        return None
    assert got == expected, f"quickcheck says {got}, jsonschema {expected}: {instance!r} under {schema!r}"
    return got


SCALARS = [None, True, False, 0, 1, -1, 2, 1.0, 2.0, 0.5, -0.0, float("inf"), 2**63, "", "x", "1", "true",
           "Not_A_Name", "a.b", "a" * 300, [], {}, ["x"], [1], {"a": 1}, [1, 1.0], ["a", "a"]]

CORNERS: list[tuple[dict[str, Any], list[Any]]] = [
    ({"type": "integer"}, SCALARS),
    ({"type": "number"}, SCALARS),
    ({"type": ["integer", "string"]}, SCALARS),
    ({"type": ["string", "null"]}, SCALARS),
    ({"type": "boolean"}, SCALARS),
    ({"type": "array"}, SCALARS),
    ({"type": "object"}, SCALARS),
    ({"enum": ["a", "x", 1, None]}, SCALARS),
    ({"enum": [True]}, SCALARS),
    ({"enum": [1.0, 0]}, SCALARS),
    ({"const": "x"}, SCALARS),
    ({"const": 1}, SCALARS),
    ({"minimum": 0}, SCALARS),
    ({"maximum": 1}, SCALARS),
    ({"exclusiveMinimum": 0}, SCALARS),
    ({"exclusiveMaximum": 1}, SCALARS),
    ({"multipleOf": 2}, SCALARS),
    ({"minLength": 1, "maxLength": 3}, SCALARS),
    ({"pattern": "^[a-z]+$"}, SCALARS),
    ({"pattern": "[0-9]"}, SCALARS),
    ({"minItems": 1, "maxItems": 1}, SCALARS),
    ({"uniqueItems": True}, SCALARS),
    ({"minProperties": 1, "maxProperties": 1}, SCALARS),
    ({"required": ["a"]}, SCALARS),
    ({"properties": {"a": {"type": "string"}}, "additionalProperties": False},
     [{}, {"a": "x"}, {"a": 1}, {"b": 1}, {"a": "x", "b": 1}, "x", 1]),
    ({"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     [{}, {"x-a": 1}, {"x-a": "1"}, {"b": "s"}, {"b": 1}, {"x-a": 1.0}]),
    ({"items": {"type": "integer"}}, [[], [1], [1, "a"], [1.0], "x", {}]),
    ({"items": [{"type": "integer"}]}, [[1]]),
    ({"allOf": [{"type": "integer"}, {"minimum": 2}]}, SCALARS),
    ({"anyOf": [{"type": "string"}, {"minimum": 2}]}, SCALARS),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, SCALARS),
    ({"not": {"type": "integer"}}, SCALARS),
    ({"not": {"enum": [1]}}, SCALARS),
    ({"if": {"type": "integer"}, "then": {"minimum": 1}, "else": {"type": "string"}}, SCALARS),
    ({"if": {"not": {"required": ["g"]}}, "then": {"required": ["n"]}}, [{}, {"g": 1}, {"n": 1}, 3]),
    ({"then": {"type": "string"}}, SCALARS),
    ({"$ref": "#/definitions/x", "definitions": {"x": {"type": "string"}}}, ["x"]),
    ({"type": "string", "format": "ipv4", "description": "d"}, ["x", 1]),
    ({"x-kubernetes-list-type": "atomic"}, ["x"]),
    (True, SCALARS),
    (False, SCALARS),
]


@pytest.mark.parametrize(("schema", "instances"), CORNERS, ids=[str(i) for i in range(len(CORNERS))])
def test_keyword_corner_cases_agree_with_jsonschema(schema: Any, instances: list[Any]) -> None:
    for instance in instances:
        _agrees(copy.deepcopy(instance), schema)


def test_unsure_where_not_exact() -> None:
    from decimal import Decimal

    for instance, schema in [("x", {"$ref": "#"}), ("x", {"x-kubernetes-list-type": "atomic"}),
                             ([[1]], {"uniqueItems": True}), (Decimal(1), {"type": "integer"}),
                             ([1], {"items": [{"type": "integer"}]}), (2, {"multipleOf": 0.5}),
                             ([1], {"enum": [[1]]})]:
        with pytest.raises(Unsure):
            is_valid(instance, schema)


@pytest.mark.parametrize("index", range(len(OBJECTS)))
def test_real_manifests_are_valid_without_jsonschema(index: int) -> None:
    obj = OBJECTS[index]
    assert is_valid(obj, _schema(obj)) is True


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _mutate(obj: dict[str, Any], path: tuple[Any, ...], how: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if not path:
        return out
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    target = parent[last]
    if how == "replace":
        parent[last] = copy.deepcopy(value)
    elif how == "delete":
        del parent[last]
    elif how == "add-key" and isinstance(target, dict):
        target["zzUnknown"] = copy.deepcopy(value)
    elif how == "append" and isinstance(target, list):
        target.append(copy.deepcopy(target[0] if target else value))
    elif how == "empty" and isinstance(target, (list, dict)):
        target.clear()
    return out


def _fuzz(examples: int) -> Any:
    """Seeded (derandomized) settings; STACKPIN_FUZZ_SCALE scales the number of examples."""
    return settings(derandomize=True, database=None, deadline=None, max_examples=int(examples * float(
        os.environ.get("STACKPIN_FUZZ_SCALE", "1"))), suppress_health_check=[HealthCheck.too_slow])


def _draw_mutation(data: st.DataObject, objects: Any) -> tuple[dict[str, Any], Any]:
    """One of `objects` and a mutated copy of it (a field replaced, deleted, added to or emptied)."""
    obj = data.draw(st.sampled_from(objects))
    path = data.draw(st.sampled_from(_paths(obj)))
    how = data.draw(st.sampled_from(["replace", "replace", "delete", "add-key", "append", "empty"]))
    value = data.draw(st.sampled_from(SCALARS))
    return obj, _mutate(obj, path, how, value)


@_fuzz(600)
@given(st.data())
def test_mutated_manifests_agree_with_jsonschema(data: st.DataObject) -> None:
    obj, mutated = _draw_mutation(data, OBJECTS)
    _agrees(mutated, _schema(obj))


def test_render_does_not_import_jsonschema(tmp_path: Path) -> None:
    """A valid stack renders without jsonschema: quickcheck said yes to every object."""
    lock = sorted((ROOT / "lockfiles").glob("*.lock.yaml"))[0]
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "stackpin", "render", str(lock), "--output-dir",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "stackpin.validate.quickcheck" in imported
    assert not {name for name in imported if name.split(".")[0] in ("jsonschema", "referencing")}


# Core kinds (the attestation ConfigMap): quickcheck reads the schema with Kubernetes' definitions
# inlined; its verdict must be jsonschema's on the schema as bundled, $refs and draft 2020-12 included.
CORE_OBJECTS = [doc for file in sorted((ROOT / "manifests").rglob("configmap-*.yaml"))
                for doc in yaml.safe_load_all(file.read_text(encoding="utf-8")) if doc]


def _core_agrees(instance: Any) -> bool | None:
    validator = manifests._validator("v1", "ConfigMap")
    assert validator is not None
    expected = validator._jsonschema().is_valid(instance)
    try:
        got = is_valid(instance, validator.quick)
    except Unsure:
        return None
    assert got == expected, f"quickcheck says {got}, jsonschema {expected}: {instance!r}"
    return got


def test_rendered_configmaps_are_a_plain_yes() -> None:
    assert CORE_OBJECTS and all(_core_agrees(obj) is True for obj in CORE_OBJECTS)


@_fuzz(300)
@given(st.data())
def test_mutated_configmaps_agree_with_jsonschema(data: st.DataObject) -> None:
    _, mutated = _draw_mutation(data, CORE_OBJECTS)
    _core_agrees(mutated)
