"""Would a server-side apply of an object change nothing? Decided from the live object alone, so that a
re-apply that changes nothing needs no dry run of it (issue 37: round trips are what a user waits
for). Pure.

Server-side apply leaves an object untouched (no write, no new resourceVersion, managedFields as they
are) when the field manager's Apply entry already owns exactly the fields the body sets, at the
body's apiVersion, and every one of them has the body's value. Checked here conservatively:

- the manager's `Apply` entry (no subresource) for the body's apiVersion, and only one;
- its field set (`fieldsV1`) equal to the body's, lists taken whole: the set below a list (`k:`, `v:`,
  `i:` entries) is not compared, the list's value is, item for item;
- every field of the body equal in the live object (maps may hold more: other managers' fields stay);
- `apiVersion`, `kind`, `metadata.name` and `metadata.namespace` the same (SSA does not track them).

Anything else (a null in the body, another manager's change of a value, a field the manager owned
and the body dropped, defaults written into a list item) answers False: the caller dry-runs as
before. A True answer means the apply is left out; the dry run before every write is unchanged.
"""

from __future__ import annotations

from typing import Any

IDENTITY = ("name", "namespace")


def _body_fields(node: Any, path: tuple[str, ...], out: set[tuple[str, ...]]) -> bool:
    """The field paths a body sets (maps opened, lists and scalars as leaves); False on a null."""
    if node is None:
        return False
    if isinstance(node, dict) and node:
        return all(_body_fields(value, (*path, key), out) for key, value in node.items())
    out.add(path)
    return True


def _owned_fields(node: Any, path: tuple[str, ...], out: set[tuple[str, ...]]) -> None:
    """The field paths a fieldsV1 set names, a list (its k:/v:/i: members) taken as one leaf."""
    children = [k for k in node if k != "."] if isinstance(node, dict) else []
    if not children or any(not k.startswith("f:") for k in children):
        out.add(path)
        return
    for key in children:
        _owned_fields(node[key], (*path, key[2:]), out)


def _holds(live: Any, body: Any) -> bool:
    """Every field of `body` has the same value in `live` (maps may hold more; lists equal as a whole)."""
    if isinstance(body, dict) and body:
        return isinstance(live, dict) and all(k in live and _holds(live[k], v) for k, v in body.items())
    if isinstance(body, dict):
        return isinstance(live, dict)
    return isinstance(live, bool) == isinstance(body, bool) and live == body


def apply_changes_nothing(live: dict[str, Any] | None, body: dict[str, Any], manager: str) -> bool:
    """True when applying `body` as `manager` would leave `live` exactly as it is (see the module docstring)."""
    if live is None or live.get("apiVersion") != body.get("apiVersion") or live.get("kind") != body.get("kind"):
        return False
    meta, live_meta = body.get("metadata") or {}, live.get("metadata") or {}
    if any(meta.get(k) != live_meta.get(k) for k in IDENTITY) or live_meta.get("deletionTimestamp"):
        return False
    entries = [e for e in live_meta.get("managedFields") or [] if isinstance(e, dict) and e.get("manager") == manager
               and e.get("operation") == "Apply" and not e.get("subresource")]
    if len(entries) != 1 or entries[0].get("apiVersion") != body["apiVersion"] or \
            entries[0].get("fieldsType") != "FieldsV1" or not isinstance(entries[0].get("fieldsV1"), dict):
        return False
    rest = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
    rest["metadata"] = {k: v for k, v in meta.items() if k not in IDENTITY}
    if not rest["metadata"]:
        del rest["metadata"]
    sets: set[tuple[str, ...]] = set()
    if not _body_fields(rest, (), sets):
        return False
    owned: set[tuple[str, ...]] = set()
    _owned_fields(entries[0]["fieldsV1"], (), owned)
    return sets == owned and _holds({k: v for k, v in live.items() if k not in ("apiVersion", "kind")}, rest)
