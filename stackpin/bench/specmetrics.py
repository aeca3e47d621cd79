"""Reading an endpoint's speculative-decoding counters from its Prometheus /metrics (text exposition
format 0.0.4): vLLM's `vllm:spec_decode_*`, SGLang's `sglang:spec_verify_calls_total` with its token and
request counters, and the extra counter stackpin's simulator serves (acceptance.yaml names each, with its
source). A point's acceptance is the difference of two readings (`difference`).

Not exposed is an answer, never an error: a 404, an unreachable /metrics, a page with no spec-decode
counter (Dynamo's frontend: its workers serve the engines' counters on their own system ports) are each
recorded as why there is no acceptance.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from stackpin.bench.acceptance import FACTS_FILE, Acceptance, facts

MAX_METRICS_BYTES = 16 << 20  # a vLLM /metrics page is tens of KB; histograms per engine stay far below this
TIMEOUT_S = 5.0  # the whole read, connect to last byte


@dataclass(frozen=True)
class Reading:
    """The spec-decode counters of one or more /metrics pages, summed over their series (engines, workers)."""

    engine: str  # the acceptance.yaml engines section whose counters it holds; "" where the page holds none
    totals: dict[str, float]  # role (acceptance.yaml's counter keys) -> value
    positions: dict[str, dict[int, float]] = field(default_factory=dict)  # per-position role -> position -> value
    draft_tokens_per_verify: float | None = None  # a verify_calls engine's gauge less the root

    def plus(self, other: Reading) -> Reading:
        if self.engine and other.engine and other.engine != self.engine:
            raise ValueError(f"one reading is {self.engine}'s, the other {other.engine}'s")
        totals = dict(self.totals)
        for role, value in other.totals.items():
            totals[role] = totals.get(role, 0.0) + value
        positions = {role: dict(values) for role, values in self.positions.items()}
        for role, values in other.positions.items():
            mine = positions.setdefault(role, {})
            for i, n in values.items():
                mine[i] = mine.get(i, 0.0) + n
        gauge = self.draft_tokens_per_verify if self.draft_tokens_per_verify is not None \
            else other.draft_tokens_per_verify
        return Reading(self.engine or other.engine, totals, positions, gauge)


_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
COUNTING = ("drafts", "verify_calls")  # acceptance.yaml's counting kinds, each named for the counter that marks it
PER_POSITION = ("accepted_per_position", "reached_per_position")


def sections() -> dict[str, dict[str, Any]]:
    """acceptance.yaml's engine sections, in its order: key -> counters, counting kind, labels."""
    found: dict[str, dict[str, Any]] = facts()["engines"]
    for key, section in found.items():
        if section.get("counting") not in COUNTING:
            raise ValueError(f"{FACTS_FILE}: engines.{key}.counting: one of {', '.join(COUNTING)}")
    return found


@dataclass(frozen=True)
class _Names:
    counters: dict[str, tuple[str, str]]  # exposed name -> (section, role)
    gauges: dict[str, str]  # exposed name of a draft-tokens-per-verify gauge -> section
    prefixes: tuple[str, ...]  # what every name above starts with: lines that start otherwise are skipped


@cache
def _names() -> _Names:
    counters = {name: (key, role) for key, section in sections().items()
                for role, name in section["counters"].items()}
    sim = facts()["stackpin_sim"]
    counters[sim["reached_per_position"]] = (sim["serves"], "reached_per_position")
    gauges = {s["draft_tokens_gauge"]: key for key, s in sections().items() if "draft_tokens_gauge" in s}
    prefixes = tuple(sorted({name.split(":", 1)[0] + ":" for name in (*counters, *gauges)}))
    return _Names(counters, gauges, prefixes)


