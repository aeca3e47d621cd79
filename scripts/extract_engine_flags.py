#!/usr/bin/env python3
"""Extract the CLI surface of a pinned vLLM and ai-dynamo release into JSON catalogs.

Maintainer script (not run by tests or CI). It downloads the published package files
from PyPI into a temp dir and reads them with ``ast`` only: importing vLLM needs torch
and a GPU, and the point is to check stackpin's flags against the *pinned* engine.

    .venv/bin/python scripts/extract_engine_flags.py --vllm 0.33.0 --dynamo 1.6.1

writes ``stackpin/catalog/engines/vllm-<v>.json`` and ``dynamo-<v>.json``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "stackpin" / "catalog" / "engines"
INDEX = "https://pypi.org/simple/{name}/"

# vLLM's argparse turns `bool` fields into BooleanOptionalAction; recorded as a rule so
# consumers derive `--no-x` themselves instead of us listing guessed spellings.
BOOL_RULE = (
    "Options listed in boolean_optional_options use argparse.BooleanOptionalAction: "
    "for each long option --x, argparse also registers --no-x at runtime."
)


# --------------------------------------------------------------------------- download


@dataclass
class PackageFile:
    filename: str
    sha256: str
    files: dict[str, str]  # package-relative path -> source text (only .py we may need)


def _index_files(name: str) -> list[dict[str, Any]]:
    # PEP 691 JSON simple index: the same endpoint pip reads.
    req = urllib.request.Request(
        INDEX.format(name=name), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)["files"]


def _pick(name: str, version: str, files: list[dict[str, Any]]) -> dict[str, Any]:
    norm = name.replace("-", "_")
    sdists = [f for f in files if f["filename"] in (f"{name}-{version}.tar.gz",
                                                   f"{norm}-{version}.tar.gz")]
    if sdists:
        return sdists[0]
    # No sdist (ai-dynamo ships wheels only): prefer a pure wheel, else x86_64.
    wheels = [f for f in files
              if f["filename"].startswith(f"{norm}-{version}-") and f["filename"].endswith(".whl")]
    wheels.sort(key=lambda f: ("none-any" not in f["filename"], "x86_64" not in f["filename"]))
    if not wheels:
        sys.exit(f"no sdist or wheel for {name}=={version} on PyPI")
    return wheels[0]


def download(name: str, version: str, workdir: Path, prefixes: tuple[str, ...]) -> PackageFile:
    """Fetch the sdist (or a wheel) and return its .py files under `prefixes`.

    `pip download --no-binary :all:` cannot be used for vLLM: pip must build the sdist's
    metadata, which needs torch and cmake. So we read the index pip reads and verify
    the sha256 it publishes.
    """
    meta = _pick(name, version, _index_files(name))
    target = workdir / meta["filename"]
    if not target.exists():
        with urllib.request.urlopen(meta["url"], timeout=600) as resp:
            target.write_bytes(resp.read())
    data = target.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta["hashes"]["sha256"]:
        sys.exit(f"sha256 mismatch for {meta['filename']}")
    files: dict[str, str] = {}

    def keep(rel: str) -> bool:
        return rel.endswith(".py") and rel.startswith(prefixes)

    if meta["filename"].endswith(".tar.gz"):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                # Drop the leading "vllm-X.Y.Z/" directory of the sdist.
                rel = str(PurePosixPath(*PurePosixPath(member.name).parts[1:]))
                if member.isfile() and keep(rel):
                    fh = tar.extractfile(member)
                    assert fh is not None
                    files[rel] = fh.read().decode("utf-8")
    else:
        with zipfile.ZipFile(io.BytesIO(data)) as whl:
            for rel in whl.namelist():
                if keep(rel):
                    files[rel] = whl.read(rel).decode("utf-8")
    return PackageFile(meta["filename"], digest, files)


# --------------------------------------------------------------------------- AST helpers


class Tree:
    """Module lookup and symbol resolution over the extracted sources."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self._cache: dict[str, ast.Module] = {}
        self.used: set[str] = set()  # files actually parsed, for the `source` record

    def path_of(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for cand in (f"{base}.py", f"{base}/__init__.py"):
            if cand in self.files:
                return cand
        return None

    def module(self, module: str) -> ast.Module | None:
        path = self.path_of(module)
        if path is None:
            return None
        if path not in self._cache:
            self._cache[path] = ast.parse(self.files[path], filename=path)
        self.used.add(path)
        return self._cache[path]

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """Find the top-level statement defining `name` in `module`, following imports."""
        mod = self.module(module)
        if mod is None or depth > 8:
            return None
        # Walk top-level statements and those under `if TYPE_CHECKING:`/try blocks.
        stmts: list[ast.stmt] = []
        for st in mod.body:
            stmts.append(st)
            if isinstance(st, (ast.If, ast.Try)):
                stmts.extend(st.body)
                stmts.extend(getattr(st, "orelse", []))
        for st in stmts:
            if isinstance(st, ast.ClassDef) and st.name == name:
                return module, st
            if isinstance(st, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in st.targets
            ):
                return module, st
            if (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                    and st.target.id == name and st.value is not None):
                return module, st
        for st in stmts:
            if isinstance(st, ast.ImportFrom):
                for alias in st.names:
                    if (alias.asname or alias.name) == name:
                        src = self._resolve_from(module, st)
                        if src and (hit := self.lookup(src, alias.name, depth + 1)):
                            return hit
        return None

    def _resolve_from(self, module: str, st: ast.ImportFrom) -> str | None:
        if st.level == 0:
            return st.module
        pkg = module.split(".")
        is_pkg = (self.path_of(module) or "").endswith("__init__.py")
        base = pkg if is_pkg else pkg[:-1]
        base = base[: len(base) - (st.level - 1)]
        return ".".join(base + ([st.module] if st.module else []))

    def imported_modules(self, module: str) -> list[str]:
        mod = self.module(module)
        out: list[str] = []
        if mod is None:
            return out
        for node in ast.walk(mod):
            if isinstance(node, ast.ImportFrom) and (src := self._resolve_from(module, node)):
                out.append(src)
        return out

    # ---- value resolution

    def enum_members(self, cls: ast.ClassDef) -> dict[str, Any]:
        members: dict[str, Any] = {}
        for st in cls.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(
                st.targets[0], ast.Name
            ):
                name = st.targets[0].id
                if name.startswith("_"):
                    continue
                try:
                    members[name] = ast.literal_eval(st.value)
                except ValueError:
                    members[name] = None  # e.g. auto() or a tuple of other members
        return members

    def strings(self, module: str, node: ast.AST | None, depth: int = 0) -> list[str] | None:
        """Resolve a choices/Literal expression to its strings; None if not static."""
        if node is None or depth > 12:
            return None
        rec = lambda n: self.strings(module, n, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant):
            return [node.value] if isinstance(node.value, str) else []
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list[str] = []
            for elt in node.elts:
                part = rec(elt.value if isinstance(elt, ast.Starred) else elt)
                if part is None:
                    return None
                out += part
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
            left, right = rec(node.left), rec(node.right)
            if isinstance(node.op, ast.BitOr):  # type union: ignore non-literal members
                return (left or []) + (right or [])
            return None if left is None or right is None else left + right
        if isinstance(node, ast.Subscript):
            head = _dotted(node.value)
            if head.endswith("Literal") or head.endswith("Optional") or head.endswith("Union"):
                return rec(node.slice)
            return None
        if isinstance(node, ast.Call):
            fname = _dotted(node.func)
            if fname.split(".")[-1] in {"get_args", "list", "tuple", "sorted", "set"} and node.args:
                return rec(node.args[0])
            return None
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            # [m.value for m in SomeEnum] / [m.name for m in SomeEnum]
            gen = node.generators[0]
            elt = node.elt
            if (not gen.ifs and isinstance(elt, ast.Attribute) and isinstance(gen.iter, ast.Name)
                    and (hit := self.lookup(module, gen.iter.id))
                    and isinstance(hit[1], ast.ClassDef)):
                members = self.enum_members(hit[1])
                if elt.attr == "name":
                    return list(members)
                if elt.attr == "value" and all(isinstance(v, str) for v in members.values()):
                    return list(members.values())
            return None
        if isinstance(node, ast.Name):
            if node.id in {"str", "int", "float", "bool", "None", "dict", "list"}:
                return []
            hit = self.lookup(module, node.id)
            if hit is None:
                return None
            mod, st = hit
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                return self.strings(mod, st.value, depth + 1)
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            # SomeEnum.MEMBER -> its value
            hit = self.lookup(module, node.value.id)
            if hit and isinstance(hit[1], ast.ClassDef):
                val = self.enum_members(hit[1]).get(node.attr)
                return [val] if isinstance(val, str) else None
        return None

    def find_class(self, module: str, name: str) -> tuple[str, ast.ClassDef] | None:
        hit = self.lookup(module, name)
        if hit and isinstance(hit[1], ast.ClassDef):
            return hit[0], hit[1]
        return None

    def class_fields(self, module: str, name: str) -> dict[str, tuple[str, ast.expr]]:
        """Annotated fields of a (data)class including bases: name -> (module, annotation)."""
        found = self.find_class(module, name)
        if found is None:
            return {}
        mod, cls = found
        out: dict[str, tuple[str, ast.expr]] = {}
        for base in cls.bases:
            if isinstance(base, ast.Name):
                out.update(self.class_fields(mod, base.id))
        for st in cls.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                if "ClassVar" in ast.unparse(st.annotation):
                    continue
                out[st.target.id] = (mod, st.annotation)
        return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _union_members(tree: Tree, module: str, ann: ast.AST, depth: int = 0) -> list[str]:
    """Flatten a type annotation into the unparsed names of its union members."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):  # string annotation
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return [ann.value]
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        return (_union_members(tree, module, ann.left, depth)
                + _union_members(tree, module, ann.right, depth))
    if isinstance(ann, ast.Subscript) and _dotted(ann.value).split(".")[-1] in {
        "Optional", "Union"
    }:
        inner = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        return [m for e in inner for m in _union_members(tree, module, e, depth)] + (
            ["None"] if _dotted(ann.value).endswith("Optional") else []
        )
    # Follow a plain type alias (e.g. `OptimizationLevel = Literal[...]`) one level.
    if isinstance(ann, ast.Name) and depth < 4 and (hit := tree.lookup(module, ann.id)):
        mod, st = hit
        if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
            if isinstance(st.value, (ast.BinOp, ast.Subscript)):
                return _union_members(tree, mod, st.value, depth + 1)
    text = ast.unparse(ann)
    return ["Literal"] if text.startswith(("Literal[", "typing.Literal[")) else [text]


@dataclass
class FieldInfo:
    owner: str
    name: str
    annotation: str
    is_bool: bool
    literal_choices: list[str] | None
    accepts_any_str: bool


def field_info(tree: Tree, module: str, owner: str, name: str) -> FieldInfo | None:
    fields_ = tree.class_fields(module, owner)
    if name not in fields_:
        return None
    mod, ann = fields_[name]
    members = set(_union_members(tree, mod, ann))
    # Mirrors vllm's _compute_kwargs: `bool | str | None` is an optional-valued flag,
    # any other union containing bool becomes BooleanOptionalAction.
    is_bool = "bool" in members and members != {"bool", "str", "None"}
    choices = None
    if "Literal" in members:
        choices = sorted(set(tree.strings(mod, ann) or []))
    return FieldInfo(owner, name, ast.unparse(ann), is_bool, choices or None, "str" in members)


# --------------------------------------------------------------------------- vLLM


@dataclass
class OptionRecord:
    strings: list[str]
    boolean_optional: bool = False
    store_true: bool = False
    config_field: str | None = None
    choices: list[str] | None = None
    choices_enforced: bool = False
    notes: list[str] = field(default_factory=list)


def _kwargs_source(node: ast.AST) -> tuple[str, str] | None:
    """`foo_kwargs["field"]` (possibly inside `{**foo_kwargs["field"], ...}`) -> (var, field)."""
    if isinstance(node, ast.Dict):
        for key, val in zip(node.keys, node.values, strict=True):
            if key is None and (src := _kwargs_source(val)):
                return src
        return None
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
        return node.value.id, node.slice.value
    return None


def extract_vllm_options(tree: Tree, module: str) -> dict[str, OptionRecord]:
    mod = tree.module(module)
    assert mod is not None, module
    records: dict[str, OptionRecord] = {}
    for fn in ast.walk(mod):
        if not (isinstance(fn, ast.FunctionDef) and fn.name == "add_cli_args"):
            continue
        kw_class: dict[str, str] = {}  # foo_kwargs -> ConfigClass
        kw_alias: dict[str, tuple[str, str]] = {}  # moe_kwargs -> (foo_kwargs, field)
        removed: dict[tuple[str, str], list[str]] = {}
        modified: set[tuple[str, str]] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name
            ):
                var, val = node.targets[0].id, node.value
                if isinstance(val, ast.Call) and _dotted(val.func) == "get_kwargs" and val.args:
                    kw_class[var] = _dotted(val.args[0])
                elif isinstance(val, ast.Subscript) and isinstance(val.slice, ast.Constant):
                    inner = val.value
                    if isinstance(inner, ast.Call) and _dotted(inner.func) == "get_kwargs":
                        # get_kwargs(VllmConfig)["logging_config"]
                        kw_class[f"<{var}>"] = _dotted(inner.args[0])
                        kw_alias[var] = (f"<{var}>", val.slice.value)
                    elif (src := _kwargs_source(val)) is not None:
                        kw_alias[var] = src
            # foo_kwargs["f"]["choices"].remove(X) / += [...] : runtime edits of choices
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target, edit = node.func.value, node.func.attr
            elif isinstance(node, ast.AugAssign):
                target, edit = node.target, "augment"
            if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                    and target.slice.value == "choices"
                    and (src := _kwargs_source(target.value))):
                if edit == "remove" and isinstance(node, ast.Call):
                    vals = tree.strings(module, node.args[0])
                    if vals:
                        removed.setdefault(src, []).extend(vals)
                        continue
                modified.add(src)

        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            opts = [a.value for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                    and a.value.startswith("-")]
            if not opts:
                continue
            rec = OptionRecord(strings=opts)
            for kw in node.keywords:
                if kw.arg == "action":
                    action = ast.unparse(kw.value)
                    rec.boolean_optional = "BooleanOptionalAction" in action
                    rec.store_true = action.strip("'\"") == "store_true"
                elif kw.arg == "choices":
                    rec.choices = tree.strings(module, kw.value)
                    rec.choices_enforced = rec.choices is not None
                    if rec.choices is None:
                        rec.notes.append("choices computed at runtime")
                elif kw.arg is None and (src := _kwargs_source(kw.value) or (
                    kw_alias.get(kw.value.id) if isinstance(kw.value, ast.Name) else None
                )):
                    src = kw_alias.get(src[0], src) if src[0] in kw_alias else src
                    var, fname = src
                    owner = kw_class.get(var)
                    if owner is None:
                        continue
                    info = field_info(tree, module, owner, fname)
                    if info is None:
                        rec.notes.append(f"field {owner}.{fname} not found")
                        continue
                    rec.config_field = f"{owner}.{fname}"
                    rec.boolean_optional = rec.boolean_optional or info.is_bool
                    if info.literal_choices and rec.choices is None:
                        drop = set(removed.get(src, []))
                        rec.choices = [c for c in info.literal_choices if c not in drop]
                        # vllm uses metavar (no argparse check) when the union has `str`.
                        rec.choices_enforced = not info.accepts_any_str
                        if drop:
                            rec.notes.append(f"removed from CLI choices: {sorted(drop)}")
                    if src in modified:
                        rec.notes.append("choices extended at runtime")
            records[opts[0]] = rec
    return records


def engine_args_fields(tree: Tree, module: str) -> list[str]:
    return sorted(tree.class_fields(module, "EngineArgs"))


def module_dict_keys(tree: Tree, module: str, name: str) -> list[str]:
    mod = tree.module(module)
    if mod is None:
        return []
    for st in mod.body:
        target = st.targets[0] if isinstance(st, ast.Assign) else getattr(st, "target", None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(
            getattr(st, "value", None), ast.Dict
        ):
            return sorted(k.value for k in st.value.keys
                          if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return []


def find_class_module(tree: Tree, class_name: str, under: str) -> str | None:
    """First module under `under` that defines `class_name` (text pre-filter, then ast)."""
    for path in sorted(tree.files):
        if path.startswith(under) and f"class {class_name}" in tree.files[path]:
            module = path[:-3].replace("/", ".").removesuffix(".__init__")
            if tree.find_class(module, class_name):
                return module
    return None


def model_architectures(tree: Tree) -> dict[str, list[str]]:
    module = "vllm.model_executor.models.registry"
    mod = tree.module(module)
    current: set[str] = set()
    previous: set[str] = set()
    for st in mod.body if mod else []:
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            target = st.targets[0] if isinstance(st, ast.Assign) else st.target
            if (isinstance(target, ast.Name) and target.id.endswith("_MODELS")
                    and isinstance(st.value, ast.Dict)):
                keys = {k.value for k in st.value.keys if isinstance(k, ast.Constant)}
                if target.id == "_PREVIOUSLY_SUPPORTED_MODELS":
                    previous |= keys
                elif target.id != "_OOT_SUPPORTED_MODELS":
                    current |= keys
    return {"supported": sorted(current), "previously_supported": sorted(previous)}


def build_vllm(version: str, workdir: Path) -> dict[str, Any]:
    pkg = download("vllm", version, workdir, ("vllm/",))
    tree = Tree(pkg.files)
    arg_utils = "vllm.engine.arg_utils"
    options = extract_vllm_options(tree, arg_utils)

    def choices_of(owner: str, fname: str) -> list[str]:
        info = field_info(tree, arg_utils, owner, fname)
        return info.literal_choices or [] if info else []

    def enum_members(cls_name: str, under: str = "vllm/") -> dict[str, Any]:
        mod = find_class_module(tree, cls_name, under)
        if mod is None:
            return {}
        found = tree.find_class(mod, cls_name)
        assert found is not None
        return tree.enum_members(found[1])

    def enum_names(cls_name: str, under: str = "vllm/") -> list[str]:
        return sorted(enum_members(cls_name, under))

    # Legacy per-model MTP names vLLM rewrites to "mtp" (with a warning).
    mtp_aliases = sorted(set(tree.strings("vllm.config.speculative",
                                          ast.Name(id="MTPModelTypes")) or []) - {"mtp"})

    all2all_cli = options.get("--all2all-backend")
    option_strings = sorted({s for r in options.values() for s in r.strings})
    bool_opts = sorted({s for r in options.values() if r.boolean_optional
                        for s in r.strings if s.startswith("--")})
    rules = [BOOL_RULE]
    argparse_utils = tree.files.get("vllm/utils/argparse_utils.py", "")
    if 'startswith("-O")' in argparse_utils:
        tree.module("vllm.utils.argparse_utils")
        rules.append("FlexibleArgumentParser rewrites -O<n>, -O <n> and -O=<n> to "
                     "--optimization-level <n>.")
    if "Convert underscores to dashes" in argparse_utils:
        rules.append("FlexibleArgumentParser accepts underscores for dashes in long option "
                     "names and dotted --x.key=value for JSON-config options.")

    envs = module_dict_keys(tree, "vllm.envs", "environment_variables")
    data: dict[str, Any] = {
        "engine": "vllm",
        "version": version,
        "option_strings": option_strings,
        "boolean_optional_options": bool_opts,
        "rules": rules,
        "options": {
            name: _clean({
                "strings": sorted(r.strings),
                "config_field": r.config_field,
                "boolean_optional": r.boolean_optional or None,
                "store_true": r.store_true or None,
                "choices": r.choices,
                "choices_enforced_by_argparse": (r.choices_enforced if r.choices else None),
                "notes": r.notes or None,
            })
            for name, r in sorted(options.items())
        },
        "engine_args_fields": engine_args_fields(tree, arg_utils),
        "choices": {
            "attention_backends": enum_names("AttentionBackendEnum"),
            "moe_backends": choices_of("KernelConfig", "moe_backend"),
            "linear_backends": choices_of("KernelConfig", "linear_backend"),
            # What --all2all-backend accepts on the CLI (arg_utils may drop internal values).
            "all2all_backends": (all2all_cli.choices or []) if all2all_cli else [],
            "all2all_backends_config": choices_of("ParallelConfig", "all2all_backend"),
            "cudagraph_modes": enum_names("CUDAGraphMode", "vllm/config/"),
            "speculative_methods": choices_of("SpeculativeConfig", "method"),
            "kv_cache_dtypes": choices_of("CacheConfig", "cache_dtype"),
            "performance_modes": choices_of("VllmConfig", "performance_mode"),
            "speculative_mtp_aliases": mtp_aliases,
            # -O<n> / --optimization-level take the IntEnum's values.
            "optimization_levels": sorted(
                str(v) for v in enum_members("OptimizationLevel", "vllm/config/").values()
            ),
        },
        "env_vars": envs,
        "model_architectures": model_architectures(tree),
    }
    data["source"] = {
        "package": pkg.filename,
        "sha256": pkg.sha256,
        "files_parsed": sorted(tree.used),
    }
    return data


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# --------------------------------------------------------------------------- Dynamo

DYNAMO_ADDERS = {"add_argument", "add_negatable_bool_argument"}


def extract_dynamo_options(tree: Tree, module: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Option strings added in `module` through argparse or Dynamo's helpers."""
    mod = tree.module(module)
    out: dict[str, dict[str, Any]] = {}
    unresolved: list[str] = []
    if mod is None:
        return out, unresolved
    loop_vals = _loop_bindings(mod)
    for node in ast.walk(mod):
        if not isinstance(node, ast.Call):
            continue
        fname = _dotted(node.func).split(".")[-1]
        if fname not in DYNAMO_ADDERS:
            continue
        kws = {k.arg: k.value for k in node.keywords if k.arg}
        names: list[str] = []
        for a in node.args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                names.append(a.value)
        for key in ("flag_name", "obsolete_flag"):
            val = kws.get(key)
            if isinstance(val, ast.Constant) and isinstance(val.value, str):
                names.append(val.value)
            elif isinstance(val, ast.Name):
                if val.id in loop_vals:
                    names.extend(loop_vals[val.id])
                else:
                    unresolved.append(f"{module}:{node.lineno}:{key}={val.id}")
        if not names:
            continue
        action = ast.unparse(kws["action"]) if "action" in kws else ""
        rec: dict[str, Any] = {
            "strings": sorted(names),
            "boolean_optional": (fname == "add_negatable_bool_argument"
                                 or "BooleanOptionalAction" in action) or None,
            "store_true": (action.strip("'\"") == "store_true") or None,
            "env_var": (kws["env_var"].value if isinstance(kws.get("env_var"), ast.Constant)
                        else None),
        }
        if "choices" in kws:
            ch = tree.strings(module, kws["choices"])
            rec["choices"] = sorted(set(ch)) if ch is not None else None
            if ch is None:
                rec["notes"] = ["choices computed at runtime"]
        if "deprecated" in kws and ast.unparse(kws["deprecated"]) != "None":
            rec["deprecated"] = True
        out[names[0]] = _clean(rec)
    return out, unresolved


def _loop_bindings(mod: ast.Module) -> dict[str, list[str]]:
    """`for legacy_flag, env, repl in <literal tuple>` -> {"legacy_flag": [flags...]}.

    Dynamo registers deprecated aliases in such loops; the iterable may be a local.
    """
    literals: dict[str, ast.AST] = {}
    for node in ast.walk(mod):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.List, ast.Tuple))):
            literals[node.targets[0].id] = node.value
    out: dict[str, list[str]] = {}
    for node in ast.walk(mod):
        if not isinstance(node, ast.For):
            continue
        it = literals.get(node.iter.id, node.iter) if isinstance(node.iter, ast.Name) else node.iter
        if not isinstance(it, (ast.List, ast.Tuple)):
            continue
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        for idx, tgt in enumerate(targets):
            if not isinstance(tgt, ast.Name):
                continue
            vals: list[str] = []
            for elt in it.elts:
                item = elt.elts[idx] if isinstance(elt, ast.Tuple) and len(targets) > 1 else elt
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    vals.append(item.value)
            if vals and all(v.startswith("-") for v in vals):
                out[tgt.id] = vals
    return out


