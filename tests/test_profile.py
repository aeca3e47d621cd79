"""Profile loading: shipped profiles, `extends` merging, located input errors, the JSON schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.errors import InputError, StackpinError
from stackpin.profile.loader import load_profile
from stackpin.profile.model import profile_json_schema
from stackpin.validate import run_rules
from tests.helpers import NULL, SCHEMA_FILE, SHIPPED, apply, base_doc, dump, line_of, load_doc, write_profile

W = "spec.placement.pools.worker"


def _problem(exc: pytest.ExceptionInfo[InputError]) -> str:
    assert len(exc.value.problems) >= 1
    return str(exc.value.problems[0])


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- shipped profiles --------------------------------------------------------------------------


def test_profiles_are_shipped() -> None:
    assert len(SHIPPED) >= 6


@pytest.mark.parametrize("profile", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_loads_without_errors(profile: Path) -> None:
    loaded = load_profile(profile)
    assert loaded.profile.api_version == "stackpin.dev/v1"
    assert loaded.sources[0] == profile
    assert "extends" not in loaded.document
    findings = run_rules(loaded)
    assert [str(f) for f in findings if f.severity == "error"] == []


def test_shipped_overlays_really_extend() -> None:
    rubin = load_profile(SHIPPED[0].parent / "vera-rubin-tuned.yaml")
    assert [p.name for p in rubin.sources] == ["vera-rubin-tuned.yaml", "gb300-tuned.yaml"]
    assert rubin.profile.spec.target.platform == "vera-rubin-nvl72"
    assert rubin.profile.spec.placement.pools.worker.replicas == 18  # inherited
    wide = load_profile(SHIPPED[0].parent / "vera-rubin-disagg-wide-ep.yaml")
    assert len(wide.sources) == 3
    assert wide.profile.spec.placement.pools.worker is None  # `worker: null` in the middle file


# --- extends ------------------------------------------------------------------------------------


def _overlay(extends: str, **fields: object) -> dict:
    doc: dict = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile", "extends": extends}
    return apply(doc, fields)


def test_extends_merges_maps_and_replaces_lists(tmp_path: Path) -> None:
    base = apply(base_doc(), {"spec.cudaGraphs.captureSizes": [6, 12, 18], "spec.cudaGraphs.maxCaptureSize": 18,
                              "spec.fallbacks.precisionEmulation": ["fp8"]})
    write_profile(tmp_path, base, "base.yaml")
    overlay = _overlay("base.yaml")
    apply(overlay, {"metadata.name": "child", "spec.cudaGraphs.captureSizes": [24],
                    "spec.cudaGraphs.maxCaptureSize": 24, "spec.kernels.env.EXTRA": "1",
                    f"{W}.replicas": 9, "spec.fallbacks.precisionEmulation": []})
    loaded = load_doc(tmp_path, overlay, "child.yaml")
    spec = loaded.profile.spec
    assert loaded.profile.metadata.name == "child"
    assert loaded.profile.metadata.deployment == "dsv41-flash"  # sibling key kept from the base
    assert spec.cuda_graphs.capture_sizes == [24]  # list replaced, not concatenated
    assert spec.cuda_graphs.mode == "FULL_AND_PIECEWISE"  # sibling kept
    assert spec.fallbacks.precision_emulation == []  # an empty list replaces too
    assert spec.kernels.env == {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "VLLM_DEEP_GEMM_WARMUP": "full", "EXTRA": "1"}
    assert spec.placement.pools.worker.replicas == 9
    assert spec.placement.pools.worker.tensor_parallel == 4  # deep: pool keys merged
    assert [p.name for p in loaded.sources] == ["child.yaml", "base.yaml"]


def test_extends_null_removes_a_base_map(tmp_path: Path) -> None:
    write_profile(tmp_path, base_doc("gb300-disagg-wide-ep"), "base.yaml")
    overlay = _overlay("base.yaml")
    apply(overlay, {"spec.placement.mode": "colocated", "spec.placement.kvConnector": NULL,
                    "spec.placement.pools.prefill": NULL, "spec.placement.pools.decode": NULL,
                    W: {"replicas": 18, "tensorParallel": 4}})
    spec = load_doc(tmp_path, overlay, "child.yaml").profile.spec
    assert spec.placement.pools.prefill is None and spec.placement.pools.decode is None
    assert spec.placement.pools.worker.tensor_parallel == 4


def test_field_from_base_is_located_in_base(tmp_path: Path) -> None:
    base = apply(base_doc(), {f"{W}.replicas": "two"})
    base_text = dump(base)
    _write(tmp_path / "base.yaml", base_text)
    child = write_profile(tmp_path, _overlay("base.yaml", **{"metadata.name": "child"}), "child.yaml")
    with pytest.raises(InputError) as exc:
        load_profile(child)
    line, col = line_of(base_text, f"{W}.replicas")
    assert _problem(exc).startswith(f"{tmp_path / 'base.yaml'}:{line}:{col}: {W}.replicas: ")


def test_field_overridden_in_overlay_is_located_in_overlay(tmp_path: Path) -> None:
    write_profile(tmp_path, base_doc(), "base.yaml")
    overlay = _overlay("base.yaml", **{f"{W}.replicas": 0})
    text = dump(overlay)
    child = _write(tmp_path / "child.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(child)
    line, col = line_of(text, f"{W}.replicas")
    assert _problem(exc).startswith(f"{child}:{line}:{col}: {W}.replicas: ")


def test_replaced_list_items_located_in_overlay(tmp_path: Path) -> None:
    """Lists replace: a bad item in the overlay's list points at the overlay, never at a base item."""
    write_profile(tmp_path, apply(base_doc(), {"spec.cudaGraphs.captureSizes": [6, 12, 18, 24]}), "base.yaml")
    overlay = _overlay("base.yaml", **{"spec.cudaGraphs.captureSizes": [6, 0]})
    text = dump(overlay)
    child = _write(tmp_path / "child.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(child)
    message = _problem(exc)
    assert message.startswith(f"{child}:")
    assert "spec.cudaGraphs.captureSizes.1" in message


def test_three_level_chain(tmp_path: Path) -> None:
    write_profile(tmp_path, base_doc(), "a.yaml")
    write_profile(tmp_path, _overlay("a.yaml", **{f"{W}.replicas": 9}), "b.yaml")
    (tmp_path / "sub").mkdir()
    write_profile(tmp_path / "sub", _overlay("../b.yaml", **{"metadata.name": "c"}), "c.yaml")
    loaded = load_profile(tmp_path / "sub" / "c.yaml")
    assert [p.name for p in loaded.sources] == ["c.yaml", "b.yaml", "a.yaml"]
    assert loaded.profile.spec.placement.pools.worker.replicas == 9
    assert loaded.profile.name == "c"


def test_extends_cycle(tmp_path: Path) -> None:
    write_profile(tmp_path, _overlay("b.yaml"), "a.yaml")
    write_profile(tmp_path, _overlay("a.yaml"), "b.yaml")
    with pytest.raises(InputError, match="extends cycle") as exc:
        load_profile(tmp_path / "a.yaml")
    assert "a.yaml" in str(exc.value) and "b.yaml" in str(exc.value)


def test_extends_self(tmp_path: Path) -> None:
    write_profile(tmp_path, _overlay("self.yaml"), "self.yaml")
    with pytest.raises(InputError, match="extends cycle"):
        load_profile(tmp_path / "self.yaml")


def test_extends_missing_target(tmp_path: Path) -> None:
    text = dump(_overlay("nope.yaml"))
    path = _write(tmp_path / "child.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line, col = line_of(text, "extends")
    assert _problem(exc) == f"{path}:{line}:{col}: extends: base profile 'nope.yaml' not found"


@pytest.mark.parametrize("value", [5, [], {"a": 1}, "", "x" * 300, "dir/"], ids=repr)
def test_extends_bad_values(tmp_path: Path, value: object) -> None:
    (tmp_path / "dir").mkdir()
    path = write_profile(tmp_path, _overlay(value), "child.yaml")  # type: ignore[arg-type]
    with pytest.raises(InputError) as exc:
        load_profile(path)
    assert "extends" in _problem(exc)


def test_extends_base_with_bad_yaml_names_base(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "spec: [1, 2\n")
    path = write_profile(tmp_path, _overlay("base.yaml"), "child.yaml")
    with pytest.raises(InputError, match="invalid YAML") as exc:
        load_profile(path)
    assert _problem(exc).startswith(str(tmp_path / "base.yaml") + ":")


# --- located input errors -----------------------------------------------------------------------


def _shipped_text() -> str:
    return (SHIPPED[0].parent / "gb300-tuned.yaml").read_text(encoding="utf-8")


def _line_containing(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_bad_yaml_tab(tmp_path: Path) -> None:
    text = _shipped_text().replace("\n  model:", "\n\tmodel:")
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line = _line_containing(text, "\tmodel:")
    assert re.match(rf"^{re.escape(str(path))}:{line}:\d+: invalid YAML", _problem(exc))


def test_bad_yaml_unclosed_bracket(tmp_path: Path) -> None:
    text = _shipped_text().replace("captureSizes: [6, 12, 24, 48, 96, 192, 384]", "captureSizes: [6, 12")
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    assert re.match(rf"^{re.escape(str(path))}:\d+:\d+: invalid YAML: ", _problem(exc))


def test_unknown_key_with_suggestion(tmp_path: Path) -> None:
    text = _shipped_text().replace("tensorParallel: 4", "tensorParalel: 4")
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line = _line_containing(text, "tensorParalel")
    assert _problem(exc) == (f"{path}:{line}:9: {W}.tensorParalel: unknown field (did you mean 'tensorParallel'?)")


def test_unknown_key_without_close_match(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {"spec.zzzzqqq": 1}))
    with pytest.raises(InputError) as exc:
        load_profile(path)
    assert _problem(exc).endswith("spec.zzzzqqq: unknown field")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {"metdata": {"name": "x"}}))
    with pytest.raises(InputError) as exc:
        load_profile(path)
    assert "metdata: unknown field (did you mean 'metadata'?)" in str(exc.value)


