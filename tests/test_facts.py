"""Each fact once: versions compare as PEP 440 says, closed sets and cut-offs come from the catalog,
and the helpers every stage shares (canonical JSON, the DNS-label rule, the flag catalog) exist once."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest

from stackpin.catalog import load_catalog
from stackpin.catalog.version import parse_version
from stackpin.profile.model import StackProfile
from stackpin.validate import context_for
from stackpin.validate.versions import removed_env
from tests.helpers import apply, base_doc

PACKAGE = Path(__file__).resolve().parent.parent / "stackpin"


def _sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE.parent)): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def _where(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [f"{name}:{n}" for name, text in _sources().items()
            for n, line in enumerate(text.splitlines(), 1) if rx.search(line)]


# --- versions ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("low", "high"), [
    ("1.6.0", "1.6.1rc1"),  # split on dots, 1.6.1rc1 became (1, 6) and sorted below 1.6.0
    ("1.6.1rc1", "1.6.1"),
    ("0.6.8", "0.6.8.post1"),
    ("0.9.0", "0.10.0"),
    ("0.32.0.dev1", "0.32.0rc1"),
])
def test_versions_order_as_pep_440(low: str, high: str) -> None:
    assert parse_version(low) < parse_version(high)


def test_removed_env_var_is_flagged_on_a_release_candidate_past_the_removal() -> None:
    # VLLM_USE_FLASHINFER_MOE_FP4 is gone by 0.25.0; 0.25.1rc1 comes after it. The old dotted-tuple
    # key read 0.25.1rc1 as (0, 25) < (0, 25, 0) and let the dead variable through.
    doc = apply(base_doc(), {"spec.versions.vllm": "0.25.1rc1", "spec.kernels.env.VLLM_USE_FLASHINFER_MOE_FP4": "1"})
    hits = list(removed_env(context_for(StackProfile.from_data(doc))))
    assert [h.path for h in hits] == [("spec", "kernels", "env", "VLLM_USE_FLASHINFER_MOE_FP4")]
    assert "gone by 0.25.0" in hits[0].message


@pytest.mark.parametrize(("vllm", "per_rank", "v2_store"), [
    ("0.31.0", False, False),
    ("0.32.0rc1", False, False),  # a pre-release comes before the release that introduced the files
    ("0.32.0", True, False),
    ("0.32.1rc1", True, False),
    ("0.33.0", True, True),
    ("0.100.0", True, True),
])
def test_autotune_file_layout_cut_offs_are_catalog_versions(vllm: str, per_rank: bool, v2_store: bool) -> None:
    files = load_catalog().engine.autotune_files
    assert (files.per_rank(vllm), files.v2_store(vllm)) == (per_rank, v2_store)


def test_no_hand_rolled_version_comparison() -> None:
    found = _where(r"_version_tuple|version_key|tuple\(int\(|_SINCE_VLLM\s*=")
    assert found == [], f"compare versions with stackpin.catalog.version.parse_version: {found}"


# --- canonical JSON ------------------------------------------------------------------------------

def test_canonical_json_bytes() -> None:
    from stackpin.jsonio import canonical_json

    doc = {"b": [1, 2.5, None, True], "a": {"z": "ä€", "y": "\u2028"}, "c": ""}
    assert canonical_json(doc) == '{"a":{"y":"\u2028","z":"ä€"},"b":[1,2.5,null,true],"c":""}'.encode()


def test_one_canonical_json_function() -> None:
    # Digests, OCI documents and engine JSON arguments must not drift apart: one encoder, in the jsonio leaf.
    found = _where(r"separators=\(\s*['\"],['\"]\s*,\s*['\"]:['\"]\s*\)")
    assert [f.split(":")[0] for f in found] == ["stackpin/jsonio.py"], found


# --- DNS-1123 names ------------------------------------------------------------------------------

def test_one_dns_label_rule() -> None:
    found = _where(re.escape("[a-z0-9]([-a-z0-9]*[a-z0-9])?"))
    assert [f.split(":")[0] for f in found] == ["stackpin/profile/k8s_names.py"], found


@pytest.mark.parametrize(("name", "label", "subdomain"), [
    ("dynamo", True, True), ("a", True, True), ("model-cache.v2", False, True), ("-x", False, False),
    ("x-", False, False), ("Upper", False, False), ("a..b", False, False), ("", False, False),
])
def test_profile_and_manifest_checks_share_the_rule(name: str, label: bool, subdomain: bool) -> None:
    from stackpin.profile.k8s_names import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
    from stackpin.profile.model import profile_json_schema
    from stackpin.records import anchored

    assert bool(re.fullmatch(DNS_LABEL_PATTERN, name)) is label
    assert bool(re.fullmatch(DNS_SUBDOMAIN_PATTERN, name)) is subdomain
    defs = profile_json_schema()["$defs"]
    assert defs["Metadata"]["properties"]["namespace"]["pattern"] == anchored(DNS_LABEL_PATTERN)
    assert defs["ModelStore"]["properties"]["pvc"]["pattern"] == anchored(DNS_SUBDOMAIN_PATTERN)


# --- flag catalogs -------------------------------------------------------------------------------

def test_one_flag_catalog_type_for_validation_and_render() -> None:
    from stackpin.backends import engine_of
    from stackpin.catalog.flags import FlagCatalog, vllm_catalog

    profile = StackProfile.from_data(base_doc())
    vllm = vllm_catalog(profile.spec.versions.vllm)
    assert isinstance(vllm, FlagCatalog)
    assert context_for(profile).engine_catalog is vllm is engine_of(profile).flag_catalog(profile.spec.engine_version)
    # What validation reads and what render checks against come from the same parse.
    assert vllm.accepts("--enable-prefix-caching") and vllm.accepts("--no-enable-prefix-caching")
    assert not vllm.accepts("--no-max-num-seqs")
    assert "dspark" in vllm.choices["speculative_methods"]
    assert vllm.known["--attention-backend"] == vllm.choices["attention_backends"]
    found = _where(r"^class \w*(FlagCatalog|Flags)\b")
    assert [f.split(":")[0] for f in found] == ["stackpin/catalog/flags.py"], found


# --- typed facts ---------------------------------------------------------------------------------

def _hints(model: type) -> dict[str, object]:
    import typing

    return typing.get_type_hints(model)


def _fact_models() -> list[type]:
    import typing

    import msgspec

    from stackpin.catalog import Catalog

    seen: list[type] = []

    def walk(annotation: object) -> None:
        if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
            if annotation not in seen:
                seen.append(annotation)
                for field in _hints(annotation).values():
                    walk(field)
        for arg in typing.get_args(annotation):
            walk(arg)

    # The catalog reads each file when first asked: its sections are what its properties return.
    for name in dir(Catalog):
        attribute = getattr(Catalog, name)
        getter = attribute.fget if isinstance(attribute, property) else getattr(attribute, "func", None)
        if not name.startswith("__") and getter is not None:
            walk(typing.get_type_hints(getter)["return"])
    return seen


def test_numeric_facts_are_typed_fields_not_string_keyed_maps() -> None:
    import typing

    models = _fact_models()
    assert len(models) > 20
    loose = [f"{model.__name__}.{name}" for model in models for name, annotation in _hints(model).items()
             if typing.get_origin(annotation) is dict
             and typing.get_args(annotation)[1] in (int, float)]
    assert loose == [], f"give these facts named fields: {loose}"
    engine = load_catalog().engine
    assert engine.startup_estimate.probe_period_s == 10 and engine.memory_reserve.runtime_gib == 4.0
    assert engine.default_max_capture_size.default == 512


# --- closed sets from the catalog; enums stay enums ------------------------------------------------

def test_platforms_and_graph_modes_are_the_catalogs() -> None:
    from stackpin.profile.model import CudaGraphMode, PlatformName, profile_json_schema

    catalog = load_catalog()
    assert [m.value for m in PlatformName] == list(catalog.platforms)
    assert [m.value for m in CudaGraphMode] == list(catalog.engine.cudagraph_modes)
    defs = profile_json_schema()["$defs"]
    assert defs["PlatformName"]["enum"] == sorted(catalog.platforms)  # the schema lists them sorted
    assert defs["CudaGraphMode"]["enum"] == sorted(catalog.engine.cudagraph_modes)



def test_type_checking_declarations_of_catalog_enums_match_the_catalog() -> None:
    """model.py declares, for the type checker only, the members of its catalog enums that code
    names; each must be a member of the enum built from the catalog, with the same value."""
    import ast

    from stackpin.profile import model

    tree = ast.parse((PACKAGE / "profile" / "model.py").read_text(encoding="utf-8"))
    blocks = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    declared = {
        (cls.name, target.id): ast.literal_eval(stmt.value)
        for block in blocks for cls in block.body if isinstance(cls, ast.ClassDef)
        for stmt in cls.body if isinstance(stmt, ast.Assign) for target in stmt.targets if isinstance(target, ast.Name)
    }
    assert ("CudaGraphMode", "NONE") in declared
    for (enum_name, member), value in declared.items():
        assert getattr(model, enum_name)[member].value == value

@pytest.mark.parametrize("version", ["0.28.0", "0.31.0", "0.33.0"])
def test_engine_graph_modes_are_the_pinned_vllms(version: str) -> None:
    from stackpin.catalog.flags import vllm_catalog

    vllm = vllm_catalog(version)
    assert vllm is not None
    assert set(load_catalog().engine.cudagraph_modes) == set(vllm.choices["cudagraph_modes"])


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("spec.target.platform", "gb400-nvl72", lambda c: list(c.platforms)),
    ("spec.cudaGraphs.mode", "PIECEWISE_ONLY", lambda c: list(c.engine.cudagraph_modes)),
])
def test_a_value_outside_a_catalog_set_is_refused_at_its_line_with_the_choices(
        tmp_path: Path, field: str, value: str, allowed: object) -> None:
    from stackpin.errors import InputError
    from tests.helpers import dump, line_of, load_doc

    doc = apply(base_doc(), {field: value})
    with pytest.raises(InputError) as exc:
        load_doc(tmp_path, doc)
    line, col = line_of(dump(doc), field)
    (problem,) = exc.value.problems
    text = str(problem)
    assert text.startswith(f"{tmp_path / 'profile.yaml'}:{line}:{col}: {field}: ")
    assert repr(value) in text
    assert all(f"'{choice}'" in text for choice in allowed(load_catalog()))  # type: ignore[operator]


def _enum_fields(model: type, value: object) -> list[tuple[str, object, type]]:
    from enum import Enum

    import msgspec

    out = []
    for field in msgspec.structs.fields(type(value)) if isinstance(value, msgspec.Struct) else ():
        name = field.name
        got = getattr(value, name)
        if isinstance(got, msgspec.Struct):
            out += _enum_fields(model, got)
        annotation = typing.get_args(field.type)[0] if typing.get_origin(field.type) is typing.Annotated else field.type
        enum = next((a for a in (annotation, *getattr(annotation, "__args__", ()))
                     if isinstance(a, type) and issubclass(a, Enum)), None)
        if enum is not None and got is not None:
            out.append((name, got, enum))
    return out


@pytest.mark.parametrize("name", ["gb300-tuned", "gb300-launch", "a100-8x-selfhost"])
def test_enum_fields_hold_members_after_parsing(name: str) -> None:
    profile = StackProfile.from_data(base_doc(name))
    fields = _enum_fields(StackProfile, profile)
    assert {n for n, _, _ in fields} >= {"platform", "mode", "router", "weights"}
    wrong = [(n, v) for n, v, enum in fields if type(v) is not enum]
    assert wrong == [], "parsed enum fields must be members, not strings"
    # ... and still dump as their values.
    dumped = profile.to_data()
    assert dumped["spec"]["target"]["platform"] == profile.spec.target.platform.value


def test_code_compares_enum_members_not_string_literals() -> None:
    from stackpin.profile.model import AutotuneMode, CudaGraphMode, Placement, Precision, RouterMode

    values = sorted({m.value for e in (AutotuneMode, CudaGraphMode, Placement, Precision, RouterMode) for m in e})
    literal = "|".join(re.escape(v) for v in values)
    enum_field = r"\.(mode|router|weights|platform)\b"
    compare = (rf"{enum_field}\s*(==|!=)\s*[\"']|{enum_field}\s+(not\s+)?in\s+[(\[{{]\s*[\"']"
               rf"|[\"']({literal})[\"']\s+(not\s+)?in\s+[\w.]*{enum_field}")
    found = [f for f in _where(compare) if not f.startswith("stackpin/profile/model.py")]
    assert found == [], found
    assert _where(r"use_enum_values\s*=") == []


@pytest.mark.parametrize(("tag", "warns"), [
    ("1.6.1", False), ("1.6.1-cuda13", False), ("1.6.10", True), ("1.6.1rc1", True), ("latest", True),
])
def test_image_tag_names_the_dynamo_release_as_a_version(tag: str, warns: bool) -> None:
    from stackpin.validate.versions import image_tag_version

    doc = apply(base_doc(), {"spec.versions.dynamo": "1.6.1",
                             "spec.versions.runtimeImage": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{tag}"})
    assert bool(list(image_tag_version(context_for(StackProfile.from_data(doc))))) is warns


def test_an_enum_member_dumps_as_its_value() -> None:
    from stackpin.jsonio import canonical_json
    from stackpin.profile.model import CudaGraphMode, PlatformName, RouterMode
    from stackpin.yamlio import dump_yaml

    data = {"router": RouterMode.round_robin, "mode": CudaGraphMode.FULL_AND_PIECEWISE,
            "platform": PlatformName("gb300-nvl72")}
    plain = {k: v.value for k, v in data.items()}
    assert dump_yaml(data) == dump_yaml(plain)
    assert canonical_json(data) == canonical_json(plain)


# --- every figure names its source (issue 19, "Facts that public sources contradict") ----------------

def _sourced_entries() -> list[tuple[str, object]]:
    catalog = load_catalog()
    return [(f"{kind}.{key}", entry) for kind in ("gpus", "platforms", "models")
            for key, entry in getattr(catalog, kind).items()]


@pytest.mark.parametrize(("where", "entry"), _sourced_entries(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_catalog_figure_names_its_source(where: str, entry: object) -> None:
    from stackpin.catalog import _Sourced

    assert isinstance(entry, _Sourced)
    assert entry.figures(), where
    assert entry.unsourced() == (), f"{where}: figures without a source: {entry.unsourced()}"
    assert set(entry.estimates) <= set(entry.figures()), where


def test_a_figure_with_neither_source_nor_estimate_is_found() -> None:
    # The check the test above relies on: strip one citation from a real entry and it is reported.
    gpu = load_catalog().gpus["gb200"]
    stripped = gpu.replace(sources={k: v for k, v in gpu.sources.items() if k != "hbm_gib"})
    assert stripped.unsourced() == ("hbm_gib",)
    # ... and a derivation or citation naming no figure, or saying nothing, is refused at load.
    import msgspec

    from stackpin.catalog import Gpu

    data = gpu.to_data()
    for bad in ({"estimates": {"hbm_gb": "typo"}}, {"sources": {**gpu.sources, "hbm_gib": " "}}):
        with pytest.raises(msgspec.ValidationError, match="source"):
            msgspec.convert({**data, **bad}, Gpu)


def test_step_model_figures_name_their_source() -> None:
    """The step model's published figures live in the catalog with a source each: every catalog GPU has
    a peak (so sim and plan work on every platform) and every model its expert routing; roofline.yaml
    keeps only the model's own parameters."""
    from stackpin.sim.roofline import load_params

    params = load_params()
    catalog = load_catalog()
    assert not {"compute_tflops", "experts"} & set(params)
    for key, gpu in catalog.gpus.items():
        peaks = [f for f in gpu.figures() if f.startswith("tflops_")]
        assert peaks and set(peaks) <= set(gpu.sources), key
        assert gpu.peak_tflops("fp8") > 0, key
    for key, model in catalog.models.items():
        assert model.experts is not None and "experts" in model.sources, key
    assert str(params["fitted"]["source"]).strip()