def _closure(tree: Tree, roots: list[str]) -> list[str]:
    """Roots plus the dynamo.common.configuration.groups modules they import (transitively)."""
    seen: list[str] = []
    todo = list(roots)
    while todo:
        m = todo.pop(0)
        if m in seen or tree.path_of(m) is None:
            continue
        seen.append(m)
        for dep in tree.imported_modules(m):
            if dep.startswith("dynamo.common.configuration.groups."):
                todo.append(dep)
    return seen


def build_dynamo(version: str, workdir: Path) -> dict[str, Any]:
    pkg = download("ai-dynamo", version, workdir, ("dynamo/",))
    tree = Tree(pkg.files)
    sides = {
        "worker_vllm": ["dynamo.vllm.args", "dynamo.vllm.backend_args"],
        "frontend": ["dynamo.frontend.frontend_args"],
    }
    data: dict[str, Any] = {"engine": "dynamo", "version": version}
    unresolved_all: list[str] = []
    for side, roots in sides.items():
        opts: dict[str, dict[str, Any]] = {}
        for m in _closure(tree, roots):
            found, unresolved = extract_dynamo_options(tree, m)
            unresolved_all += unresolved
            for name, rec in found.items():
                opts[name] = {**rec, "defined_in": tree.path_of(m)}
        data[side] = {
            "option_strings": sorted({s for r in opts.values() for s in r["strings"]}),
            "boolean_optional_options": sorted(
                s for r in opts.values() if r.get("boolean_optional")
                for s in r["strings"] if s.startswith("--")
            ),
            "options": dict(sorted(opts.items())),
        }
    data["rules"] = [BOOL_RULE,
                     "The vLLM worker (python -m dynamo.vllm) also accepts every vLLM engine "
                     "option (AsyncEngineArgs.add_cli_args) of the vLLM it runs with."]
    if unresolved_all:
        data["unresolved"] = sorted(unresolved_all)
    data["source"] = {
        "package": pkg.filename,
        "sha256": pkg.sha256,
        "files_parsed": sorted(tree.used),
    }
    return data


# --------------------------------------------------------------------------- main


def write(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_sorted(data), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")


def _sorted(obj: Any) -> Any:
    # Every list in the catalog is a set of facts: sort it so reruns diff cleanly.
    if isinstance(obj, dict):
        return {k: _sorted(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return sorted((_sorted(v) for v in obj), key=lambda v: json.dumps(v, sort_keys=True))
    return obj


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", action="append", default=[], metavar="VERSION")
    ap.add_argument("--dynamo", action="append", default=[], metavar="VERSION")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="keep downloads here instead of a fresh temp dir")
    args = ap.parse_args(argv)
    if not args.vllm and not args.dynamo:
        ap.error("give at least one --vllm or --dynamo version")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.cache_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for v in args.vllm:
            write(build_vllm(v, work), args.out_dir / f"vllm-{v}.json")
        for v in args.dynamo:
            write(build_dynamo(v, work), args.out_dir / f"dynamo-{v}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
