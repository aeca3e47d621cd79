"""Schema validation against real upstream manifests, and broken copies of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from stackpin.errors import InputError
from stackpin.validate import manifests as schemas
from stackpin.validate.manifests import ManifestError, validate_objects, validate_paths

UPSTREAM = Path(__file__).parent / "data" / "upstream"
UPSTREAM_FILES = sorted(UPSTREAM.glob("*.yaml"))


def load(name: str, kind: str = "DynamoGraphDeployment") -> dict[str, Any]:
    """A fresh copy of the first document of `kind` in an upstream file."""
    docs = yaml.safe_load_all((UPSTREAM / name).read_text())
    return copy.deepcopy(next(d for d in docs if d and d["kind"] == kind))


def errors_of(obj: dict[str, Any]) -> list[ManifestError]:
    return validate_objects([("test.yaml#1", obj)])


def only_error(obj: dict[str, Any]) -> ManifestError:
    errors = errors_of(obj)
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


def test_upstream_examples_are_all_here() -> None:
    assert len(UPSTREAM_FILES) == 12


@pytest.mark.parametrize("path", UPSTREAM_FILES, ids=lambda p: p.name)
def test_upstream_example_validates(path: Path) -> None:
    assert [str(e) for e in validate_paths([path])] == []


def test_upstream_examples_cover_every_bundled_kind() -> None:
    kinds = {
        (doc["apiVersion"], doc["kind"])
        for path in UPSTREAM_FILES
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    }
    assert {
        ("nvidia.com/v1alpha1", "DynamoGraphDeployment"),
        ("nvidia.com/v1beta1", "DynamoGraphDeployment"),
        ("resource.nvidia.com/v1beta1", "ComputeDomain"),
        ("v1", "ConfigMap"),
    } <= kinds


V1BETA1_AGG = "examples_backends_vllm_deploy_v1beta1_agg.yaml"
V1BETA1_DISAGG = "examples_backends_vllm_deploy_v1beta1_disagg.yaml"
V1ALPHA1 = "v1alpha1_examples_backends_vllm_deploy_disagg_router.yaml"
COMPUTE_DOMAIN = "recipes_kimi-k2.5_model-cache_compute-domain.yaml"


def test_unknown_field_in_component() -> None:
    dgd = load(V1BETA1_AGG)
    dgd["spec"]["components"][0]["replicaz"] = 2
    error = only_error(dgd)
    assert error.path == "spec.components[0].replicaz"
    assert error.reason == "unknown field"
    assert error.resource == "DynamoGraphDeployment/vllm-agg"
    assert str(error) == (
        "test.yaml#1: DynamoGraphDeployment/vllm-agg: spec.components[0].replicaz: unknown field"
    )


def test_wrong_type_for_replicas() -> None:
    dgd = load(V1BETA1_AGG)
    dgd["spec"]["components"][1]["replicas"] = "two"
    error = only_error(dgd)
    assert error.path == "spec.components[1].replicas"
    assert "integer" in error.reason and '"two"' in error.reason


def test_component_type_enum() -> None:
    dgd = load(V1BETA1_AGG)
    dgd["spec"]["components"][1]["type"] = "gpu-worker"
    error = only_error(dgd)
    assert error.path == "spec.components[1].type"
    assert '"gpu-worker"' in error.reason and '"worker"' in error.reason


def test_v1alpha1_rejects_v1beta1_components() -> None:
    dgd = load(V1ALPHA1)
    dgd["spec"]["components"] = load(V1BETA1_AGG)["spec"]["components"]
    error = only_error(dgd)
    assert error.path == "spec.components"
    assert error.reason == "unknown field"


def test_unknown_container_field_in_pod_template() -> None:
    dgd = load(V1BETA1_DISAGG)
    dgd["spec"]["components"][2]["podTemplate"]["spec"]["containers"][0]["imagee"] = "x"
    error = only_error(dgd)
    assert error.path == "spec.components[2].podTemplate.spec.containers[0].imagee"
    assert error.reason == "unknown field"


def test_compute_domain_requires_channel_not_num_nodes() -> None:
    # The CRD requires spec.channel; numNodes is optional (defaults to 0, deprecated upstream).
    domain = load(COMPUTE_DOMAIN, "ComputeDomain")
    del domain["spec"]["numNodes"]
    assert errors_of(domain) == []
    del domain["spec"]["channel"]
    error = only_error(domain)
    assert error.path == "spec.channel"
    assert error.reason == "required field is missing"


def test_compute_domain_num_nodes_must_be_non_negative_integer() -> None:
    domain = load(COMPUTE_DOMAIN, "ComputeDomain")
    domain["spec"]["numNodes"] = -1
    error = only_error(domain)
    assert error.path == "spec.numNodes"
    assert "minimum" in error.reason


def test_all_errors_reported_sorted_by_path() -> None:
    dgd = load(V1BETA1_AGG)
    dgd["spec"]["components"][1]["replicas"] = "two"
    dgd["spec"]["components"][0]["replicaz"] = 1
    dgd["spec"]["bogus"] = True
    dgd["metadata"]["name"] = "Not_A_Name"
    assert [e.path for e in errors_of(dgd)] == [
        "metadata.name",
        "spec.bogus",
        "spec.components[0].replicaz",
        "spec.components[1].replicas",
    ]


def test_metadata_is_checked() -> None:
    dgd = load(V1BETA1_AGG)
    dgd["metadata"] = {"labels": {"app.kubernetes.io/part-of": 3}}
    errors = errors_of(dgd)
    assert [(e.path, e.reason) for e in errors] == [
        ('metadata.labels["app.kubernetes.io/part-of"]', "expected string, got integer 3"),
        ("metadata.name", "required field is missing"),
    ]
    dgd["metadata"] = {"generateName": "agg-"}
    assert errors_of(dgd) == []


POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "probe", "namespace": "serving"},
    "spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]},
}


def test_core_pod_valid_and_unknown_field() -> None:
    assert errors_of(copy.deepcopy(POD)) == []
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    error = only_error(pod)
    assert error.resource == "Pod/serving/probe"
    assert error.path == "spec.containers[0].imagePullPolicyy"
    assert error.reason == "unknown field"


def test_core_job_wrong_type() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "download"},
        "spec": {"backoffLimit": "three", "template": {"spec": copy.deepcopy(POD["spec"])}},
    }
    error = only_error(job)
    assert error.path == "spec.backoffLimit"
    assert "integer" in error.reason


def test_core_name_required() -> None:
    pod = copy.deepcopy(POD)
    del pod["metadata"]["name"]
    error = only_error(pod)
    assert (error.path, error.reason) == ("metadata.name", "required field is missing")


def test_unknown_kind_and_kustomization() -> None:
    errors = validate_objects([
        ("a.yaml#1", {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        ("a.yaml#2", {"apiVersion": "resource.nvidia.com/v1", "kind": "ResourceClaimTemplate"}),
        ("a.yaml#3", {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}),
        ("a.yaml#4", {"kind": "Pod"}),
    ])
    assert [str(e) for e in errors] == [
        "a.yaml#1: Widget/w: no schema for example.com/v1/Widget",
        "a.yaml#2: ResourceClaimTemplate/?: no schema for resource.nvidia.com/v1/ResourceClaimTemplate",
        "a.yaml#4: Pod/?: apiVersion and kind must be set",
    ]


def test_validator_is_built_once_per_kind() -> None:
    errors_of(load(V1BETA1_AGG))
    before = schemas._validator.cache_info()
    errors_of(load(V1BETA1_AGG))
    after = schemas._validator.cache_info()
    assert (after.misses, after.hits) == (before.misses, before.hits + 1)


def test_structural_schema_transform() -> None:
    converted = schemas._structural_to_json_schema({
        "type": "object",
        "description": "dropped",
        "properties": {
            "port": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                     "x-kubernetes-int-or-string": True},
            "note": {"type": "string", "nullable": True, "format": "byte"},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "typed": {"type": "object", "properties": {"a": {"type": "string"}}},
            "raw": {"type": "object", "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True},
            "bound": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
        },
    })
    props = converted["properties"]
    assert converted["additionalProperties"] is False and "description" not in converted
    assert props["port"] == {"type": ["integer", "string"]}
    assert props["note"] == {"type": ["string", "null"]}
    assert props["free"] == {"type": "object"}
    assert props["typed"]["additionalProperties"] is False
    assert props["raw"]["required"] == ["apiVersion", "kind"]
    assert "additionalProperties" not in props["raw"]
    assert props["bound"] == {"type": "integer", "exclusiveMinimum": 0}


def test_validate_paths_walks_directories(tmp_path: Path) -> None:
    nested = tmp_path / "overlays" / "prod"
    nested.mkdir(parents=True)
    (tmp_path / "agg.yaml").write_text((UPSTREAM / V1BETA1_AGG).read_text())
    bad = load(V1BETA1_AGG)
    bad["spec"]["components"][0]["replicaz"] = 1
    (nested / "bad.yml").write_text("---\n" + yaml.safe_dump(POD) + "---\n" + yaml.safe_dump(bad))
    # Not resources: a kustomization and a file that is not YAML by name.
    (nested / "kustomization.yaml").write_text("resources: [bad.yml]\n")
    (nested / "notes.txt").write_text("not: [yaml\n")
    errors = validate_paths([tmp_path])
    assert [str(e) for e in errors] == [
        f"{nested / 'bad.yml'}#2: DynamoGraphDeployment/vllm-agg: "
        "spec.components[0].replicaz: unknown field"
    ]


def test_bad_yaml_is_input_error_with_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n")
    with pytest.raises(InputError) as caught:
        validate_paths([broken, tmp_path / "missing.yaml"])
    lines = caught.value.lines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{broken}:5:1: invalid YAML")
    assert lines[1] == f"{tmp_path / 'missing.yaml'}: no such file or directory"


def test_timestamps_stay_strings(tmp_path: Path) -> None:
    # kubectl turns YAML into JSON with timestamps as strings; an annotation may hold a date.
    config = tmp_path / "cm.yaml"
    config.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n"
        "  annotations:\n    released: 2026-05-01\ndata:\n  day: 2026-05-01\n"
    )
    assert validate_paths([config]) == []


def test_non_mapping_document(tmp_path: Path) -> None:
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert [str(e) for e in validate_paths([listing])] == [
        f"{listing}#1: ?: not a Kubernetes object (expected a mapping)"
    ]


def test_crd_extract_is_in_step_with_the_bundled_crds() -> None:
    from stackpin.validate.manifests import _CRD_EXTRACT, crd_extract

    assert _CRD_EXTRACT.read_text(encoding="utf-8") == crd_extract(), "run `make crds`"


def test_nothing_to_validate_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a manifest\n")
    with pytest.raises(InputError, match="holds no Kubernetes objects"):
        validate_paths([tmp_path])
