"""Schema validation of Kubernetes manifests, with every error reported, one line each.

Custom resources (DynamoGraphDeployment, ComputeDomain) validate against the bundled CRDs'
`openAPIV3Schema`, turned into JSON Schema that rejects unknown fields the way the API server's
pruning plus `kubectl --validate=strict` does. Core kinds validate against the strict JSON schemas
that kubernetes-validate ships for the newest Kubernetes version it knows (the `manifests` extra: without
it, a built-in kind is refused naming the extra, or passes unchecked where the caller asks). Each validator
is built once per (apiVersion, kind).

Most objects are valid, so each is first checked by `quickcheck` (an exact yes/no, without importing
jsonschema); jsonschema validates, and words the errors, only when that is not a plain yes.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import yaml

from stackpin.catalog.version import parse_version
from stackpin.errors import InputError, Location, Problem
from stackpin.extras import have, require
from stackpin.profile.k8s_names import DNS_LABEL_MAX, DNS_LABEL_PATTERN, DNS_SUBDOMAIN_MAX, DNS_SUBDOMAIN_PATTERN
from stackpin.yamlio import SAFE_LOADER

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

    from stackpin.validate.admission import CelRule

__all__ = ["ManifestError", "validate_objects", "validate_paths"]

_CRD_DIR = Path(__file__).with_name("crds")
_KUSTOMIZE_GROUP = "kustomize.config.k8s.io"
_KUSTOMIZATION_FILES = frozenset({"kustomization.yaml", "kustomization.yml"})
_MANIFEST_SUFFIXES = frozenset({".yaml", ".yml"})

# Say what our own name patterns mean instead of printing the regular expression.
_PATTERN_NAMES = {
    DNS_SUBDOMAIN_PATTERN: "a DNS-1123 subdomain (lowercase alphanumerics, '-' and '.')",
    DNS_LABEL_PATTERN: "a DNS-1123 label (lowercase alphanumerics and '-')",
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# The API server needs a name on create unless it is asked to generate one.
_NAME_OR_GENERATE_NAME = {"if": {"not": {"required": ["generateName"]}}, "then": {"required": ["name"]}}
_METADATA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": DNS_SUBDOMAIN_MAX, "pattern": DNS_SUBDOMAIN_PATTERN},
        "generateName": {"type": "string"},
        "namespace": {"type": "string", "maxLength": DNS_LABEL_MAX, "pattern": DNS_LABEL_PATTERN},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
    **_NAME_OR_GENERATE_NAME,
}

# OpenAPI v3 keywords that mean the same in JSON Schema draft 7; annotations (description,
# default, example), `format` and the x-kubernetes-* extensions are not copied as they are.
_COPIED_KEYWORDS = frozenset({
    "type", "enum", "required", "pattern", "multipleOf", "uniqueItems",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
})


class ManifestError(msgspec.Struct, frozen=True):
    """One schema violation in one object: `origin: Kind/name: path: reason`."""

    origin: str
    resource: str
    path: str
    reason: str

    def __str__(self) -> str:
        parts = [self.origin, self.resource, self.path, self.reason]
        return ": ".join(part for part in parts if part)


def validate_objects(objects: Iterable[tuple[str, dict[str, Any]]],
                     builtin_optional: bool = False) -> list[ManifestError]:
    """Validate (origin, object) pairs; errors come in input order, then sorted by path. Without the `manifests`
    extra an object of any kind but the bundled CRDs' raises MissingExtra, or with `builtin_optional` passes
    unchecked (render's check of what it built itself; the caller says so, see `builtin_schemas`)."""
    errors: list[ManifestError] = []
    for origin, obj in objects:
        errors.extend(_validate_object(origin, obj, builtin_optional))
    return errors


@functools.cache
def builtin_schemas() -> bool:
    """Whether built-in kinds are checked: the `manifests` extra (kubernetes-validate's schemas) is installed."""
    return have("manifests")


def validate_paths(paths: list[Path]) -> list[ManifestError]:
    """Validate every document of the given YAML files and directories (walked recursively).

    Raises InputError, naming every unreadable file and YAML syntax error, before validating.
    """
    problems: list[Problem] = []
    objects: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        known = len(problems)
        found = [obj for file in _manifest_files(path, problems) for obj in _load_documents(file, problems)]
        if not found and path.exists() and len(problems) == known:
            # A mistyped path in CI must not pass as "all valid".
            problems.append(Problem(Location(str(path)), "", "holds no Kubernetes objects (*.yaml, *.yml)"))
        objects.extend(found)
    if problems:
        raise InputError(problems)
    return validate_objects(objects)


class _Loader(SAFE_LOADER):  # type: ignore[misc]
    """Safe loader that keeps timestamps as strings, as kubectl's YAML-to-JSON step does."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _manifest_files(path: Path, problems: list[Problem]) -> list[Path]:
    if path.is_dir():
        return sorted(
            found for found in path.rglob("*")
            if found.suffix in _MANIFEST_SUFFIXES
            and found.name not in _KUSTOMIZATION_FILES
            and found.is_file()
        )
    if path.exists():
        return [path]
    problems.append(Problem(Location(str(path)), "", "no such file or directory"))
    return []


def _load_documents(file: Path, problems: list[Problem]) -> list[tuple[str, dict[str, Any]]]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(Location(str(file)), "", f"cannot read: {exc}"))
        return []
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(str(file), mark.line + 1, mark.column + 1) if mark else Location(str(file))
        problems.append(Problem(where, "", f"invalid YAML: {exc.problem or exc.context}"))
        return []
    except yaml.YAMLError as exc:
        problems.append(Problem(Location(str(file)), "", f"invalid YAML: {exc}"))
        return []
    # Numbered by position so `#3` is the third document a reader counts in the file.
    return [(f"{file}#{index}", doc) for index, doc in enumerate(documents, 1) if doc is not None]


def _validate_object(origin: str, obj: Any, builtin_optional: bool = False) -> list[ManifestError]:
    if not isinstance(obj, dict):
        return [ManifestError(origin, "?", "", "not a Kubernetes object (expected a mapping)")]
    resource = _resource_name(obj)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not (isinstance(api_version, str) and api_version and isinstance(kind, str) and kind):
        return [ManifestError(origin, resource, "", "apiVersion and kind must be set")]
    if kind == "Kustomization" and api_version.split("/")[0] == _KUSTOMIZE_GROUP:
        return []
    if not builtin_schemas() and (api_version, kind) not in _crd_json_schemas():
        if builtin_optional:
            return []
        require("manifests")
    validator = _validator(api_version, kind)
    if validator is None:
        return [ManifestError(origin, resource, "", f"no schema for {api_version}/{kind}")]
    findings = {finding for error in validator.iter_errors(obj) for finding in _findings(error)}
    rules = _crd_cel_rules().get((api_version, kind))
    if rules is not None and not findings:  # CEL runs on objects that pass the schema, as in the API server
        from stackpin.validate.admission import admission_problems

        findings.update(admission_problems(api_version, kind, obj, rules))
    return [
        ManifestError(origin, resource, _format_path(path), reason)
        for path, reason in sorted(findings, key=lambda f: (_path_key(f[0]), f[1]))
    ]


def _resource_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "?")
    namespace = meta.get("namespace")
    kind = obj.get("kind") or "?"
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


class _SchemaValidator:
    """The validator of one kind: `quickcheck` first, jsonschema (built on first need) for the errors."""

    def __init__(self, schema: dict[str, Any], core: bool) -> None:
        self.schema = schema
        self._core = core  # $refs into Kubernetes' shared definitions; the schema names its draft
        self._full: Validator | None = None
        # What quickcheck reads: a core schema with its $refs inlined (quickcheck answers none).
        self.quick = inline_core_refs(schema, _core_definitions()) if core else schema

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        from stackpin.validate.quickcheck import Unsure, is_valid

        try:
            if is_valid(instance, self.quick):
                return iter(())
        except Unsure:
            pass
        return self._jsonschema().iter_errors(instance)

    def _jsonschema(self) -> Validator:
        if self._full is None:
            from jsonschema.validators import Draft7Validator, validator_for

            if self._core:
                self._full = validator_for(self.schema)(self.schema, registry=_core_registry())
            else:
                self._full = Draft7Validator(self.schema)
        return self._full


@functools.cache
def _validator(api_version: str, kind: str) -> _SchemaValidator | None:
    core = _core_schema(api_version, kind) if builtin_schemas() else None
    if core is not None:
        return _SchemaValidator(core, core=True)
    crd_schema = _crd_json_schemas().get((api_version, kind))
    return None if crd_schema is None else _SchemaValidator(crd_schema, core=False)


# --- core kinds: kubernetes-validate's bundled strict schemas ------------------------------------

@functools.cache
def _core_schema_dir() -> Path:
    # Locate the package without importing it: its import pulls in more than we need.
    require("manifests")
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("kubernetes-validate is installed without its package directory")
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    versions = [
        (parse_version(match.group(1)), entry)
        for entry in root.iterdir()
        if (match := re.fullmatch(r"v(\d+\.\d+\.\d+)-local-strict", entry.name))
    ]
    return max(versions)[1]


@functools.cache
def _core_registry() -> Any:
    from referencing import Registry, Resource

    definitions = _read_json(_core_schema_dir() / "_definitions.json")
    return Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))


class _DefinitionsFile(msgspec.Struct):
    defs: dict[str, msgspec.Raw] = msgspec.field(name="$defs")


class _Definitions(Mapping[str, Any]):
    """Kubernetes' shared definitions, each decoded when first read: the file is 1.8 MB of ~860 definitions,
    and the kinds stackpin writes refer to a handful (msgspec finds where each one is in a fifth of the
    time it takes to decode them all)."""

    def __init__(self, raw: dict[str, msgspec.Raw]) -> None:
        self._raw = raw
        self._decoded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._decoded:
            self._decoded[name] = msgspec.json.decode(self._raw[name])
        return self._decoded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


@functools.cache
def _core_definitions() -> Mapping[str, Any]:
    path = _core_schema_dir() / "_definitions.json"
    return _Definitions(msgspec.json.decode(path.read_bytes(), type=_DefinitionsFile).defs)


_DEF_REFS = ("/api/_definitions.json#/$defs/", "#/$defs/")


def inline_core_refs(node: Any, defs: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> Any:
    """A core schema as quickcheck can read it: each $ref into Kubernetes' definitions replaced by the
    definition, put in an allOf beside the $ref's siblings (draft 2020-12 applies both), and the
    `x-kubernetes-*` annotations dropped (jsonschema ignores unknown keywords). A definition that
    refers to itself keeps its $ref, where quickcheck says it is unsure and jsonschema answers."""
    if isinstance(node, list):
        return [inline_core_refs(v, defs, seen) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: inline_core_refs(v, defs, seen) for k, v in node.items() if k != "$ref" and not k.startswith("x-")}
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = next((ref.removeprefix(p) for p in _DEF_REFS if ref.startswith(p)), None)
        if name is None or name in seen or name not in defs:
            out["$ref"] = ref
        else:
            out["allOf"] = [inline_core_refs(defs[name], defs, seen | {name}), *out.get("allOf", [])]
    return out


def _core_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    group, _, version = api_version.rpartition("/")
    # Files are named kind-<first label of the group>-version; the group-version-kind inside
    # tells a Kubernetes group from a custom one sharing that first label (resource.nvidia.com).
    prefix = f"{group.split('.')[0]}-" if group else ""
    file = _core_schema_dir() / f"{kind.lower()}-{prefix}{version}.json"
    if not file.is_file():
        return None
    schema: dict[str, Any] = _read_json(file)
    wanted = {"group": group, "version": version, "kind": kind}
    if wanted not in schema.get("x-kubernetes-group-version-kind", []):
        return None
    metadata = schema["properties"]["metadata"]
    schema["properties"]["metadata"] = {**metadata, **_NAME_OR_GENERATE_NAME}
    schema["required"] = sorted({*schema.get("required", ()), "metadata"})
    return schema


# --- custom resources: bundled CRDs --------------------------------------------------------------

# The CRD YAML takes ~0.5 s to parse and its schemas a few ms to translate; this extract holds the
# translated JSON Schemas (a tenth of the size, no descriptions) and loads in about a millisecond. It
# names the sha256 of the YAML it came from; tests/test_schemas.py keeps the two in step (`make crds`),
# so a run reads the extract without hashing the 1.6 MB of YAML again.
_CRD_EXTRACT = _CRD_DIR / "crd-json-schemas.json"


def _crd_sources() -> dict[str, str]:
    import hashlib

    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(_CRD_DIR.glob("*.yaml"))}


def crd_schemas_from_yaml() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, for every served version of every bundled CRD."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for file in sorted(_CRD_DIR.glob("*.yaml")):
        for doc in yaml.load_all(file.read_text(encoding="utf-8"), Loader=_Loader):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if version.get("served", True):
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def crd_json_schema(openapi_schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema a custom resource is validated against, from its CRD's openAPIV3Schema."""
    schema = _structural_to_json_schema(openapi_schema)
    schema.setdefault("properties", {})["metadata"] = _METADATA
    schema["required"] = sorted({*schema.get("required", ()), "metadata"})
    return schema


def crd_extract() -> str:
    """The text of crds/crd-json-schemas.json for the bundled CRDs: JSON Schemas and CEL rules."""
    from stackpin.validate.admission import crd_rules, rule_to_json

    yaml_schemas = crd_schemas_from_yaml()
    schemas = {f"{api}|{kind}": crd_json_schema(schema) for (api, kind), schema in yaml_schemas.items()}
    cel = {f"{api}|{kind}": [rule_to_json(r) for r in crd_rules(schema)]
           for (api, kind), schema in yaml_schemas.items()}
    return json.dumps({"sources": _crd_sources(), "schemas": schemas, "cel": cel}, sort_keys=True) + "\n"


@functools.cache
def _crd_extract() -> dict[str, Any]:
    if _CRD_EXTRACT.is_file():
        extract: dict[str, Any] = _read_json(_CRD_EXTRACT)
        return extract
    return dict(json.loads(crd_extract()))


def _read_json(path: Path) -> Any:
    """A JSON file of package data (schemas of a few MB): msgspec decodes it in half json's time."""
    return msgspec.json.decode(path.read_bytes())


@functools.cache
def _crd_json_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    return {_key(key): schema for key, schema in _crd_extract()["schemas"].items()}


@functools.cache
def _crd_cel_rules() -> dict[tuple[str, str], list[CelRule]]:
    """(apiVersion, kind) -> the CRD's CEL rules, for every served version of every bundled CRD."""
    from stackpin.validate.admission import rule_from_json

    return {_key(key): [rule_from_json(r) for r in rules] for key, rules in _crd_extract()["cel"].items()}


def _key(text: str) -> tuple[str, str]:
    api, kind = text.split("|", 1)
    return api, kind


def _structural_to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """Translate one OpenAPI v3 structural schema node (and its children) into JSON Schema."""
    out = {key: value for key, value in node.items() if key in _COPIED_KEYWORDS}
    # OpenAPI v3.0 writes exclusive bounds as booleans beside minimum/maximum (draft 4 style).
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(exclusive) is True:
            out[exclusive] = out.pop(bound)
        elif out.get(exclusive) is False:
            del out[exclusive]
    if "properties" in node:
        out["properties"] = {
            name: _structural_to_json_schema(sub) for name, sub in node["properties"].items()
        }
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            out[key] = _structural_to_json_schema(node[key])
        elif isinstance(node.get(key), bool):
            out[key] = node[key]
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            out[key] = [_structural_to_json_schema(sub) for sub in node[key]]

    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
        # Structural schemas spell int-or-string as anyOf/allOf of bare types; the type list says
        # the same and gives one clear error instead of a nested "not valid under any" one.
        for key in ("anyOf", "allOf"):
            kept = [sub for sub in out.get(key, ()) if set(sub) - {"type"}]
            if kept:
                out[key] = kept
            else:
                out.pop(key, None)
    if node.get("x-kubernetes-embedded-resource"):
        properties = out.setdefault("properties", {})
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties["metadata"] = _METADATA
        out["required"] = sorted({*out.get("required", ()), "apiVersion", "kind"})
    # Unknown fields under a declared object are pruned by the API server and refused by
    # `kubectl --validate=strict`; for us they are errors, unless the schema keeps them.
    if "properties" in out and not node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    if node.get("nullable"):
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*types, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


# --- error reporting -----------------------------------------------------------------------------

_Path = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"[A-Za-z_$][\w$-]*")