def test_contradicted_facts_stay_corrected() -> None:
    """What issue 19 found public sources contradicting (docs/facts.md#corrections)."""
    catalog = load_catalog()
    v41 = catalog.models["deepseek-v4.1-flash"]
    assert v41.kv_bytes_per_token == 890 and v41.is_estimate("kv_bytes_per_token")
    assert v41.experts is not None and (v41.experts.routed, v41.experts.per_token) == (384, 6)
    rubin = catalog.gpus["rubin"]
    assert rubin.tflops_fp4 == 25000 and rubin.is_estimate("tflops_fp4") and rubin.is_estimate("tflops_fp8")
    gb300 = catalog.gpus["gb300"]
    assert gb300.hbm_gib < 279 and gb300.is_estimate("hbm_gib")
    assert catalog.platforms["gb300-nvl72"].is_estimate("power_kw")
    for name in ("gb300-nvl72", "vera-rubin-nvl72"):
        assert catalog.platforms[name].is_estimate("node_labels"), name
    assert not catalog.platforms["gb200-nvl72"].is_estimate("node_labels")


def test_the_catalog_extract_is_in_step_with_the_bundled_yaml() -> None:
    """Commands read the bundled catalog from its JSON extract; it must hold what the YAML files say."""
    from stackpin.catalog import EXTRACT, _read, catalog_extract
    from stackpin.catalog.search import bundled
    from stackpin.yamlio import load_data

    assert bundled().joinpath(EXTRACT).read_bytes() == catalog_extract(), "run `make catalog`"
    for name in sorted(path.name for path in bundled().glob("*.yaml")):  # the same data, mappings in file order
        text = bundled().joinpath(name).read_text(encoding="utf-8")
        assert json.dumps(_read(name)) == json.dumps(load_data(text)), name


def test_a_catalog_file_edited_since_the_extract_is_read_as_yaml(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's edit to a bundled YAML file counts at once, before `make catalog` is run again."""
    import shutil

    import stackpin.catalog as catalog
    import stackpin.catalog.search as search

    copy = tmp_path / "catalog"
    shutil.copytree(search.bundled(), copy)
    text = (copy / "engine.yaml").read_text(encoding="utf-8")
    [line] = [x for x in text.splitlines() if x.startswith("cudagraph_modes:")]
    (copy / "engine.yaml").write_text(text.replace(line, line.replace("[", "[EDITED, ", 1)), encoding="utf-8")
    monkeypatch.setattr(catalog, "bundled", lambda: copy)
    catalog._extract.cache_clear()
    try:
        assert catalog._read("engine.yaml")["cudagraph_modes"][0] == "EDITED"
        assert catalog._read("hardware.yaml") == catalog.load_data((copy / "hardware.yaml").read_text())  # unedited
    finally:
        catalog._extract.cache_clear()
