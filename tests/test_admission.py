"""`validate --manifests` refuses what the API server (the CRDs' CEL rules) and Dynamo's admission webhook
refuse on create (stackpin/validate/admission.py): a shipped DGD mutated into each case is refused in one
line naming the file and the field; where the real kube-apiserver evaluates the same CEL rules, stackpin's
verdict is the server's."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from click.testing import CliRunner

from stackpin.catalog import load_catalog
from stackpin.cli.main import main
from stackpin.validate.admission import (
    GroveComponent,
    crd_rules,
    grove_name_length,
    parse_quantity,
    pcs_name,
    unknown_functions,
)
from stackpin.validate.manifests import crd_schemas_from_yaml, validate_objects
from tests.kube import DGD, Kube

ROOT = Path(__file__).resolve().parent.parent
[SHIPPED] = (ROOT / "manifests" / "gb300-disagg-wide-ep").glob("dynamographdeployment-*.yaml")

Mutation = Callable[[dict[str, Any]], None]


class Case(NamedTuple):
    name: str
    mutation: Mutation
    field: str  # what the error line names
    message: str


def components(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["spec"]["components"])  # frontend, prefill, decode (multinode, 4 nodes)


def base() -> dict[str, Any]:
    return dict(yaml.safe_load(SHIPPED.read_text(encoding="utf-8")))


def set_in(path: tuple[Any, ...], value: Any) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        node: Any = obj
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


def add_sidecar(obj: dict[str, Any]) -> None:
    components(obj)[2]["podTemplate"]["spec"]["containers"].append({"name": "log-shipper"})


# The webhook's checks and the newer (1.5+) CRD's rules.
DYNAMO_CASES = [Case(*c) for c in [
    ("no components", set_in(("spec", "components"), []), "spec.components", "must have at least one component"),
    ("multinode frontend", set_in(("spec", "components", 0, "multinode"), {"nodeCount": 2}),
     "spec.components[0].multinode", "multinode is supported only for worker, prefill, or decode components"),
    ("negative shared memory", set_in(("spec", "components", 1, "sharedMemorySize"), "-1Gi"),
     "spec.components[1].sharedMemorySize", "must be non-negative"),
    ("restart at create", set_in(("spec", "restart"), {"id": "r1"}), "spec.restart",
     "spec.restart must be unset on create"),
    ("sidecar without image", add_sidecar, "spec.components[2].podTemplate.spec.containers[1].image",
     "sidecar containers must specify a non-empty image"),
    ("grove name budget", set_in(("spec", "components", 2, "name"), "decode-wide-expert"), "spec.components[2].name",
     "Grove names of 'decode-wide-expert' are 48 characters"),
]]
# The bundled CRD's own CEL rules, which the API server evaluates too.
CRD_CASES = [Case(*c) for c in [
    ("names equal ignoring case", set_in(("spec", "components", 1, "name"), "Frontend"), "spec.components",
     "component names must be unique case-insensitively"),
    ("two epp components", lambda o: [c.update(type="epp") for c in components(o)[:2]], "spec.components",
     "at most one component may have type epp"),
    ("eppConfig off an epp component",
     set_in(("spec", "components", 1, "eppConfig"), {"configMapRef": {"name": "e", "key": "k"}}),
     "spec.components[1]", "eppConfig may only be set when type is epp"),
]]


def mutated(mutation: Mutation) -> dict[str, Any]:
    obj = base()
    mutation(obj)
    return obj


@pytest.mark.parametrize("case", DYNAMO_CASES + CRD_CASES, ids=lambda c: c.name)
def test_validate_manifests_refuses_in_one_line_naming_file_and_field(tmp_path: Path, case: Case) -> None:
    path = tmp_path / SHIPPED.name
    path.write_text(yaml.safe_dump(mutated(case.mutation)), encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "--manifests", str(path)])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if case.message in line]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"{path}#1: DynamoGraphDeployment/dynamo/dsv41-flash: {case.field}: "), lines[0]


def test_the_shipped_dgd_passes_and_each_case_breaks_only_its_rule() -> None:
    assert validate_objects([("x", base())]) == []
    errors = validate_objects([("x", mutated(set_in(("spec", "components", 0, "multinode"), {"nodeCount": 2})))])
    assert [e.path for e in errors] == ["spec.components[0].multinode"]


def test_every_bundled_crd_rule_is_one_stackpin_evaluates() -> None:
    rules = [r for schema in crd_schemas_from_yaml().values() for r in crd_rules(schema)]
    assert len(rules) >= 20
    assert {r.rule: unknown_functions(r.rule) for r in rules if unknown_functions(r.rule)} == {}
    dynamo = load_catalog().dynamo_admission.rules
    assert {r.rule: unknown_functions(r.rule) for r in dynamo if unknown_functions(r.rule)} == {}
    assert all(r.source for r in dynamo)


def test_quantities_and_the_operators_pcs_name() -> None:
    assert parse_quantity("-1Gi") == -(2**30) and parse_quantity("200Gi") == 200 * 2**30
    assert parse_quantity("500m") * 2 == 1 and parse_quantity("1e3") == 1000
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("1GB")
    facts = load_catalog().dynamo_admission.grove_names
    comps = [GroveComponent("frontend", False), GroveComponent("prefill", False), GroveComponent("decode", True)]
    # budget 45 - (6 + len("decode-ldr")) = 29: a longer name is cut to 24 + "-" + FNV-1a's low 16 bits.
    assert pcs_name("a" * 29, comps, facts) == "a" * 29
    assert pcs_name("a" * 30, comps, facts) == "a" * 24 + "-b5c3"  # FNV-1a-32("a" * 30) = 0x....b5c3
    assert [grove_name_length("a" * 60, comps, c, facts) for c in comps] == [37, 36, 45]


# --- the same verdict as the API server --------------------------------------------------------------

def server_verdict(kube: Kube, obj: dict[str, Any]) -> tuple[bool, str]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = kube.namespace
    status, data = kube.env.request("POST", kube.path(DGD, "dynamographdeployments") + "?dryRun=All", obj)
    assert status in (200, 201, 422), (status, data)
    return status == 422, str(data.get("message", "")) if isinstance(data, dict) else str(data)


@pytest.mark.parametrize("case", CRD_CASES, ids=lambda c: c.name)
def test_crd_rules_give_the_api_servers_verdict(kube: Kube, case: Case) -> None:
    obj = mutated(case.mutation)
    refused, text = server_verdict(kube, obj)
    errors = validate_objects([("x", obj)])
    assert refused and bool(errors), (text, errors)
    assert case.message in text and any(case.message in e.reason for e in errors)
    assert server_verdict(kube, base()) == (False, "")


@pytest.mark.parametrize("case", DYNAMO_CASES, ids=lambda c: c.name)
def test_dynamo_rules_are_what_a_bare_api_server_lets_through(kube: Kube, case: Case) -> None:
    # No operator here: the webhook and the newer CRD's rules are stackpin's to check before apply.
    obj = mutated(case.mutation)
    assert server_verdict(kube, obj)[0] is False
    assert validate_objects([("x", obj)])