def _findings(error: ValidationError) -> Iterator[tuple[_Path, str]]:
    """(path, reason) pairs for one jsonschema error, pointing at the offending field itself."""
    path: _Path = tuple(error.absolute_path)
    instance, schema = error.instance, error.schema
    if error.validator == "additionalProperties" and isinstance(instance, dict) and isinstance(schema, Mapping):
        known = schema.get("properties", {})
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        for key in instance:
            if key not in known and not any(p.search(key) for p in patterns):
                yield (*path, key), "unknown field"
    elif error.validator == "required" and isinstance(instance, dict) and isinstance(error.validator_value, list):
        for key in error.validator_value:
            if key not in instance:
                yield (*path, key), "required field is missing"
    elif error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        yield path, f"expected {expected}, got {_json_type(instance)} {_short(instance)}"
    elif error.validator == "enum" and isinstance(error.validator_value, list):
        allowed = ", ".join(_short(v) for v in error.validator_value)
        yield path, f"{_short(instance)} is not one of: {allowed}"
    elif error.validator == "pattern" and error.validator_value in _PATTERN_NAMES:
        yield path, f"{_short(instance)} is not {_PATTERN_NAMES[error.validator_value]}"
    else:
        yield path, _clip(error.message, 200)


def _json_type(value: Any) -> str:
    for python_type, name in ((bool, "boolean"), (int, "integer"), (float, "number"),
                              (str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, python_type):
            return name
    return "null"


def _short(value: Any) -> str:
    return _clip(json.dumps(value, default=str), 60)


def _clip(text: str, limit: int) -> str:
    # jsonschema messages embed the whole failing value, which can be a large object.
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _format_path(path: _Path) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def _path_key(path: _Path) -> tuple[tuple[int, int, str], ...]:
    # Indexes sort numerically ([2] before [10]); keys sort by name.
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in path)