def test_wrong_type_names_field(tmp_path: Path) -> None:
    text = _shipped_text().replace("replicas: 18", "replicas: two")
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line = _line_containing(text, "replicas: two")
    assert _problem(exc).startswith(f"{path}:{line}:9: {W}.replicas: ")
    assert "integer" in _problem(exc)


def test_bad_enum_names_value(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {"spec.target.platform": "gb400"}))
    with pytest.raises(InputError) as exc:
        load_profile(path)
    assert "spec.target.platform:" in _problem(exc) and "'gb400'" in _problem(exc)


def test_missing_required_field(tmp_path: Path) -> None:
    doc = apply(base_doc(), {"spec.service": None})
    text = dump(doc)
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line, col = line_of(text, "spec")  # the parent that lacks it
    assert _problem(exc) == f"{path}:{line}:{col}: spec.service: required field is missing"


def test_every_problem_reported(tmp_path: Path) -> None:
    doc = apply(base_doc(), {f"{W}.replicas": "two", "spec.model.maxModelLen": 0, "spec.bogus": 1})
    with pytest.raises(InputError) as exc:
        load_doc(tmp_path, doc)
    fields = {p.field for p in exc.value.problems}
    assert {f"{W}.replicas", "spec.model.maxModelLen", "spec.bogus"} <= fields
    assert exc.value.lines() == [str(p) for p in exc.value.problems]


