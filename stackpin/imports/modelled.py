"""A worker's flags -> profile fields, through the engine's own `modelled` table (stackpin.backends).

Render writes each modelled field as the option its engine's table names; import reads the same table back:
an option the table has becomes its field (`{pool}` standing for the pool's own), every other option goes to
the pool's engineArgs. Options are first resolved to the spelling the table uses: the catalog's canonical
flag (`--tensor-parallel-size` -> `--tp-size`), else argparse's unique-prefix abbreviation (Dynamo's SGLang
parser is a plain argparse.ArgumentParser, allow_abbrev left on: dynamo/sglang/args.py:570 in ai-dynamo 1.6.1,
so `--tp` reaches `--tp-size`). Used for SGLang; vLLM's import reads its tables through profile.py's `reading`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stackpin.imports.compare import SWITCH
from stackpin.profile.engine_args import POOL

if TYPE_CHECKING:
    from stackpin.catalog.flags import FlagCatalog

# Modelled options whose value is not the field's value as written (the field reads it differently).
# option -> (field path, value for the field) for switches; the rest are read in `Mapped.set`.
_SWITCH_FIELDS = {
    "--disable-radix-cache": ("spec.kvCache.prefixCaching", False),
    "--disable-flashinfer-autotune": ("spec.autotune.mode", "off"),
    "--enable-dp-attention": (f"{POOL}.expertParallel", True),
    "--ep-size": (f"{POOL}.expertParallel", True),  # render writes the EP size from the parallel sizes
}
# Modelled options whose value is not one field's value (a mode spread over two options, a count render
# derives from another): reported as not carried rather than guessed.
_NOT_READ = frozenset({"--cuda-graph-backend-decode", "--cuda-graph-backend-prefill", "--speculative-algorithm",
                       "--speculative-num-draft-tokens", "--speculative-eagle-topk"})
# Read by the importer itself (roles, the KV connector, KV events), never written as a field here.
_CONSUMED_ELSEWHERE = frozenset({"--disaggregation-mode", "--disaggregation-transfer-backend", "--kv-events-config"})


def resolve(written: str, catalogs: Iterable[FlagCatalog | None]) -> str:
    """The option `written` reaches in the worker's parser: canonical spelling, else the one option it is a
    unique prefix of (argparse abbreviation), else as written."""
    known = [c for c in catalogs if c is not None]
    for catalog in known:
        canonical = catalog.canonical(written)
        if canonical is not None:
            return canonical
    if "=" in written or not written.startswith("--"):
        return written
    matches = {catalog.canonical(option) or option for catalog in known for option in catalog.options
               if option.startswith(written)}
    return matches.pop() if len(matches) == 1 else written


def number(value: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


@dataclass
class Mapped:
    """One worker's flags split by the table: stack-wide fields, the pool's own, the rest."""

    stack: dict[str, Any] = field(default_factory=dict)  # "spec.kvCache.blockSize" -> value
    pool: dict[str, Any] = field(default_factory=dict)  # "tensorParallel" -> value
    rest: dict[str, str] = field(default_factory=dict)  # option -> value as written (engineArgs / dynamoArgs)
    unmapped: dict[str, str] = field(default_factory=dict)  # modelled options stackpin cannot read back


def map_flags(opts: Mapping[str, str], modelled: Mapping[str, str]) -> Mapped:
    """`opts` (already resolved) split through `modelled` (option -> field path)."""
    out = Mapped()
    for option, value in sorted(opts.items()):
        if option in _CONSUMED_ELSEWHERE:
            continue
        path = modelled.get(option)
        if path is None:
            out.rest[option] = value
            continue
        if option in _SWITCH_FIELDS:
            path, converted = _SWITCH_FIELDS[option]
        elif value == SWITCH or option in _NOT_READ:
            # a switch or a whole section (spec.speculative): no single value to write back
            out.unmapped[option] = value
            continue
        else:
            converted = number(value)
        if path.startswith(POOL + "."):
            out.pool[path.removeprefix(POOL + ".")] = converted
        else:
            out.stack[path] = converted
    return out


def put(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set `spec.a.b` (path relative to the profile document) in `doc` (the profile's spec for `spec.`)."""
    parts = path.removeprefix("spec.").split(".")
    for part in parts[:-1]:
        doc = doc.setdefault(part, {})
    doc[parts[-1]] = value
