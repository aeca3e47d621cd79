"""What the API server and Dynamo's admission webhook refuse when an object is created, beyond its schema.

- The bundled CRDs' CEL rules (`x-kubernetes-validations`), evaluated as the API server does on create:
  `self` is the value at the rule's node, present values only, with the node's own property defaults
  filled in (the API server defaults before it validates; these rules read only direct children);
  transition rules (`oldSelf` without `optionalOldSelf`) do not run on create, and with
  `optionalOldSelf` `oldSelf` is an empty optional.
- Dynamo's create rules the bundled CRD lacks (`stackpin/catalog/dynamo_admission.yaml`: the newer CRD's
  rules and the webhook's checks restated in CEL), and the webhook's Grove name budget, computed as
  the operator computes it (PodCliqueSet name shortening included).

The Kubernetes CEL library functions these rules call (`lowerAscii`, `split`, `quantity` and its
comparisons) are provided here; a rule that calls anything else is reported, never passed.
The CEL library (`cel`, common-expression-language) is imported on first use.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import msgspec

from stackpin.catalog import DynamoAdmission, GroveNames, load_catalog

if TYPE_CHECKING:
    import cel

Path = tuple[str | int, ...]
ANY_ITEM, ANY_KEY = "[*]", "{*}"  # a schema path segment: every list item, every map value


class CelRule(msgspec.Struct, frozen=True):
    path: tuple[str, ...]  # property names, ANY_ITEM, ANY_KEY
    rule: str
    message: str
    field: str = ""  # what the error names, under the value's path
    defaults: Mapping[str, Any] = msgspec.field(default_factory=dict)  # the node's property defaults
    optional_old_self: bool = False
    origin: str = "CRD"

    @property
    def transition(self) -> bool:
        """Compares with the stored object: the API server runs it on update only."""
        return not self.optional_old_self and re.search(r"\boldSelf\b", self.rule) is not None


def crd_rules(openapi_schema: Mapping[str, Any]) -> list[CelRule]:
    """Every x-kubernetes-validations rule of one CRD version's schema, with its node's path."""
    out: list[CelRule] = []

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        properties = node.get("properties") or {}
        defaults = {k: v["default"] for k, v in properties.items() if isinstance(v, dict) and "default" in v}
        for entry in node.get("x-kubernetes-validations") or ():
            out.append(CelRule(path, entry["rule"], entry.get("message") or f"failed rule: {entry['rule']}",
                               entry.get("fieldPath", "").lstrip("."), defaults,
                               bool(entry.get("optionalOldSelf"))))
        for name, sub in properties.items():
            walk(sub, (*path, name))
        for key, segment in (("items", ANY_ITEM), ("additionalProperties", ANY_KEY)):
            if isinstance(node.get(key), dict):
                walk(node[key], (*path, segment))

    walk(openapi_schema, ())
    return out


def rule_to_json(rule: CelRule) -> dict[str, Any]:
    return {"path": list(rule.path), "rule": rule.rule, "message": rule.message, "field": rule.field,
            "defaults": dict(rule.defaults), "optionalOldSelf": rule.optional_old_self}


def rule_from_json(entry: Mapping[str, Any]) -> CelRule:
    return CelRule(tuple(entry["path"]), entry["rule"], entry["message"], entry["field"], entry["defaults"],
                   entry["optionalOldSelf"])


def _split_path(text: str) -> tuple[str, ...]:
    return tuple(part for piece in text.split(".") for part in re.split(r"(\[\*\])", piece) if part)


def admission_rules(facts: DynamoAdmission, api_version: str, kind: str) -> list[CelRule]:
    """The catalog's create rules for one kind (the webhook's checks and the newer CRD's rules)."""
    return [CelRule(_split_path(r.path), r.rule, r.message, r.field, {}, r.optional_old_self,
                    "Dynamo webhook" if r.origin == "webhook" else "Dynamo CRD >= 1.5")
            for r in facts.rules if (r.api_version, r.kind) == (api_version, kind)]


# --- evaluation ----------------------------------------------------------------------------------