def test_duplicate_key(tmp_path: Path) -> None:
    text = _shipped_text().replace("replicas: 18\n", "replicas: 18\n        replicas: 3\n")
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line = _line_containing(text, "replicas: 3")
    assert _problem(exc) == f"{path}:{line}:9: {W}.replicas: duplicate key"


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n", "", "# only a comment\n", "null\n"])
def test_non_mapping_document(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError, match="must be a YAML mapping"):
        load_profile(path)


def test_multiple_documents_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.yaml", _shipped_text() + "---\nkind: StackProfile\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_profile(path)


def test_yaml_merge_key_rejected(tmp_path: Path) -> None:
    text = _shipped_text().replace("      worker:\n", "      worker:\n        <<: {replicas: 2}\n")
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line = _line_containing(text, "<<:")
    assert _problem(exc) == f"{path}:{line}:9: YAML merge keys (<<) are not supported; use extends:"


def test_anchors_and_aliases_allowed(tmp_path: Path) -> None:
    """An anchor shares the stack's speculative settings with a pool (what SP154 asks for)."""
    text = dump(base_doc("gb300-disagg-wide-ep"))
    assert text.count("  speculative:\n") == 1 and text.count("      decode:\n") == 1
    text = text.replace("  speculative:\n", "  speculative: &spec\n")
    text = text.replace("      decode:\n", "      decode:\n        speculative: *spec\n")
    loaded = load_profile(_write(tmp_path / "p.yaml", text))
    assert loaded.profile.spec.placement.pools.decode.speculative == loaded.profile.spec.speculative
    assert "SP154" not in {f.code for f in run_rules(loaded)}


