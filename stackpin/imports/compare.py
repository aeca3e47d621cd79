"""Reading a DGD's serving content for comparison: components matched by serving role, argv as flags (the
comparison itself, item by item, is stackpin.imports.roundtrip.compare_items, for import round trips and
recipe parity alike).

Components are matched by serving role (frontend, worker, prefill, decode), not by name: upstream calls
them VllmDecodeWorker, stackpin `decode`. A role comes from what the worker runs (`--disaggregation-mode`,
the older `--is-prefill-worker` / `--is-decode-worker`), else its declared type; with no prefill component
at all, a worker declared `decode` serves aggregated (Dynamo's default mode), as the V4 Flash GB200 recipe's
does. Flags compare as option -> value (argparse semantics: the last occurrence wins, `--a=b` is `--a b`);
a JSON object value compares key by key (`--compilation-config.cudagraph_mode`), so formatting and key
order never count and each differing key gets its own reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

import stackpin.jsonio as jsonio
from stackpin.imports.dgd import Component, Dgd
from stackpin.jsonio import canonical_json

SWITCH = "(switch)"
FRONTEND_MODULE = "dynamo.frontend"


def options(argv: Iterable[str]) -> dict[str, str]:
    """option -> value ("(switch)" for a bare flag); positional words are ignored (dynamo.vllm takes none)."""
    words = list(argv)
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        if "=" in word:
            name, value = word.split("=", 1)
            out[name] = value
        elif i < len(words) and not words[i].startswith("--"):
            out[word] = words[i]
            i += 1
        else:
            out[word] = SWITCH
    return out


def flag_items(argv: Iterable[str]) -> dict[str, str]:
    """`options`, with each JSON-object value split into `--flag.key` items (values as canonical JSON)."""
    out: dict[str, str] = {}
    for name, value in options(argv).items():
        parsed = _json_object(value)
        if parsed is None:
            out[name] = value
            continue
        if not parsed:
            out[name] = "{}"
        for key, inner in parsed.items():
            out[f"{name}.{key}"] = canonical_json(inner).decode("utf-8")
    return out


def _json_object(value: str) -> dict[str, object] | None:
    if not value.lstrip().startswith("{"):
        return None
    try:
        parsed = jsonio.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _mode(comp: Component) -> str | None:
    opts = options(comp.entry.argv) if comp.entry else {}
    if "--disaggregation-mode" in opts:
        return opts["--disaggregation-mode"]
    if "--is-prefill-worker" in opts:
        return "prefill"
    if "--is-decode-worker" in opts:
        return "decode"
    return comp.type if comp.type in ("prefill", "decode") else None


@cache
def _worker_modules() -> frozenset[str]:
    """The modules the serving engines' workers run (`python3 -m dynamo.<engine>`, stackpin.backends)."""
    from stackpin.backends import engine, names

    return frozenset(engine(name).worker_command[-1] for name in names())


def is_worker(comp: Component) -> bool:
    if comp.entry is not None:
        return comp.entry.module in _worker_modules()
    return comp.type in ("worker", "prefill", "decode") and comp.gpus > 0


def is_frontend(comp: Component) -> bool:
    return comp.type == "frontend" or (comp.entry is not None and comp.entry.module == FRONTEND_MODULE)


def roles(dgd: Dgd) -> dict[str, Component]:
    """role -> component; a second component of one role is `role#2`. Planners and other components that
    serve no requests are left out (callers report them)."""
    workers = [c for c in dgd.components if is_worker(c) and not is_frontend(c)]
    disaggregated = any(_mode(c) == "prefill" for c in workers)
    out: dict[str, Component] = {}

    def put(role: str, comp: Component) -> None:
        name, n = role, 1
        while name in out:
            n += 1
            name = f"{role}#{n}"
        out[name] = comp

    for comp in dgd.components:
        if is_frontend(comp):
            put("frontend", comp)
    for comp in workers:
        mode = _mode(comp)
        put(("prefill" if mode == "prefill" else "decode") if disaggregated else "worker", comp)
    return out


def other_components(dgd: Dgd) -> list[Component]:
    served = {id(c) for c in roles(dgd).values()}
    return [c for c in dgd.components if id(c) not in served]
