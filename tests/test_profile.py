"""Profile loading: shipped profiles, `extends` merging, located input errors, the JSON schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.errors import InputError, StackpinError
from stackpin.profile.loader import load_profile
from stackpin.profile.model import profile_json_schema
from stackpin.validate import run_rules
from tests.helpers import NULL, SCHEMA_FILE, SHIPPED, apply, base_doc, dump, line_of, load_doc, matches, write_profile

W = "spec.placement.pools.worker"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _assert_one_problem(exc: pytest.ExceptionInfo[InputError], template: str, **fill: object) -> None:
    """One defect, one problem, on one line, and it reads as `template` says (see helpers.template_regex)."""
    (line,) = exc.value.lines()
    assert "\n" not in line
    assert matches(template, line, W=W, **fill), f"{line!r} !~ {template!r}"


def test_message_templates_are_literal_but_for_placeholders() -> None:
    assert matches("{file}:{n}: a.b (c?) ...!", "x.y:12: a.b (c?) anything!", file="x.y")
    assert not matches("{file}:{n}: a.b", "xzy:12: a.b", file="x.y")
    assert not matches("{file}:{n}: a.b", "x.y:12: aXb", file="x.y")
    assert not matches("{file}:{n}: a", "x.y:: a", file="x.y")
    assert not matches("{line}: a", "3: a and more", line=3)


# --- shipped profiles --------------------------------------------------------------------------


def test_profiles_are_shipped() -> None:
    assert len(SHIPPED) >= 5


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


def _overlay(extends: Any, **fields: object) -> dict:
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
    assert spec.kernels.env == {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1", "VLLM_DEEP_GEMM_WARMUP": "full", "EXTRA": "1"}
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


@pytest.mark.parametrize("base, overlay, located_in, field, expected", [
    pytest.param({f"{W}.replicas": "two"}, {"metadata.name": "child"}, "base.yaml", f"{W}.replicas",
                 "{file}:{line}:{col}: {W}.replicas: ...", id="field-from-base-in-base"),
    pytest.param({}, {f"{W}.replicas": 0}, "child.yaml", f"{W}.replicas",
                 "{file}:{line}:{col}: {W}.replicas: ...", id="overridden-field-in-overlay"),
    # Lists replace: a bad item in the overlay's list points at the overlay, never at a base item.
    pytest.param({"spec.cudaGraphs.captureSizes": [6, 12, 18, 24]}, {"spec.cudaGraphs.captureSizes": [6, 0]},
                 "child.yaml", None, "{file}:...spec.cudaGraphs.captureSizes.1...", id="replaced-list-item-in-overlay"),
])
def test_problem_is_located_in_the_file_that_sets_it(tmp_path: Path, base: dict, overlay: dict, located_in: str,
                                                      field: str | None, expected: str) -> None:
    texts = {"base.yaml": dump(apply(base_doc(), base)), "child.yaml": dump(_overlay("base.yaml", **overlay))}
    for name, text in texts.items():
        _write(tmp_path / name, text)
    with pytest.raises(InputError) as exc:
        load_profile(tmp_path / "child.yaml")
    line, col = line_of(texts[located_in], field) if field else (0, 0)
    _assert_one_problem(exc, expected, file=tmp_path / located_in, line=line, col=col)


def test_three_level_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a base may sit above the profile, inside the tree stackpin runs in
    write_profile(tmp_path, base_doc(), "a.yaml")
    write_profile(tmp_path, _overlay("a.yaml", **{f"{W}.replicas": 9}), "b.yaml")
    (tmp_path / "sub").mkdir()
    write_profile(tmp_path / "sub", _overlay("../b.yaml", **{"metadata.name": "c"}), "c.yaml")
    loaded = load_profile(tmp_path / "sub" / "c.yaml")
    assert [p.name for p in loaded.sources] == ["c.yaml", "b.yaml", "a.yaml"]
    assert loaded.profile.spec.placement.pools.worker.replicas == 9
    assert loaded.profile.name == "c"


@pytest.mark.parametrize("chain", [{"a.yaml": "b.yaml", "b.yaml": "a.yaml"}, {"self.yaml": "self.yaml"}],
                         ids=["two-files", "self"])
def test_extends_cycle(tmp_path: Path, chain: dict[str, str]) -> None:
    """`chain`: file -> the file it extends; loading the first must name every file of the cycle."""
    for name, extends in chain.items():
        write_profile(tmp_path, _overlay(extends), name)
    with pytest.raises(InputError, match="extends cycle") as exc:
        load_profile(tmp_path / next(iter(chain)))
    assert all(name in str(exc.value) for name in chain)


@pytest.mark.parametrize("value, expected", [
    pytest.param("nope.yaml", "{file}:{line}:{col}: extends: base profile 'nope.yaml' not found", id="missing-file"),
    pytest.param("a" * 5000, "...not found...", id="5000-char-name"),
    pytest.param(5, "...extends...", id="integer"),
    pytest.param([], "...extends...", id="list"),
    pytest.param({"a": 1}, "...extends...", id="mapping"),
    pytest.param("", "...extends...", id="empty"),
    pytest.param("x" * 300, "...extends...", id="300-char-name"),
    pytest.param("dir/", "...extends...", id="directory"),
])
def test_extends_bad_values(tmp_path: Path, value: object, expected: str) -> None:
    (tmp_path / "dir").mkdir()
    text = dump(_overlay(value))
    path = _write(tmp_path / "child.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line, col = line_of(text, "extends")
    _assert_one_problem(exc, expected, file=path, line=line, col=col)


def test_extends_base_with_bad_yaml_names_base(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "spec: [1, 2\n")
    path = write_profile(tmp_path, _overlay("base.yaml"), "child.yaml")
    with pytest.raises(InputError, match="invalid YAML") as exc:
        load_profile(path)
    assert str(exc.value.problems[0]).startswith(str(tmp_path / "base.yaml") + ":")


# --- located input errors -----------------------------------------------------------------------

SHIPPED_TEXT = (SHIPPED[0].parent / "gb300-tuned.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("old, new, at, expected", [
    pytest.param("\n  model:", "\n\tmodel:", "\tmodel:", "{file}:{line}:{n}: invalid YAML...", id="tab-indent"),
    pytest.param("captureSizes: [6, 12, 24, 48, 96, 192, 384]", "captureSizes: [6, 12", None,
                 "{file}:{n}:{n}: invalid YAML: ...", id="unclosed-bracket"),
    pytest.param("tensorParallel: 4", "tensorParalel: 4", "tensorParalel",
                 "{file}:{line}:9: {W}.tensorParalel: unknown field (did you mean 'tensorParallel'?)",
                 id="unknown-key-with-suggestion"),
    pytest.param("replicas: 18", "replicas: two", "replicas: two", "{file}:{line}:9: {W}.replicas: ...integer...",
                 id="wrong-type-names-field"),
    pytest.param("replicas: 18\n", "replicas: 18\n        replicas: 3\n", "replicas: 3",
                 "{file}:{line}:9: {W}.replicas: duplicate key", id="duplicate-key"),
    pytest.param("      worker:\n", "      worker:\n        <<: {replicas: 2}\n", "<<:",
                 "{file}:{line}:9: YAML merge keys (<<) are not supported; use extends:", id="yaml-merge-key"),
])
def test_edited_shipped_profile_is_refused_at_the_edit(tmp_path: Path, old: str, new: str, at: str | None,
                                                       expected: str) -> None:
    """gb300-tuned.yaml with `old` replaced by `new`; {line} is the first line holding `at`."""
    assert SHIPPED_TEXT.count(old) == 1
    text = SHIPPED_TEXT.replace(old, new)
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if at in row) if at else 0
    _assert_one_problem(exc, expected, file=path, line=line)


@pytest.mark.parametrize("mutations, at, expected", [
    pytest.param({"spec.zzzzqqq": 1}, None, "...spec.zzzzqqq: unknown field", id="unknown-key-without-close-match"),
    pytest.param({"metdata": {"name": "x"}}, None, "...metdata: unknown field (did you mean 'metadata'?)...",
                 id="unknown-top-level-key"),
    pytest.param({"spec.target.platform": "gb400"}, None, "...spec.target.platform:...'gb400'...",
                 id="bad-enum-names-value"),
    # Located at the parent that lacks it.
    pytest.param({"spec.service": None}, "spec", "{file}:{line}:{col}: spec.service: required field is missing",
                 id="missing-required-field"),
    pytest.param({("spec", "bad\nkey"): 1}, None, "...spec.bad\\nkey: unknown field...", id="line-break-in-key"),
])
def test_mutated_profile_is_refused(tmp_path: Path, mutations: dict, at: str | None, expected: str) -> None:
    """gb300-tuned's merged document with `mutations` applied; {line}:{col} is where the key `at` is."""
    text = dump(apply(base_doc(), mutations))
    path = _write(tmp_path / "p.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile(path)
    line, col = line_of(text, at) if at else (0, 0)
    _assert_one_problem(exc, expected, file=path, line=line, col=col)


def test_every_problem_reported(tmp_path: Path) -> None:
    doc = apply(base_doc(), {f"{W}.replicas": "two", "spec.model.maxModelLen": 0, "spec.bogus": 1})
    with pytest.raises(InputError) as exc:
        load_doc(tmp_path, doc)
    fields = {p.field for p in exc.value.problems}
    assert {f"{W}.replicas", "spec.model.maxModelLen", "spec.bogus"} <= fields
    assert exc.value.lines() == [str(p) for p in exc.value.problems]


# An exponential alias chain: aliases expand while building values, so it must fail, not hang.
ALIAS_BOMB = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]) + "\n"