def test_alias_bomb_is_rejected_quickly(tmp_path: Path) -> None:
    """Aliases expand while building values; an exponential alias chain must fail, not hang."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = _write(tmp_path / "p.yaml", "\n".join(lines) + "\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_profile(path)


def test_huge_integer_is_an_input_error(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {"spec.model.maxModelLen": 10**400}))
    with pytest.raises(StackpinError):
        run_rules(load_profile(path))


@pytest.mark.parametrize("raw", [b"\xff\xfe\x00garbage", b"apiVersion: \x00\n"], ids=["not-utf8", "nul"])
def test_unreadable_bytes(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(raw)
    with pytest.raises(InputError):
        load_profile(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_profile(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="is a directory"):
        load_profile(tmp_path)


def test_snake_and_camel_for_the_same_field(tmp_path: Path) -> None:
    """all2all is spelled all2all (not to_camel's all2All) in YAML, the schema and rule paths."""
    doc = apply(base_doc(), {"spec.kernels.all2all": "nccl"})
    findings = run_rules(load_doc(tmp_path, doc))
    assert any(f.code == "SP213" and f.path == "spec.kernels.all2all" for f in findings)
    assert "all2all" in profile_json_schema()["$defs"]["Kernels"]["properties"]


# --- JSON schema -------------------------------------------------------------------------------


def test_committed_schema_is_current() -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    committed = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert json.loads(result.output) == committed, (
        "schema/stackprofile.schema.json is stale: run `make schema` and commit the result")
    assert committed == profile_json_schema()


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.mark.parametrize("profile", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_matches_json_schema(profile: Path, validator: jsonschema.protocols.Validator) -> None:
    merged = load_profile(profile).document
    assert [e.message for e in validator.iter_errors(merged)] == []
    raw = yaml.safe_load(profile.read_text(encoding="utf-8"))
    # An overlay states only what differs: the schema checks its keys and types, not required fields.
    errors = list(validator.iter_errors(raw))
    assert [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors] == []


def test_schema_rejects_what_the_loader_rejects(validator: jsonschema.protocols.Validator) -> None:
    doc = apply(base_doc(), {f"{W}.tensorParalel": 4})
    assert not validator.is_valid(doc)
    doc = apply(base_doc(), {f"{W}.replicas": 0})
    assert not validator.is_valid(doc)
    # Overlays too: unknown keys and wrong types, though required fields may come from the base.
    overlay = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile", "extends": "base.yaml"}
    assert validator.is_valid(overlay)
    assert not validator.is_valid({**overlay, "spec": {"placement": {"pools": {"worker": {"tensorParalel": 2}}}}})
    assert not validator.is_valid({**overlay, "spec": {"target": {"count": "two"}}})
    assert not validator.is_valid({k: v for k, v in overlay.items() if k != "extends"})


@pytest.mark.parametrize("profile", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_names_schema(profile: Path) -> None:
    first = profile.read_text(encoding="utf-8").splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix)
    target = (profile.parent / first[len(prefix):].strip()).resolve()
    assert target == SCHEMA_FILE.resolve()
    assert target.is_file()


def test_problem_with_line_break_in_key_stays_one_line(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {("spec", "bad\nkey"): 1}))
    with pytest.raises(InputError) as exc:
        load_profile(path)
    (line,) = exc.value.lines()
    assert "\n" not in line and "spec.bad\\nkey: unknown field" in line


def test_extends_too_long_name_is_not_found(tmp_path: Path) -> None:
    path = write_profile(tmp_path, _overlay("a" * 5000), "child.yaml")
    with pytest.raises(InputError, match="not found"):
        load_profile(path)


def test_profile_reference_is_generated_from_the_models() -> None:
    from stackpin.profile.docgen import profile_reference

    committed = (Path(__file__).resolve().parent.parent / "docs/profile-reference.md").read_text(encoding="utf-8")
    assert committed == profile_reference(), "run `make docs`"
