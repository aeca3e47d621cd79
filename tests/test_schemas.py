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
from tests.helpers import mutate

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
    # 12 from Dynamo's examples and recipes, 10 vLLM and 2 SGLang DGDs of the ai-dynamo 1.6.1 wheel (NOTICE names each).
    assert len(UPSTREAM_FILES) == 24


# Upstream's own files that Dynamo's webhook, as read (docs/facts.md#admission-and-rollouts), refuses:
# a 17-character multinode service leaves the PodCliqueSet name 8 characters, one over the Grove budget.
REFUSED_UPSTREAM = {
    "recipes_deepseek-v4_deepseek-v4-pro_vllm_disagg_gb200_deploy.yaml": [
        "spec.services.VllmPrefillWorker: Grove names of 'VllmPrefillWorker' are 46 characters"],
}


@pytest.mark.parametrize("path", UPSTREAM_FILES, ids=lambda p: p.name)
def test_upstream_example_validates(path: Path) -> None:
    errors = [f"{e.path}: {e.reason}" for e in validate_paths([path])]
    expected = REFUSED_UPSTREAM.get(path.name, [])
    assert len(errors) == len(expected) and all(e.startswith(x) for e, x in zip(errors, expected, strict=True)), errors


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
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "probe", "namespace": "serving"},
    "spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]},
}
JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "download"},
    "spec": {"backoffLimit": 3, "template": {"spec": copy.deepcopy(POD["spec"])}},
}
SOURCES = {
    "agg": lambda: load(V1BETA1_AGG),
    "disagg": lambda: load(V1BETA1_DISAGG),
    "v1alpha1": lambda: load(V1ALPHA1),
    "compute-domain": lambda: load(COMPUTE_DOMAIN, "ComputeDomain"),
    "pod": lambda: copy.deepcopy(POD),
    "job": lambda: copy.deepcopy(JOB),
}
C0, C1 = ("spec", "components", 0), ("spec", "components", 1)


@pytest.mark.parametrize("source, edit, value, resource, path, reason", [
    pytest.param("agg", (*C0, "replicaz"), 2, "DynamoGraphDeployment/vllm-agg", "spec.components[0].replicaz",
                 "unknown field", id="unknown-field-in-component"),
    pytest.param("agg", (*C1, "replicas"), "two", "DynamoGraphDeployment/vllm-agg", "spec.components[1].replicas",
                 ("integer", '"two"'), id="wrong-type-for-replicas"),
    pytest.param("agg", (*C1, "type"), "gpu-worker", "DynamoGraphDeployment/vllm-agg", "spec.components[1].type",
                 ('"gpu-worker"', '"worker"'), id="component-type-enum"),
    pytest.param("v1alpha1", ("spec", "components"), load(V1BETA1_AGG)["spec"]["components"],
                 "DynamoGraphDeployment/vllm-v1-disagg-router", "spec.components", "unknown field",
                 id="v1alpha1-rejects-v1beta1-components"),
    pytest.param("disagg", ("spec", "components", 2, "podTemplate", "spec", "containers", 0, "imagee"), "x",
                 "DynamoGraphDeployment/vllm-disagg", "spec.components[2].podTemplate.spec.containers[0].imagee",
                 "unknown field", id="unknown-container-field-in-pod-template"),
    pytest.param("compute-domain", ("spec", "numNodes"), -1, "ComputeDomain/your-compute-domain", "spec.numNodes",
                 ("minimum",), id="compute-domain-negative-num-nodes"),
    pytest.param("pod", ("spec", "containers", 0, "imagePullPolicyy"), "Always", "Pod/serving/probe",
                 "spec.containers[0].imagePullPolicyy", "unknown field", id="core-pod-unknown-field"),
    pytest.param("job", ("spec", "backoffLimit"), "three", "Job/download", "spec.backoffLimit", ("integer",),
                 id="core-job-wrong-type"),
    pytest.param("pod", ("metadata", "name"), None, "Pod/serving/?", "metadata.name", "required field is missing",
                 id="core-name-required"),
])
def test_one_broken_field_is_one_error(source: str, edit: tuple[str | int, ...], value: Any, resource: str,
                                       path: str, reason: str | tuple[str, ...]) -> None:
    """A valid manifest with the field at `edit` set to `value` (None: deleted): exactly one error, at that field;
    `reason` is the whole reason, or (a tuple) words it holds."""
    obj = SOURCES[source]()
    assert errors_of(obj) == []
    error = only_error(mutate(obj, edit, value))
    assert (error.resource, error.path) == (resource, path)
    if isinstance(reason, str):
        assert error.reason == reason
    else:
        assert all(word in error.reason for word in reason), error.reason
    assert str(error) == f"test.yaml#1: {resource}: {path}: {error.reason}"


def test_compute_domain_requires_channel_not_num_nodes() -> None:
    # The CRD requires spec.channel; numNodes is optional (defaults to 0, deprecated upstream).
    domain = load(COMPUTE_DOMAIN, "ComputeDomain")
    del domain["spec"]["numNodes"]
    assert errors_of(domain) == []
    del domain["spec"]["channel"]
    error = only_error(domain)
    assert error.path == "spec.channel"
    assert error.reason == "required field is missing"


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
