"""An SGLang release's catalog: its server options (sglang_args.py), the values they allow by kind, the
speculative algorithms `SpeculativeAlgorithm.from_string` takes, and the env vars the package reads
(the `Envs` registry of sglang/srt/environ.py, its deprecated names, and direct reads elsewhere)."""

from __future__ import annotations

import ast
import re

from stackpin.catalog.engine_data import Deprecation, EngineOption, EnvVar, SglangRelease, Source, typed
from stackpin.engines.package import Package
from stackpin.engines.pysource import SourceTree, Unknown, call_name, keywords
from stackpin.engines.sglang_args import SERVER_ARGS, extract_options

ENVIRON = "sglang.srt.environ"
SPEC_INFO = "sglang.srt.speculative.spec_info"
SPEC_REGISTRY = "sglang.srt.speculative.spec_registry"
PREFIXES = ("sglang/",)
# Kinds of values -> the option whose choices hold them.
KINDS = {
    "attention_backends": "--attention-backend",
    "decode_attention_backends": "--decode-attention-backend",
    "prefill_attention_backends": "--prefill-attention-backend",
    "moe_runner_backends": "--moe-runner-backend",
    "moe_a2a_backends": "--moe-a2a-backend",
    "kv_cache_dtypes": "--kv-cache-dtype",
    "cuda_graph_backends": "--cuda-graph-backend-decode",
    "disaggregation_modes": "--disaggregation-mode",
    "disaggregation_transfer_backends": "--disaggregation-transfer-backend",
    "fp8_gemm_backends": "--fp8-gemm-backend",
    "fp4_gemm_backends": "--fp4-gemm-backend",
    "sampling_backends": "--sampling-backend",
    "grammar_backends": "--grammar-backend",
    "quantizations": "--quantization",
    "load_formats": "--load-format",
}
_ENV_TYPES = {"EnvBool": "bool", "EnvInt": "int", "EnvFloat": "float", "EnvStr": "str", "EnvTuple": "tuple[str, ...]",
              "EnvJSON": "json"}
_READERS = {"get_bool_env_var": "bool", "get_int_env_var": "int", "get_float_env_var": "float",
            "os.getenv": "str", "os.environ.get": "str"}
# get_bool_env_var("SGLANG_X", "false") / os.getenv("SGLANG_X") / os.environ.get("SGLANG_X", "1")
_DIRECT = re.compile(r"(?P<reader>get_bool_env_var|get_int_env_var|get_float_env_var|os\.getenv|os\.environ\.get)"
                     r"\(\s*[\"'](?P<name>SGL(?:ANG)?_[A-Z0-9_]+)[\"']"
                     r"(?:\s*,\s*(?P<default>\"[^\"\\]*\"|'[^'\\]*'|-?\d+(?:\.\d+)?|True|False|None))?\s*[,)]")
RULES = (
    "plain argparse (argparse.ArgumentParser in server_args.py prepare_server_args): only the registered "
    "spellings; no underscore forms",
    "argparse's allow_abbrev is on: an unambiguous prefix of a long option is accepted (--cuda-graph-max-bs is "
    "a prefix of both --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill, so argparse refuses it)",
    "bool fields are store_true (no --no-x) unless the field names argparse.BooleanOptionalAction",
    "an env var SGL_X is read as SGLANG_X, with a warning (environ.py _handle_deprecated_envs)",
)


def _split(value: object) -> tuple[object, str | None]:
    return (None, value.expr) if isinstance(value, Unknown) else (value, None)


def _where(tree: SourceTree, module: str, node: ast.AST) -> str:
    return f"{tree.path_of(module) or module}:{getattr(node, 'lineno', 0)}"