@pytest.mark.parametrize("content, match", [
    pytest.param("- a\n- b\n", "must be a YAML mapping", id="list"),
    pytest.param("just a string\n", "must be a YAML mapping", id="string"),
    pytest.param("42\n", "must be a YAML mapping", id="integer"),
    pytest.param("", "must be a YAML mapping", id="empty"),
    pytest.param("# only a comment\n", "must be a YAML mapping", id="only-a-comment"),
    pytest.param("null\n", "must be a YAML mapping", id="null"),
    pytest.param(SHIPPED_TEXT + "---\nkind: StackProfile\n", "invalid YAML", id="multiple-documents"),
    pytest.param(ALIAS_BOMB, "invalid YAML", id="alias-bomb"),
    pytest.param(b"\xff\xfe\x00garbage", "cannot read", id="not-utf8"),
    pytest.param(b"apiVersion: \x00\n", "invalid YAML", id="nul"),
])
def test_unloadable_file(tmp_path: Path, content: str | bytes, match: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with pytest.raises(InputError, match=match):
        load_profile(path)


def test_anchors_and_aliases_allowed(tmp_path: Path) -> None:
    """An anchor shares the stack's speculative settings with a pool (what SP154 asks for)."""
    text = dump(base_doc("gb300-disagg-wide-ep"))
    assert text.count("  speculative:\n") == 1 and text.count("      decode:\n") == 1
    text = text.replace("  speculative:\n", "  speculative: &spec\n")
    text = text.replace("      decode:\n", "      decode:\n        speculative: *spec\n")
    loaded = load_profile(_write(tmp_path / "p.yaml", text))
    assert loaded.profile.spec.placement.pools.decode.speculative == loaded.profile.spec.speculative
    assert "SP154" not in {f.code for f in run_rules(loaded)}


def test_huge_integer_is_an_input_error(tmp_path: Path) -> None:
    path = write_profile(tmp_path, apply(base_doc(), {"spec.model.maxModelLen": 10**400}))
    with pytest.raises(StackpinError):
        run_rules(load_profile(path))


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


@pytest.mark.parametrize("start, mutations, valid", [
    pytest.param("profile", {f"{W}.tensorParalel": 4}, False, id="unknown-key"),
    pytest.param("profile", {f"{W}.replicas": 0}, False, id="out-of-range"),
    # Overlays too: unknown keys and wrong types, though required fields may come from the base.
    pytest.param("overlay", {}, True, id="overlay"),
    pytest.param("overlay", {f"{W}.tensorParalel": 2}, False, id="overlay-unknown-key"),
    pytest.param("overlay", {"spec.target.count": "two"}, False, id="overlay-wrong-type"),
    pytest.param("overlay", {"extends": None}, False, id="no-extends-and-no-required-fields"),
])
def test_schema_rejects_what_the_loader_rejects(validator: jsonschema.protocols.Validator, start: str,
                                               mutations: dict, valid: bool) -> None:
    doc = base_doc() if start == "profile" else _overlay("base.yaml")
    assert validator.is_valid(apply(doc, mutations)) is valid


@pytest.mark.parametrize("profile", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_names_schema(profile: Path) -> None:
    first = profile.read_text(encoding="utf-8").splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix)
    target = (profile.parent / first[len(prefix):].strip()).resolve()
    assert target == SCHEMA_FILE.resolve()
    assert target.is_file()


def test_profile_reference_is_generated_from_the_models() -> None:
    from stackpin.profile.docgen import profile_reference

    committed = (Path(__file__).resolve().parent.parent / "docs/profile-reference.md").read_text(encoding="utf-8")
    assert committed == profile_reference(), "run `make docs`"
