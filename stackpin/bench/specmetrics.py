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

from stackpin.bench.acceptance import Acceptance, facts

MAX_METRICS_BYTES = 16 << 20  # a vLLM /metrics page is tens of KB; histograms per engine stay far below this
TIMEOUT_S = 5.0  # the whole read, connect to last byte


@dataclass(frozen=True)
class Reading:
    """The spec-decode counters of one or more /metrics pages, summed over their series (engines, workers)."""

    engine: str  # "vllm" or "sglang"; "" where the page was read and holds no spec-decode counter
    totals: dict[str, float]  # role (acceptance.yaml's counter keys) -> value
    positions: dict[str, dict[int, float]] = field(default_factory=dict)  # per-position role -> position -> value
    draft_tokens_per_verify: float | None = None  # SGLang's gauge less the root

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


def parse(text: str) -> Reading:
    """The spec-decode counters a /metrics page holds (engine "" when it holds none)."""
    vllm, sglang, sim = facts()["vllm"], facts()["sglang"], facts()["stackpin_sim"]
    vllm_names = {name: role for role, name in vllm["counters"].items()}
    vllm_names[sim["reached_per_position"]] = "reached_per_position"
    sglang_names = {name: role for role, name in sglang["counters"].items()}
    gauge_name = sglang["draft_tokens_gauge"]
    position_label = vllm["position_label"]
    totals: dict[str, dict[str, float]] = {"vllm": defaultdict(float), "sglang": defaultdict(float)}
    positions: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    gauge: float | None = None
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(("vllm:", "sglang:", "stackpin:")):
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
        if name in vllm_names:
            role = vllm_names[name]
            if role in ("accepted_per_position", "reached_per_position"):
                found = dict(_LABEL.findall(labels or ""))
                position = found.get(position_label, "")
                if position.isdigit() and int(position) < 1024:
                    positions[role][int(position)] += value
            else:
                totals["vllm"][role] += value
        elif name in sglang_names:
            totals["sglang"][sglang_names[name]] += value
        elif name == gauge_name and value > 1:
            gauge = max(gauge or 0.0, value - 1)
    if "drafts" in totals["vllm"]:
        return Reading("vllm", dict(totals["vllm"]), {k: dict(v) for k, v in positions.items()})
    if "verify_calls" in totals["sglang"]:
        return Reading("sglang", dict(totals["sglang"]), {}, gauge)
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

    if after.engine == "vllm":
        drafts, tokens, accepted = delta("drafts"), delta("draft_tokens"), delta("accepted_tokens")
        positions, reached = per_position("accepted_per_position"), per_position("reached_per_position")
        if drafts is None or tokens is None or accepted is None or positions is None or reached is None:
            return None
        return Acceptance(method=method, drafting=drafting, drafts=drafts, draft_tokens=tokens,
                          accepted_per_position=positions, accepted_tokens=accepted, reached_per_position=reached)
    verify, generated, requests = delta("verify_calls"), delta("generation_tokens"), delta("requests")
    if verify is None or generated is None or requests is None:
        return None
    gauge = after.draft_tokens_per_verify
    return Acceptance(method=method, drafting=drafting, drafts=verify,
                      draft_tokens=round(verify * gauge) if gauge else None,
                      accepted_per_position=(), accepted_tokens=max(generated - requests - verify, 0))