def env_vars(tree: SourceTree) -> dict[str, EnvVar]:
    """The `Envs` registry (`NAME = EnvBool(default)` ...), its deprecated names, then every
    SGLANG_* name read directly elsewhere in the package (get_bool_env_var, os.getenv, os.environ.get)."""
    module = tree.module(ENVIRON)
    if module is None:
        raise LookupError("sglang/srt/environ.py")
    out: dict[str, EnvVar] = {}
    envs = next((s for s in module.body if isinstance(s, ast.ClassDef) and s.name == "Envs"), None)
    for stmt in envs.body if envs else []:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Call)):
            continue
        name, call = stmt.targets[0].id, stmt.value
        kind = call_name(call)
        base = kind.removesuffix("WithAlias")
        if base not in _ENV_TYPES:
            continue
        default, expr = _split(tree.value(ENVIRON, call.args[0])) if call.args else (None, None)
        out[name] = EnvVar(type=_ENV_TYPES[base], default=default, default_expr=expr,
                           source=_where(tree, ENVIRON, stmt))
        alias = keywords(call).get("deprecated_name")
        if isinstance(alias, ast.Constant) and isinstance(alias.value, str):
            out[alias.value] = EnvVar(type=_ENV_TYPES[base], source=_where(tree, ENVIRON, stmt),
                                      deprecated=Deprecation(replacement=name, message=f"read when {name} is unset"))
    for stmt in module.body:  # _DEPRECATED_ENVS: {"OLD": _DeprecatedEnv(replacement=..., note=...)}
        if (isinstance(stmt, ast.AnnAssign | ast.Assign) and isinstance(stmt.value, ast.Dict)
                and "DEPRECATED" in ast.unparse(stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target)):
            for key, value in zip(stmt.value.keys, stmt.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Call):
                    said = keywords(value)
                    replacement = tree.value(ENVIRON, said.get("replacement"))
                    note = tree.text_of(ENVIRON, said.get("note"))
                    out.setdefault(key.value, EnvVar(source=_where(tree, ENVIRON, key), deprecated=Deprecation(
                        replacement=replacement if isinstance(replacement, str) else None,
                        message=" ".join(note.split()) if note else None)))
    # Direct reads, found in the text (parsing every module of the package would take most of a minute).
    for path in sorted(tree.files):
        text = tree.files[path]
        if not path.startswith("sglang/srt/") or path == "sglang/srt/environ.py" or "SGL" not in text:
            continue
        for match in _DIRECT.finditer(text):
            name = match.group("name")
            if name in out:
                continue
            literal = match.group("default")
            default = ast.literal_eval(literal) if literal else None
            out[name] = EnvVar(type=_READERS[match.group("reader")], default=default,
                               source=f"{path}:{text.count(chr(10), 0, match.start()) + 1}")
    return dict(sorted(out.items()))


def speculative_algorithms(tree: SourceTree) -> tuple[str, ...]:
    """The names `SpeculativeAlgorithm.from_string` takes (upper-cased first): the enum's members but NONE,
    and the reserved aliases it maps to EAGLE (NEXTN)."""
    found = tree.find_class(SPEC_INFO, "SpeculativeAlgorithm")
    if found is None:
        raise LookupError("sglang/srt/speculative/spec_info.py SpeculativeAlgorithm")
    members = set(tree.enum_members(found[1])) - {"NONE"}
    hit = tree.lookup(SPEC_REGISTRY, "_RESERVED_ALIASES")  # frozenset({"NEXTN"})
    value = hit[1].value if hit and isinstance(hit[1], ast.Assign) else None
    if isinstance(value, ast.Call) and call_name(value) in {"frozenset", "set"} and value.args:
        value = value.args[0]
    aliases = tree.strings(hit[0], value) if hit and value is not None else None
    if aliases is None:
        raise LookupError("sglang/srt/speculative/spec_registry.py _RESERVED_ALIASES")
    return tuple(sorted(members | set(aliases)))


def _choices(tree: SourceTree, options: dict[str, EngineOption]) -> dict[str, tuple[str, ...]]:
    out = {kind: options[flag].choices or () for kind, flag in KINDS.items() if flag in options}
    out["speculative_algorithms"] = speculative_algorithms(tree)
    return out


def build(package: Package) -> SglangRelease:
    tree = SourceTree(package.files)
    extracted = extract_options(tree)
    options = extracted.options
    accepted = {s for option in options.values() for s in option.all_strings}
    if tree.module(SERVER_ARGS) is None:
        raise LookupError("sglang/srt/server_args.py")
    return typed(SglangRelease(
        version=package.version,
        option_strings=tuple(sorted(accepted)),
        boolean_optional_options=tuple(sorted(f for f, o in options.items() if o.boolean_optional)),
        options=options,
        rules=RULES,
        server_args_fields=extracted.fields,
        choices=_choices(tree, options),
        env_vars=env_vars(tree),
        requires=package.requires,
        unresolved=tuple(sorted({*extracted.unresolved, *(f"{p}: syntax this Python cannot parse"
                                                           for p in tree.unparsable)})),
        source=Source(package=package.filename, sha256=package.sha256, files_parsed=tuple(sorted(tree.used))),
    ))