def _values(obj: Any, path: Sequence[str], at: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(concrete path, value) for every value present at a schema path."""
    if not path:
        yield at, obj
        return
    head, rest = path[0], path[1:]
    if head == ANY_ITEM:
        if isinstance(obj, list):
            for index, item in enumerate(obj):
                yield from _values(item, rest, (*at, index))
    elif head == ANY_KEY:
        if isinstance(obj, dict):
            for key, item in obj.items():
                yield from _values(item, rest, (*at, key))
    elif isinstance(obj, dict) and head in obj and obj[head] is not None:
        yield from _values(obj[head], rest, (*at, head))


_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)")
_SUFFIX: dict[str, Decimal | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes resource quantity (`200Gi`, `-1Gi`, `1.5`, `1e3`, `500m`) as a number."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, exponent, suffix = match.groups()
    try:
        value = Decimal(number) * (Decimal(f"1{exponent}") if exponent else 1)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None
    return value * Decimal(_SUFFIX[suffix]) if suffix else value


def _quantity(text: str) -> float:
    return float(parse_quantity(text))


# Kubernetes' CEL extensions the bundled rules use (k8s.io/apiserver/pkg/cel/library; strings ext).
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "lowerAscii": lambda s: "".join(c.lower() if c.isascii() else c for c in s),
    "upperAscii": lambda s: "".join(c.upper() if c.isascii() else c for c in s),
    "split": lambda s, sep: s.split(sep),
    "trim": lambda s: s.strip(),
    "quantity": _quantity,
    "isQuantity": lambda s: _QUANTITY.fullmatch(s.strip()) is not None,
    "isLessThan": lambda a, b: a < b,
    "isGreaterThan": lambda a, b: a > b,
    "compareTo": lambda a, b: (a > b) - (a < b),
    "sign": lambda a: (a > 0) - (a < 0),
}
# CEL's own operators, macros and standard functions.
_BUILTIN = re.compile(r"^(?:_.*_|_\[_\]|!_|-_|@.*|size|has|all|exists|exists_one|filter|map|contains|startsWith|"
                      r"endsWith|matches|int|uint|double|string|bool|type|hasValue|value|orValue|optional\..*)$")


def unknown_functions(rule: str) -> list[str]:
    """Functions a rule calls that neither CEL nor this module provides (the rule cannot be evaluated)."""
    return sorted(f for f in _compile(rule).functions() if f not in _FUNCTIONS and not _BUILTIN.match(f))


@functools.cache
def _cel() -> Any:
    """The CEL engine: common-expression-language's compiled extension, loaded on its own. The package's
    `__init__` also imports its interactive shell (typer, prompt_toolkit: 150 ms of a 10 ms load), which
    stackpin never uses. Falls back to the ordinary import if the extension is not where the wheel puts it."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("cel")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'cel'", name="cel")
    for location in spec.submodule_search_locations:
        for library in sorted(Path(location).glob("cel.*.so")) + sorted(Path(location).glob("cel.*.pyd")):
            extension = importlib.util.spec_from_file_location("cel.cel", library)
            if extension is None or extension.loader is None:
                continue
            module = importlib.util.module_from_spec(extension)
            extension.loader.exec_module(module)
            return module
    import cel

    return cel


@functools.cache
def _compile(rule: str) -> cel.Program:
    program: cel.Program = _cel().compile(rule)
    return program


def _context(rule: CelRule, value: Any) -> cel.Context:
    """The CEL activation of a rule at one value on create: `self` (with the node's defaults), `oldSelf` an empty
    optional (what a rule with optionalOldSelf reads; one without never runs on create if it reads oldSelf, so
    the variable is there for every rule and rules at one node share the activation), the functions."""
    engine = _cel()
    if isinstance(value, dict) and rule.defaults:
        value = {**rule.defaults, **value}
    context: cel.Context = engine.Context()
    context.add_variable("self", value)
    context.add_variable("oldSelf", engine.OptionalValue.none())
    for name, function in _FUNCTIONS.items():
        context.add_function(name, function)
    return context


def evaluate(rule: CelRule, value: Any, context: cel.Context | None = None) -> str | None:
    """None when the value passes; else why not (the rule's message, or the evaluation error). `context`: the
    activation `_context(rule, value)` gives, when the caller has it already."""
    unknown = unknown_functions(rule.rule)
    if unknown:
        return f"CEL rule {rule.rule!r} calls {', '.join(unknown)}, which stackpin cannot evaluate"
    try:
        result = _compile(rule.rule).execute(context or _context(rule, value))
    except Exception as exc:  # the API server refuses an object its rule cannot evaluate
        return f"CEL rule {rule.rule!r} does not evaluate: {str(exc).splitlines()[0]}"
    return None if result is True else rule.message