def parse(text: str) -> Reading:
    """The spec-decode counters a /metrics page holds (engine "" when it holds none)."""
    names, engines = _names(), sections()
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    positions: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    gauges: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(names.prefixes):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        if value != value or value in (float("inf"), float("-inf")) or value < 0:
            continue  # not a count
        if name in names.counters:
            key, role = names.counters[name]
            if role in PER_POSITION:
                found = dict(_LABEL.findall(labels or ""))
                position = found.get(engines[key]["position_label"], "")
                if position.isdigit() and int(position) < 1024:
                    positions[key][role][int(position)] += value
            else:
                totals[key][role] += value
        elif name in names.gauges and value > 1:
            key = names.gauges[name]
            gauges[key] = max(gauges.get(key, 0.0), value - 1)
    for key, section in engines.items():
        if section["counting"] in totals[key]:
            return Reading(key, dict(totals[key]), {role: dict(v) for role, v in positions[key].items()},
                           gauges.get(key))
    return Reading("", {})


def check_url(url: str, option: str) -> None:
    """An http(s) URL with a host, or a one-line refusal (urllib would read a file:// one from disk)."""
    import urllib.parse

    from stackpin.errors import StackpinError

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise StackpinError(f"{option} {url!r}: give an http:// or https:// URL, e.g. http://127.0.0.1:8081/metrics")


def read(urls: tuple[str, ...], timeout_s: float = TIMEOUT_S) -> Reading | str:
    """Read every URL's counters and sum them (the workers of one deployment); a string says why a page could
    not be read (the first one)."""
    total: Reading | None = None
    for url in urls:
        got = _scrape(url, timeout_s)
        if isinstance(got, str):
            return got
        try:
            total = got if total is None else total.plus(got)
        except ValueError as exc:
            return f"not read: {url}: {exc}"
    assert total is not None
    return total


def _scrape(url: str, timeout_s: float) -> Reading | str:
    if not url.startswith(("http://", "https://")):
        return f"not read: {url}: not an http(s) URL"
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http(s) only
            chunks: list[bytes] = []
            size = 0
            while chunk := response.read(1 << 16):
                size += len(chunk)
                if size > MAX_METRICS_BYTES:
                    return f"not read: GET {url} answered over {MAX_METRICS_BYTES >> 20} MiB"
                if time.monotonic() > deadline:
                    return f"not read: GET {url} took over {timeout_s:g} s"
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        return f"not exposed: GET {url} answered {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"not exposed: GET {url}: {getattr(exc, 'reason', exc)}"
    return parse(b"".join(chunks).decode("utf-8", "replace"))


def difference(before: Reading, after: Reading, method: str | None, drafting: str | None = None) -> Acceptance | None:
    """What the endpoint counted between two readings; None where it counts none, or a counter went backwards
    (a restart). A first reading without the counters counts as zeros: SGLang's appear with the first request
    that finishes, as prometheus_client shows a labelled counter only once a series of it is touched."""
    if not after.engine or (before.engine and before.engine != after.engine):
        return None

    def delta(role: str) -> int | None:
        d = after.totals.get(role, 0.0) - before.totals.get(role, 0.0)
        return None if d < 0 else round(d)

    def per_position(role: str) -> tuple[int, ...] | None:
        a, b = after.positions.get(role, {}), before.positions.get(role, {})
        n = max([*a, *b], default=-1) + 1
        out = tuple(round(a.get(i, 0.0) - b.get(i, 0.0)) for i in range(n))
        return None if any(d < 0 for d in out) else out

    if sections()[after.engine]["counting"] == "drafts":
        drafts, tokens, accepted = delta("drafts"), delta("draft_tokens"), delta("accepted_tokens")
        positions, reached = per_position("accepted_per_position"), per_position("reached_per_position")
        if drafts is None or tokens is None or accepted is None or positions is None or reached is None:
            return None
        return Acceptance(method=method, drafting=drafting, drafts=drafts, draft_tokens=tokens,
                          accepted_per_position=positions, accepted_tokens=accepted, reached_per_position=reached)
    # verify_calls: a request's first token comes from the prefill, not a verify, so it is taken out.
    verify, generated, requests = delta("verify_calls"), delta("generation_tokens"), delta("requests")
    if verify is None or generated is None or requests is None:
        return None
    gauge = after.draft_tokens_per_verify
    return Acceptance(method=method, drafting=drafting, drafts=verify,
                      draft_tokens=round(verify * gauge) if gauge else None,
                      accepted_per_position=(), accepted_tokens=max(generated - requests - verify, 0))