def cel_problems(obj: Mapping[str, Any], rules: Sequence[CelRule]) -> list[tuple[Path, str]]:
    """(field path, message) for every rule the object breaks on create. Rules at one node share its activation:
    turning a value into CEL's is most of an evaluation's cost, and several rules read the same component."""
    out = []
    contexts: dict[tuple[Path, bytes], cel.Context] = {}
    for rule in rules:
        if rule.transition:
            continue
        for at, value in _values(obj, rule.path):
            key = (at, msgspec.json.encode(rule.defaults, order="sorted"))
            if key not in contexts:
                contexts[key] = _context(rule, value)
            message = evaluate(rule, value, contexts[key])
            if message is not None:
                where = (*at, *_split_path(rule.field)) if rule.field else at
                out.append((where, f"{message} ({rule.origin} rule)"))
    return out


# --- Grove names ---------------------------------------------------------------------------------

class GroveComponent(msgspec.Struct, frozen=True):
    name: str
    multinode: bool  # a scaling group: leader and worker PodCliques


def _fnv1a32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def _budget(component: GroveComponent, facts: GroveNames) -> int:
    lower = component.name.lower()
    return len(lower) + len(longest_clique(component, facts)) if component.multinode else len(lower)


def longest_clique(component: GroveComponent, facts: GroveNames) -> str:
    lower = component.name.lower()
    return max((f"{lower}-{suffix}" for suffix in facts.role_suffixes), key=len) if component.multinode else lower


def pcs_name(dgd_name: str, components: Sequence[GroveComponent], facts: GroveNames) -> str:
    """The PodCliqueSet name the operator gives a DGD: its name, shortened with a hash when too long."""
    budget = max(facts.limit - max((_budget(c, facts) for c in components), default=0), facts.min_pcs_name)
    if len(dgd_name) <= budget:
        return dgd_name
    suffix = f"{_fnv1a32(dgd_name.encode()) & 0xFFFF:0{facts.hash_hex}x}"
    return f"{dgd_name[:budget - facts.hash_hex - 1]}-{suffix}"


def grove_name_length(dgd_name: str, components: Sequence[GroveComponent], component: GroveComponent,
                      facts: GroveNames) -> int:
    """What the webhook measures for one component against `facts.limit`."""
    length = len(pcs_name(dgd_name, components, facts)) + len(component.name.lower())
    return length + len(longest_clique(component, facts)) if component.multinode else length


def grove_problems(obj: Mapping[str, Any], facts: GroveNames) -> list[tuple[Path, str]]:
    """The webhook's Grove name check on a DGD of either version (Grove pathway assumed, as stackpin
    renders for it)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    named: list[tuple[Path, GroveComponent]] = []
    if isinstance(spec.get("components"), list):
        named = [(("spec", "components", i, "name"), GroveComponent(str(c["name"]), _nodes(c) > 1))
                 for i, c in enumerate(spec["components"]) if isinstance(c, dict) and isinstance(c.get("name"), str)]
    elif isinstance(spec.get("services"), dict):
        named = [(("spec", "services", key), GroveComponent(key, _nodes(c) > 1))
                 for key, c in spec["services"].items() if isinstance(c, dict)]
    dgd_name = str((obj.get("metadata") or {}).get("name") or "")
    components = [c for _, c in named]
    out = []
    for where, component in named:
        length = grove_name_length(dgd_name, components, component, facts)
        if length > facts.limit:
            parts = "PodCliqueSet + component + longest PodClique name" if component.multinode else \
                "PodCliqueSet + component name"
            out.append((where, f"Grove names of {component.name!r} are {length} characters ({parts}, the "
                        f"PodCliqueSet named {pcs_name(dgd_name, components, facts)!r}); Dynamo's webhook admits "
                        f"at most {facts.limit}: shorten the component name (Dynamo webhook rule)"))
    return out


def _nodes(component: Mapping[str, Any]) -> int:
    count = (component.get("multinode") or {}).get("nodeCount")
    return count if isinstance(count, int) else 1


def admission_problems(api_version: str, kind: str, obj: Mapping[str, Any],
                       crd: Sequence[CelRule]) -> list[tuple[Path, str]]:
    """Everything the API server (CEL) and Dynamo's webhook refuse in `obj` on create."""
    if not (kind == "DynamoGraphDeployment" and api_version.startswith("nvidia.com/")):
        return cel_problems(obj, crd)
    facts = load_catalog().dynamo_admission
    # One pass over both rule sets: rules at one node share its activation (cel_problems).
    return cel_problems(obj, [*crd, *admission_rules(facts, api_version, kind)]) + grove_problems(obj,
                                                                                                facts.grove_names)
